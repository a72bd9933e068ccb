// The server's I/O thread over a real ROUTER socket: a peer that asks for replies and never
// reads them is cut once it holds UnreadReplyBound unread (the hostile-peer finding: a peer
// pinned a round's sum each round, up to the send queue of 16,384 messages).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "bytecomp/common/link_probe.h"
#include "bytecomp/common/transport.h"
#include "data.pb.h"
#include "server_test_util.h"
#include "server_threads.h"

namespace bytecomp::server {
namespace {

// The next event of a socket monitor (version 1: event and value, then the endpoint) within
// `wait`, or nullopt.
std::optional<uint16_t> NextEvent(zmq::socket_t& monitor, std::chrono::milliseconds wait) {
  absl::StatusOr<std::vector<zmq::message_t>> frames = RecvFrames(monitor, wait);
  if (!frames.ok() || frames->empty() || (*frames)[0].size() != 6) return std::nullopt;
  uint16_t event = 0;
  std::memcpy(&event, (*frames)[0].data(), sizeof(event));
  return event;
}

TEST(IoLoopTest, APeerThatLeavesItsRepliesUnreadIsCut) {
  zmq::context_t context(1);
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.set(zmq::sockopt::sndbuf, 64 << 10);
  router.bind("tcp://127.0.0.1:*");
  const std::string address = router.get(zmq::sockopt::last_endpoint);
  ServerQueues queues(1);
  IoLoop io(router, RequestDispatcher(server_test::Job(/*workers=*/2), 1), queues);
  std::thread io_thread([&io] { io.Run(); });

  // A tool outside the job (sender -1) may ask for link probe transfers; this one asks for many
  // and reads none.
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::rcvhwm, 1);
  dealer.set(zmq::sockopt::rcvbuf, 4096);
  dealer.set(zmq::sockopt::reconnect_ivl, -1);
  ASSERT_EQ(
      zmq_socket_monitor(dealer.handle(), "inproc://io-loop-test-dealer", ZMQ_EVENT_DISCONNECTED),
      0);
  zmq::socket_t monitor(context, zmq::socket_type::pair);
  monitor.connect("inproc://io-loop-test-dealer");
  dealer.connect(address);

  proto::DataHeader probe;
  probe.set_op(proto::OP_PROBE);
  probe.set_sender(-1);
  probe.set_probe_reply_bytes(int64_t{4} << 20);
  const int64_t asked = 2 * kMinUnreadReplyBytes / probe.probe_reply_bytes();
  for (int64_t i = 0; i < asked; ++i) {
    probe.set_request_id(static_cast<uint64_t>(i + 1));
    zmq::message_t frame = ProtoFrame(probe);
    ASSERT_TRUE(dealer.send(frame, zmq::send_flags::none));
  }
  // Twice the bound asked for: the server cuts the connection (the dealer does not reconnect).
  std::optional<uint16_t> event = NextEvent(monitor, std::chrono::seconds(20));
  ASSERT_TRUE(event.has_value()) << "the server never cut the peer that reads nothing";
  EXPECT_EQ(*event, ZMQ_EVENT_DISCONNECTED);

  queues.commands.Push(StopCommand{});
  io_thread.join();
  zmq_socket_monitor(dealer.handle(), nullptr, 0);
}

}  // namespace
}  // namespace bytecomp::server
