// A hostile peer for test_hostile_peers.py: it reaches a job's ports without being a node of
// the job (no token) and tries what the attacks did.
//
//   hostile_peer pull-flood tcp://SERVER SECONDS
//       pulls, pushes of a value and aborting pushes as worker 1, for rounds 0.. of the first
//       keys, as fast as it can, and never reads a reply
//   hostile_peer control-flood tcp://SCHEDULER SECONDS
//       one-byte messages to the scheduler, as fast as it can, never reading a reply
//   hostile_peer control-impostor tcp://SCHEDULER
//       tries to register (without a token, then as a taken worker rank and as a server), to
//       shut the job down, to declare and to join a barrier without registering, then to take
//       worker rank 1 by registering every millisecond for 2 s; each must be refused
//
// Prints what it sent; exit 0 when every answer it waited for was a refusal, 1 otherwise.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bytecomp/common.h"
#include "control.pb.h"
#include "data.pb.h"

namespace {

using Clock = std::chrono::steady_clock;

// A socket that reads nothing and keeps as little as it can, so that what the daemon queues
// for it stays on the daemon's side.
zmq::socket_t NeverReading(zmq::context_t& ctx, const std::string& address) {
  zmq::socket_t sock(ctx, zmq::socket_type::dealer);
  sock.set(zmq::sockopt::linger, 0);
  sock.set(zmq::sockopt::rcvhwm, 1);
  sock.set(zmq::sockopt::rcvbuf, 4096);
  sock.set(zmq::sockopt::sndhwm, 10000);
  sock.connect(address);
  return sock;
}

bool Send(zmq::socket_t& sock, const std::string& frame, const std::string* payload = nullptr) {
  zmq::message_t m(frame.data(), frame.size());
  try {
    if (payload == nullptr) return sock.send(m, zmq::send_flags::dontwait).has_value();
    if (!sock.send(m, zmq::send_flags::dontwait | zmq::send_flags::sndmore)) return false;
    zmq::message_t p(payload->data(), payload->size());
    return sock.send(p, zmq::send_flags::dontwait).has_value();
  } catch (const zmq::error_t&) {
    return false;
  }
}

int PullFlood(const std::string& address, double seconds) {
  zmq::context_t ctx(1);
  zmq::socket_t sock = NeverReading(ctx, address);
  bytecomp::proto::DataHeader h;
  h.set_op(bytecomp::proto::OP_PULL);
  h.set_sender(1);
  h.set_dtype(bytecomp::proto::DTYPE_FLOAT32);
  h.set_element_count(1);
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  const std::string one_float(4, '\0');
  uint64_t sent = 0, round = 0;
  while (Clock::now() < end) {
    for (uint32_t tensor = 0; tensor < 8; ++tensor) {
      h.set_key(bytecomp::MakeKey(tensor, 0));
      h.set_round(round);
      h.set_op(bytecomp::proto::OP_PULL);
      h.clear_error();
      h.set_payload_bytes(0);
      if (Send(sock, h.SerializeAsString())) ++sent;
      // A value pushed as worker 1 into the round (tensor 0 is one fp32 element).
      h.set_op(bytecomp::proto::OP_PUSH);
      h.set_payload_bytes(4);
      if (Send(sock, h.SerializeAsString(), &one_float)) ++sent;
      h.set_payload_bytes(0);
      // An abort that would blame worker 1 for the round.
      h.set_op(bytecomp::proto::OP_PUSH);
      h.set_error("aborted by an outsider");
      if (Send(sock, h.SerializeAsString())) ++sent;
    }
    ++round;
    if (sent % 4096 == 0) std::this_thread::yield();
  }
  std::printf("PULL FLOOD: sent %llu requests in %.1f s, read none\n",
              static_cast<unsigned long long>(sent), seconds);
  return 0;
}

int ControlFlood(const std::string& address, double seconds) {
  zmq::context_t ctx(1);
  zmq::socket_t sock = NeverReading(ctx, address);
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  uint64_t sent = 0;
  while (Clock::now() < end) {
    if (Send(sock, "x")) ++sent;
  }
  std::printf("CONTROL FLOOD: sent %llu one-byte messages in %.1f s, read none\n",
              static_cast<unsigned long long>(sent), seconds);
  return 0;
}

// Sends `m` and returns the scheduler's answer (an empty message when none came in `wait_s`).
bytecomp::proto::ControlMessage Ask(zmq::socket_t& sock, const bytecomp::proto::ControlMessage& m,
                                    int wait_s = 3) {
  std::vector<zmq::message_t> frames;
  frames.push_back(bytecomp::ProtoFrame(m));
  bytecomp::proto::ControlMessage reply;
  if (!bytecomp::SendFrames(sock, frames).ok()) return reply;
  const auto end = Clock::now() + std::chrono::seconds(wait_s);
  while (Clock::now() < end) {
    absl::StatusOr<std::vector<zmq::message_t>> got =
        bytecomp::RecvFrames(sock, std::chrono::milliseconds(200));
    if (!got.ok() || got->empty()) continue;
    reply.Clear();
    if (!bytecomp::ParseFrame(got->back(), &reply).ok() || reply.has_heartbeat()) continue;
    return reply;
  }
  reply.Clear();
  return reply;
}

int ControlImpostor(const std::string& address) {
  zmq::context_t ctx(1);
  zmq::socket_t sock(ctx, zmq::socket_type::dealer);
  bytecomp::ConfigureSocket(sock);
  sock.connect(address);
  int accepted = 0;
  auto expect_error = [&](const char* what, const bytecomp::proto::ControlMessage& m,
                          const char* expect, int wait_s = 3) {
    const bytecomp::proto::ControlMessage reply = Ask(sock, m, wait_s);
    const bool ok = reply.has_error() && reply.error().message().find(expect) != std::string::npos;
    std::printf(
        "%s %s: %s\n", ok ? "refused " : "ACCEPTED", what,
        reply.has_error() ? reply.error().message().c_str() : reply.ShortDebugString().c_str());
    if (!ok) ++accepted;
  };
  bytecomp::proto::ControlMessage reg;
  reg.mutable_register_()->set_role(bytecomp::proto::ROLE_WORKER);
  reg.mutable_register_()->set_requested_rank(1);
  reg.mutable_register_()->set_hostname("impostor");
  expect_error("register without a token", reg, "carries no token");
  reg.mutable_register_()->set_token(bytecomp::TokenBytes(bytecomp::NewNodeToken()));
  expect_error("register as a taken rank", reg, "registration rejected");
  bytecomp::proto::ControlMessage server = reg;
  server.mutable_register_()->set_role(bytecomp::proto::ROLE_SERVER);
  server.mutable_register_()->set_requested_rank(0);
  server.mutable_register_()->set_data_address("tcp://127.0.0.1:1");
  // A server registering for a taken rank may be a replacement: it waits until the holder is
  // lost (heartbeat timeout, 2 s in the test), then, the holder being alive, is refused.
  expect_error("register as a server", server, "two servers claim one rank", 20);
  bytecomp::proto::ControlMessage shutdown;
  shutdown.mutable_shutdown()->set_reason("an impostor stops the job");
  shutdown.set_token(bytecomp::TokenBytes(bytecomp::NewNodeToken()));
  expect_error("shutdown", shutdown, "has not registered");
  bytecomp::proto::ControlMessage declare;
  declare.mutable_declare_tensor()->set_name("evil");
  declare.mutable_declare_tensor()->set_element_count(int64_t{1} << 40);
  expect_error("declare", declare, "has not registered");
  bytecomp::proto::ControlMessage barrier;
  barrier.mutable_barrier_request()->set_group("workers");
  barrier.mutable_barrier_request()->set_sequence(1);
  expect_error("barrier", barrier, "has not registered");
  std::printf("%d of 6 impostor messages accepted\n", accepted);
  // The rank thief: a Register as worker 1 every millisecond, each answer read.
  int tries = 0, refused = 0;
  const auto end = Clock::now() + std::chrono::seconds(2);
  while (Clock::now() < end) {
    std::vector<zmq::message_t> frames;
    frames.push_back(bytecomp::ProtoFrame(reg));
    if (bytecomp::SendFrames(sock, frames).ok()) ++tries;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    for (;;) {
      absl::StatusOr<std::vector<zmq::message_t>> got =
          bytecomp::RecvFrames(sock, std::chrono::milliseconds(0));
      if (!got.ok() || got->empty()) break;
      bytecomp::proto::ControlMessage reply;
      if (!bytecomp::ParseFrame(got->back(), &reply).ok() || reply.has_heartbeat()) continue;
      if (reply.has_error() &&
          reply.error().message().find("registration rejected") != std::string::npos) {
        ++refused;
      } else {
        ++accepted;
        std::printf("ACCEPTED rank theft: %s\n", reply.ShortDebugString().c_str());
      }
    }
  }
  std::printf("rank theft: %d registrations as worker 1 in 2 s, %d refused\n", tries, refused);
  std::printf("%d impostor messages accepted in all\n", accepted);
  return accepted == 0 && refused > 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 4 && std::strcmp(argv[1], "pull-flood") == 0)
    return PullFlood(argv[2], std::atof(argv[3]));
  if (argc >= 4 && std::strcmp(argv[1], "control-flood") == 0) {
    return ControlFlood(argv[2], std::atof(argv[3]));
  }
  if (argc >= 3 && std::strcmp(argv[1], "control-impostor") == 0) return ControlImpostor(argv[2]);
  std::fprintf(stderr,
               "usage: %s pull-flood|control-flood tcp://HOST:PORT SECONDS | control-impostor "
               "tcp://HOST:PORT\n",
               argv[0]);
  return 2;
}
