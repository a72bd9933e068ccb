// A client without the cluster key, for test_cluster_key.py: it tries everything a hostile
// process on the network would against a keyed job, and reports whether anything came back.
//
// Usage: intruder_client --mode=plain|own-key|other-job --scheduler=tcp://H:P
//                        --server=tcp://H:P [--job_public_key=Z85] [--wait_ms=1500]
//                        [--repeat=1]
//   plain      a ZeroMQ DEALER without CURVE
//   own-key    CURVE with a keypair of its own, trusting the job's public key (which is no
//              secret): it knows whom to talk to but lacks the secret key
//   other-job  CURVE with another job's key (a node given the wrong key file)
// To the scheduler: Register as worker 1, then as server 0, then Shutdown. To the server: a
// PUSH into tensor 0's round 0 (it would spoil the sum), a PULL of it, an aborting push naming
// worker 1, and a link probe. Each is answered, if at all, within --wait_ms. --repeat runs the
// whole series that many times (each attempt a fresh connection): which side of a plain
// connection notices the missing CURVE first is a race, and only the listener's notice is logged.
// The plain mode ends with a raw TCP connection per target that sends a ZMTP 3.0 greeting naming
// the NULL mechanism and keeps the connection open until the target closes it: the target reads
// the whole greeting, so it is always the one that notices the mismatch (and logs it), which a
// ZeroMQ client closing first would leave to chance.
// Prints "INTRUDER <mode> <target> <what>: no reply" or ": GOT A REPLY (...)" per attempt and
// exits 0 when nothing came back, 1 when anything did, 2 for bad usage.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "bytecomp/common.h"
#include "control.pb.h"
#include "data.pb.h"

ABSL_FLAG(std::string, mode, "plain", "plain | own-key | other-job");
ABSL_FLAG(bool, server_sealed, false,
          "the job seals its data messages (data_protection encrypt or authenticate): the "
          "server's data port is plain TCP and refuses every message not sealed under a "
          "worker's data key, so the plain mode's NULL greeting is tried on the scheduler only");
ABSL_FLAG(std::string, scheduler, "", "the scheduler's endpoint, tcp://host:port");
ABSL_FLAG(std::string, server, "", "a server's data endpoint, tcp://host:port");
ABSL_FLAG(std::string, job_public_key, "", "own-key: the job's public key (Z85)");
ABSL_FLAG(int, wait_ms, 1500, "how long each attempt waits for a reply");
ABSL_FLAG(int, repeat, 1, "how many times the whole series of attempts runs");

