// A test peer that plays a worker or a server against the scheduler: one DEALER socket,
// one ControlMessage per frame, as the real nodes do. It registers with its token and sends it
// with every later message (unless told not to); the scheduler's heartbeats are counted and
// skipped by Recv.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/node_token.h"
#include "bytecomp/common/transport.h"
#include "control.pb.h"
#include "zmq.hpp"

namespace bytecomp::testing {

class TestNode {
 public:
  TestNode(zmq::context_t& context, int port, const std::string& routing_id = "",
           NodeToken token = NewNodeToken())
      : token_(token), socket_(context, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    if (!routing_id.empty()) socket_.set(zmq::sockopt::routing_id, routing_id);
    socket_.connect(absl::StrCat("tcp://127.0.0.1:", port));
  }

  void Send(const proto::ControlMessage& message, bool with_token = true) {
    proto::ControlMessage sent = message;
    if (with_token && !sent.has_register_()) sent.set_token(TokenBytes(token_));
    std::vector<zmq::message_t> frames;
    frames.push_back(ProtoFrame(sent));
    ASSERT_TRUE(SendFrames(socket_, frames).ok());
  }
  void SendRaw(const std::vector<std::string>& parts) {
    std::vector<zmq::message_t> frames;
    for (const std::string& p : parts) frames.emplace_back(p.data(), p.size());
    ASSERT_TRUE(SendFrames(socket_, frames).ok());
  }

  void Register(proto::Role role, int requested_rank, const std::string& hostname = "hostA",
                const std::string& data_address = "") {
    proto::ControlMessage m;
    proto::Register* r = m.mutable_register_();
    r->set_role(role);
    r->set_requested_rank(requested_rank);
    r->set_hostname(hostname);
    r->set_pid(4242);
    r->set_data_address(!data_address.empty() || role != proto::ROLE_SERVER
                            ? data_address
                            : std::string("tcp://127.0.0.1:7000"));
    r->set_token(TokenBytes(token_));
    Send(m);
  }
  void Heartbeat() {
    proto::ControlMessage m;
    m.mutable_heartbeat()->set_sequence(++heartbeat_sequence_);
    Send(m);
  }
  void Barrier(const std::string& group, uint64_t sequence) {
    proto::ControlMessage m;
    m.mutable_barrier_request()->set_group(group);
    m.mutable_barrier_request()->set_sequence(sequence);
    Send(m);
  }
  void Declare(const std::string& name, int64_t elements, int dtype) {
    proto::ControlMessage m;
    m.mutable_declare_tensor()->set_name(name);
    m.mutable_declare_tensor()->set_element_count(elements);
    m.mutable_declare_tensor()->set_dtype(dtype);
    Send(m);
  }

  // Returns once the scheduler has handled everything this node sent before: messages from
  // different sockets reach the scheduler in any order, so a test that needs "A's message
  // before B's" syncs A first. A barrier request for a group that does not exist is always
  // answered with an error, registered or not.
  void Sync() {
    Barrier("no-such-group", 0);
    EXPECT_EQ(Expect(proto::ControlMessage::kError).body_case(), proto::ControlMessage::kError);
  }

  // The next message but the scheduler's heartbeats, or nullopt after `timeout_ms`.
  std::optional<proto::ControlMessage> Recv(int timeout_ms = 2000) {
    const int64_t deadline = MonotonicMs() + timeout_ms;
    while (true) {
      absl::StatusOr<std::vector<zmq::message_t>> frames = RecvFrames(
          socket_, std::chrono::milliseconds(std::max<int64_t>(0, deadline - MonotonicMs())));
      EXPECT_TRUE(frames.ok());
      if (!frames.ok() || frames->empty()) return std::nullopt;
      EXPECT_EQ(frames->size(), 1u) << "the scheduler sends one frame per message";
      proto::ControlMessage m;
      EXPECT_TRUE(ParseFrame(frames->front(), &m).ok());
      if (m.has_heartbeat()) {
        ++heartbeats_;
        continue;
      }
      return m;
    }
  }
  // The scheduler's heartbeats Recv skipped so far.
  int heartbeats() const { return heartbeats_; }
  const NodeToken& token() const { return token_; }
  // The next message, which must have the given body.
  proto::ControlMessage Expect(proto::ControlMessage::BodyCase body, int timeout_ms = 2000) {
    std::optional<proto::ControlMessage> m = Recv(timeout_ms);
    EXPECT_TRUE(m.has_value()) << "no message within " << timeout_ms << " ms";
    if (!m.has_value()) return {};
    EXPECT_EQ(m->body_case(), body) << m->ShortDebugString();
    return *m;
  }
  std::string ExpectError(int timeout_ms = 2000) {
    return Expect(proto::ControlMessage::kError, timeout_ms).error().message();
  }
  void ExpectNothing(int timeout_ms) {
    std::optional<proto::ControlMessage> m = Recv(timeout_ms);
    EXPECT_FALSE(m.has_value()) << m->ShortDebugString();
  }

 private:
  NodeToken token_;
  zmq::socket_t socket_;
  uint64_t heartbeat_sequence_ = 0;
  int heartbeats_ = 0;
};

}  // namespace bytecomp::testing
