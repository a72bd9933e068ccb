// bytecomp-server: one ROUTER socket for data, key shard threads that each own a disjoint set
// of keys (no lock on the data path), and a control thread that talks to the scheduler.
//
// Threads and sockets (each socket owned by one thread; between threads, typed messages move
// on queues, shard_messages.h, payloads without copying):
//   control (the caller of Run): DEALER to the scheduler; forwards declarations, strategies
//     and node failures to the I/O thread as commands.
//   I/O (IoLoop, src/server_threads.h): the ROUTER. Its RequestDispatcher validates every
//     request against the declarations (RequestValidator), parks those that arrive before
//     their declaration, answers link probes and bad requests, and hands good ones, parsed, to
//     the key shard that owns the key (ShardOf); the loop sends the shards' replies to the
//     ROUTER.
//   key shard i (RunKeyShard): a KeyShard, whose KeyStore sums its keys' pushes and answers
//     their pulls.
#pragma once

#include <atomic>
#include <string>

#include "absl/status/status.h"
#include "cluster_config.pb.h"

namespace bytecomp::server {

struct ServerOptions {
  proto::ClusterConfig config;
  int requested_rank = -1;
  // Empty: every interface with a cluster key (config.key_file) or allow_insecure, else
  // loopback; without either a host that is not loopback is refused (socket_security.h).
  std::string bind_host;
  int port = 0;  // 0: ephemeral
  // host:port of /metrics (empty: none); read-only, on threads of its own.
  std::string http_address;
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