namespace {

using bytecomp::proto::ControlMessage;
using bytecomp::proto::DataHeader;

struct Attempt {
  std::string what;
  std::vector<std::string> frames;
};

// One connection per attempt, so that each is a fresh handshake the target must refuse.
bool TryAttempt(zmq::context_t& ctx, const std::string& endpoint, const std::string& target,
                const Attempt& attempt, const std::optional<bytecomp::ClusterKey>& own,
                const std::string& server_key) {
  zmq::socket_t socket(ctx, zmq::socket_type::dealer);
  bytecomp::ConfigureSocket(socket);
  if (own.has_value()) {
    socket.set(zmq::sockopt::curve_serverkey, server_key);
    socket.set(zmq::sockopt::curve_publickey, own->public_key);
    socket.set(zmq::sockopt::curve_secretkey, own->secret_key);
  }
  socket.connect(endpoint);
  std::vector<zmq::message_t> frames;
  for (const std::string& f : attempt.frames) frames.emplace_back(f.data(), f.size());
  // Queued until a handshake completes, which it never should.
  (void)bytecomp::SendFrames(socket, frames, /*dont_wait=*/true);
  absl::StatusOr<std::vector<zmq::message_t>> reply =
      bytecomp::RecvFrames(socket, std::chrono::milliseconds(absl::GetFlag(FLAGS_wait_ms)));
  const bool got = reply.ok() && !reply->empty();
  std::printf("INTRUDER %s %s %s: %s\n", absl::GetFlag(FLAGS_mode).c_str(), target.c_str(),
              attempt.what.c_str(),
              got ? absl::StrCat("GOT A REPLY (", reply->size(), " frames)").c_str() : "no reply");
  std::fflush(stdout);
  return got;
}

std::string Control(const ControlMessage& m) { return m.SerializeAsString(); }

// A raw ZMTP 3.0 greeting with the NULL mechanism to `endpoint` (tcp://A.B.C.D:P), then reads
// until the target closes the connection or wait_ms pass. Prints what happened; returns true
// when the target let the connection stay open past the wait (it should refuse the greeting).
bool TryNullGreeting(const std::string& endpoint, const std::string& target) {
  const std::string hostport = endpoint.substr(endpoint.find("//") + 2);
  const size_t colon = hostport.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(hostport.substr(colon + 1))));
  if (inet_pton(AF_INET, hostport.substr(0, colon).c_str(), &addr.sin_addr) != 1) {
    std::fprintf(stderr, "not an IPv4 endpoint: %s\n", endpoint.c_str());
    return true;
  }
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    std::printf("INTRUDER plain %s NULL greeting: cannot connect\n", target.c_str());
    if (fd >= 0) close(fd);
    return false;
  }
  // Signature (0xFF, 8 bytes, 0x7F), version 3.0, mechanism "NULL" padded to 20 bytes,
  // as-server 0, 31 bytes of filler: 64 bytes (ZMTP 3.0, RFC 23).
  std::string greeting(64, '\0');
  greeting[0] = '\xff';
  greeting[9] = '\x7f';
  greeting[10] = 3;
  greeting.replace(12, 4, "NULL");
  (void)!write(fd, greeting.data(), greeting.size());
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(absl::GetFlag(FLAGS_wait_ms));
  size_t received = 0;
  bool closed = false;
  while (!closed && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (poll(&p, 1, static_cast<int>(std::max<int64_t>(1, left.count()))) <= 0) continue;
    char buf[256];
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) {
      closed = true;
    } else {
      received += static_cast<size_t>(n);
    }
  }
  close(fd);
  std::printf("INTRUDER plain %s NULL greeting: %s after %zu bytes of its greeting\n",
              target.c_str(), closed ? "closed by the target" : "STILL OPEN", received);
  std::fflush(stdout);
  return !closed;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string mode = absl::GetFlag(FLAGS_mode);
  std::optional<bytecomp::ClusterKey> own;
  std::string server_key;
  if (mode == "own-key" || mode == "other-job") {
    absl::StatusOr<bytecomp::ClusterKey> key = bytecomp::NewClusterKey();
    if (!key.ok()) return 2;
    own = *key;
    server_key = mode == "own-key" ? absl::GetFlag(FLAGS_job_public_key) : key->public_key;
    if (server_key.size() != 40) {
      std::fprintf(stderr, "own-key needs --job_public_key (40 Z85 characters)\n");
      return 2;
    }
  } else if (mode != "plain") {
    std::fprintf(stderr, "--mode must be plain, own-key or other-job\n");
    return 2;
  }

  std::vector<Attempt> to_scheduler;
  {
    ControlMessage m;
    m.mutable_register_()->set_role(bytecomp::proto::ROLE_WORKER);
    m.mutable_register_()->set_requested_rank(1);
    m.mutable_register_()->set_hostname("intruder");
    to_scheduler.push_back({"register as worker 1", {Control(m)}});
    m.mutable_register_()->set_role(bytecomp::proto::ROLE_SERVER);
    m.mutable_register_()->set_requested_rank(0);
    m.mutable_register_()->set_data_address("tcp://127.0.0.1:9");
    to_scheduler.push_back({"register as server 0", {Control(m)}});
    ControlMessage bye;
    bye.mutable_shutdown()->set_reason("intruder says stop");
    to_scheduler.push_back({"shutdown", {Control(bye)}});
  }
  std::vector<Attempt> to_server;
  {
    DataHeader push;
    push.set_op(bytecomp::proto::OP_PUSH);
    push.set_key(bytecomp::MakeKey(0, 0));
    push.set_round(0);
    push.set_dtype(bytecomp::proto::DTYPE_FLOAT32);
    push.set_element_count(1);
    push.set_payload_bytes(4);
    push.set_sender(1);
    push.set_request_id(1);
    const float spoil = 1e6f;
    to_server.push_back(
        {"push as worker 1",
         {push.SerializeAsString(), std::string(reinterpret_cast<const char*>(&spoil), 4)}});
    DataHeader pull = push;
    pull.set_op(bytecomp::proto::OP_PULL);
    pull.set_payload_bytes(0);
    pull.set_request_id(2);
    to_server.push_back({"pull", {pull.SerializeAsString()}});
    DataHeader abort = push;
    abort.set_error("intruder aborts the round");
    abort.set_request_id(3);
    to_server.push_back({"aborting push", {abort.SerializeAsString(), std::string(4, '\0')}});
    DataHeader probe;
    probe.set_op(bytecomp::proto::OP_PROBE);
    probe.set_sender(0);
    probe.set_probe_reply_bytes(16);
    probe.set_request_id(4);
    to_server.push_back({"link probe", {probe.SerializeAsString()}});
  }

  zmq::context_t ctx(1);
  int replies = 0;
  for (int i = 0; i < absl::GetFlag(FLAGS_repeat); ++i) {
    if (const std::string s = absl::GetFlag(FLAGS_scheduler); !s.empty()) {
      for (const Attempt& a : to_scheduler)
        replies += TryAttempt(ctx, s, "scheduler", a, own, server_key);
    }
    if (const std::string s = absl::GetFlag(FLAGS_server); !s.empty()) {
      for (const Attempt& a : to_server)
        replies += TryAttempt(ctx, s, "server", a, own, server_key);
    }
  }
  if (mode == "plain") {
    for (const auto& [flag, target] : {std::pair{absl::GetFlag(FLAGS_scheduler), "scheduler"},
                                       std::pair{absl::GetFlag(FLAGS_server), "server"}}) {
      if (flag.empty()) continue;
      if (absl::GetFlag(FLAGS_server_sealed) && std::string(target) == "server") continue;
      replies += TryNullGreeting(flag, target);
    }
  }
  std::printf("INTRUDER %s: %d replies\n", mode.c_str(), replies);
  return replies == 0 ? 0 : 1;
}
