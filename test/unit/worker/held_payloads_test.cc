#include "held_payloads.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>
#include <zmq.hpp>

namespace bytecomp::worker {
namespace {

TEST(HeldPayloads, AwaitNoneReturnsHowManyAreStillHeld) {
  HeldPayloads held;
  EXPECT_EQ(held.AwaitNone(absl::ZeroDuration()), 0);
  held.Hold();
  held.Hold();
  held.Release();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(held.AwaitNone(absl::Milliseconds(50)), 1);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(50));
  held.Release();
  EXPECT_EQ(held.AwaitNone(absl::ZeroDuration()), 0);
}

TEST(HeldPayloads, AReleaseOnAnotherThreadEndsTheWait) {
  HeldPayloads held;
  held.Hold();
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    held.Release();
  });
  EXPECT_EQ(held.AwaitNone(absl::Seconds(30)), 0);
  releaser.join();
}

// What the data loop relies on: closing a socket makes ZeroMQ drop the zero-copy messages it
// still holds, queued or half written, on ZeroMQ's own threads and soon; their free functions
// then release them. Over TCP, as the data loop's sockets are (an inproc connection waiting
// for its bind would keep them until the context ends).
struct Release {
  HeldPayloads* held;
  std::thread::id* freed_on;
};
void FreePayload(void* data, void* hint) {
  auto* release = static_cast<Release*>(hint);
  *release->freed_on = std::this_thread::get_id();
  delete[] static_cast<char*>(data);
  release->held->Release();
  delete release;
}

TEST(HeldPayloads, AClosedSocketsPayloadsAreReleasedOnZeroMQsThreads) {
  constexpr int kMessages = 64;
  constexpr size_t kBytes = 1 << 20;  // 64 MiB in all: more than the peer and TCP take in
  zmq::context_t context(1);
  zmq::socket_t stalled(context, zmq::socket_type::router);  // a peer that never reads
  stalled.set(zmq::sockopt::rcvhwm, 1);
  stalled.set(zmq::sockopt::linger, 0);
  stalled.bind("tcp://127.0.0.1:*");
  HeldPayloads held;
  std::vector<std::thread::id> freed_on(kMessages);
  {
    zmq::socket_t dealer(context, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::linger, 0);
    dealer.set(zmq::sockopt::sndhwm, 0);
    dealer.connect(stalled.get(zmq::sockopt::last_endpoint));
    for (int i = 0; i < kMessages; ++i) {
      zmq::message_t msg(new char[kBytes], kBytes, &FreePayload, new Release{&held, &freed_on[i]});
      held.Hold();
      ASSERT_TRUE(dealer.send(msg, zmq::send_flags::dontwait));
    }
    EXPECT_GT(held.AwaitNone(absl::Milliseconds(300)), 0);  // the peer does not read them all
  }                                                         // closed: ZeroMQ drops what it holds
  EXPECT_EQ(held.AwaitNone(absl::Seconds(30)), 0);
  for (const std::thread::id& id : freed_on) EXPECT_NE(id, std::this_thread::get_id());
}

}  // namespace
}  // namespace bytecomp::worker
