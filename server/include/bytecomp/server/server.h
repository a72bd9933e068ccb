// bytecomp-server: one ROUTER socket for data, engine threads that each own a disjoint set of
// keys (no global lock), and a control thread that talks to the scheduler.
//
// Threads and sockets (each socket owned by one thread):
//   control (the caller of Run): DEALER to the scheduler; forwards declarations and failures
//     to the I/O thread over inproc.
//   I/O: the ROUTER; validates every request against the declarations (RequestValidator),
//     answers bad ones with OP_ERROR, hands good ones to engine (key % E) over inproc, and sends
//     the engines' replies. Frames move between threads without copying.
//   engine i: a KeyStore for its keys: sums pushes, answers pulls.
#pragma once

#include <atomic>
#include <string>

#include "absl/status/status.h"
#include "cluster_config.pb.h"

namespace bytecomp::server {

struct ServerOptions {
  proto::ClusterConfig config;
  int requested_rank = -1;
  std::string bind_host = "0.0.0.0";
  int port = 0;  // 0: ephemeral
};

class AggregationServer {
 public:
  explicit AggregationServer(ServerOptions options) : options_(std::move(options)) {}

  // Registers, serves until the scheduler shuts the job down or RequestStop() is called.
  // Returns OK on an orderly shutdown, an error otherwise (e.g. a node failed).
  absl::Status Run();
  // Async-signal-safe: sets a flag the control loop checks.
  void RequestStop() { stop_requested_.store(true); }

 private:
  ServerOptions options_;
  std::atomic<bool> stop_requested_{false};
};

}  // namespace bytecomp::server
