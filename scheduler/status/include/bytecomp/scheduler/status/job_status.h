// What the scheduler's status page shows, kept apart from the sockets: the scheduler thread
// feeds JobStatus (nodes seen, the workers' StatsReports) and, every half second, takes a
// StatusSnapshot of it into a StatusBoard; the HTTP thread renders the board's latest snapshot
// (status_page.h). The two threads share only the board's pointer swap.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "control.pb.h"
#include "strategy.pb.h"

namespace bytecomp::status {

// A registered node as the page lists it.
struct NodeView {
  std::string name;  // "worker 0"
  std::string role;  // "worker", "server"
  int rank = 0;
  std::string host;
  int pid = 0;
  std::string data_address;
};

struct NodeHealth {
  NodeView node;
  double heartbeat_age_s = -1;  // since the last message from it; -1: never heard
  std::string state;            // "ok", "late" (over half the timeout), "silent", "done"
};

struct TensorRow {
  std::string name;
  int64_t rounds = 0;  // summed over workers
  int64_t raw_bytes = 0;
  int64_t pushed_bytes = 0;
  double ratio = 0;            // raw / pushed (0: nothing pushed)
  double last_round_ms = 0;    // the slowest worker's last round
  std::string codec = "none";  // the strategy in force for it
  std::string pull_codec;      // two-way: the pull codec; empty: one-way
  std::string compress_on;     // "cpu pool", "inline", "gpu", "default"
  std::string scheme = "ps";   // "ps", "allreduce", "allgather" (TensorStrategy.scheme)
  // Summed by a collective in a job with a cluster key: gloo's collectives carry it
  // unencrypted (the strategy allowed it: Strategy.allow_unencrypted_collectives).
  bool unencrypted = false;
};

struct StatusSnapshot {
  int64_t taken_at_us = 0;  // wall clock
  double uptime_s = 0;
  int num_workers = 0, num_servers = 0;
  bool keyed = false;  // the job has a cluster key (CURVE on every ZeroMQ socket)
  std::vector<NodeHealth> nodes;
  uint64_t strategy_version = 0;
  std::string strategy_source;  // the file, "auto", or "none"
  std::vector<TensorRow> tensors;
  // Recent training rounds (round index, ms): the slowest worker per round.
  std::vector<std::pair<uint64_t, double>> rounds;
  double measured_round_ms = 0;        // median of the recent rounds (0: none yet)
  double measured_iteration_ms = 0;    // median start-to-start of the workers' recent rounds
  std::optional<double> predicted_ms;  // the planner's predicted iteration (--strategy=auto)
  int64_t pushed_bytes = 0, pulled_bytes = 0, operations = 0;  // over workers
  int64_t bad_messages = 0;
};

class JobStatus {
 public:
  // keyed: the job has a cluster key, so the tensors that collectives sum travel unencrypted
  // where everything else is encrypted (the page names them).
  JobStatus(int num_workers, int num_servers, int heartbeat_timeout_ms, int64_t start_ms,
            bool keyed);

  // Any message from `node_name` (heartbeats and all).
  void Seen(const std::string& node_name, int64_t now_ms);
  void WorkerDone(const std::string& node_name);
  // A worker's StatsReport; an oversized one (more than kMaxTensors tensors or kMaxRounds
  // rounds) is cut to the bounds.
  void Stats(int worker_rank, const proto::StatsReport& report);

  StatusSnapshot Snapshot(const std::vector<NodeView>& nodes, const proto::Strategy& strategy,
                          const std::string& strategy_source, std::optional<double> predicted_us,
                          int64_t bad_messages, int64_t now_ms) const;

  static constexpr int kMaxTensors = 256;
  static constexpr int kMaxRounds = 64;

 private:
  int num_workers_, num_servers_, heartbeat_timeout_ms_;
  int64_t start_ms_;
  bool keyed_;
  std::map<std::string, int64_t> last_seen_ms_;
  std::map<std::string, bool> done_;
  std::map<int, proto::StatsReport> reports_;  // latest per worker rank
};

// The latest snapshot, handed from the scheduler thread to the HTTP thread.
class StatusBoard {
 public:
  void Publish(StatusSnapshot snapshot) ABSL_LOCKS_EXCLUDED(mu_);
  // nullptr before the first Publish.
  std::shared_ptr<const StatusSnapshot> Latest() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  std::shared_ptr<const StatusSnapshot> latest_ ABSL_GUARDED_BY(mu_);
};

}  // namespace bytecomp::status
