// Liveness: whether the job is alive, and how it ends. Every way a job ends goes through
// here (but one: Registration ends it when the workers cannot be grouped by machine).
//
// - Registration must complete within connect_timeout_ms of the start, else every node gets
//   Shutdown naming the missing ranks (DeadlineExceeded).
// - From the topology on, every node must be heard from (any message with its token counts)
//   within heartbeat_timeout_ms, else every other node gets NodeFailed{node, "missed heartbeats
//   for 5.0 s", data_address} for each silent one, then Shutdown (Unavailable); the silent
//   node itself gets a Shutdown saying it was declared failed, so that one that was only
//   frozen (SIGSTOP) exits when it runs again. A worker that sent WorkerDone is no longer
//   watched.
// - The other way: every registered node gets a Heartbeat each heartbeat_interval_ms, so
//   that nodes see a silent scheduler (ClusterConfig.scheduler_timeout_ms).
// - Server failover (ServerFailoverOn): a silent server is lost instead, and the job goes on.
//   Every other node gets NodeFailed{server, reason, replacement_wait_ms}, the lost server a
//   Shutdown, and server_failover.h takes it from there: Replaced (a replacement holds the
//   rank) or Retire (its keys moved to the survivors).
// - WorkerDone from every worker: the servers get Shutdown{"every worker is done"} (OK; the
//   workers are leaving already).
// - Shutdown{reason} from a node: every other node gets Shutdown (Aborted).
// - Stop (Scheduler::Stop, a signal): every node gets Shutdown (Cancelled).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "bytecomp/scheduler/node_table.h"
#include "bytecomp/scheduler/outbox.h"
#include "cluster_config.pb.h"
#include "control.pb.h"

namespace bytecomp {

class Liveness {
 public:
  // `start_ms`: when the scheduler started listening; the registration deadline counts
  // from it.
  Liveness(const proto::ClusterConfig& config, const NodeTable& nodes, int64_t start_ms);

  // A message from `node` (any message, even a malformed one, is a sign of life).
  void Seen(const RegisteredNode& node, int64_t now_ms);
  // The topology went out: heartbeat monitoring starts now for every node. Until then a node
  // may be busy with its own start-up, and the registration deadline covers that phase.
  void StartMonitoring(int64_t now_ms);

  void HandleWorkerDone(const RegisteredNode& node, Outbox* out);
  void HandleShutdown(const RegisteredNode& node, const proto::Shutdown& shutdown, Outbox* out);
  // The scheduler is stopping (`reason`: "scheduler received SIGTERM", ...).
  void Stop(const std::string& reason, Outbox* out);

  // Ends the job when registration is late or a node went silent.
  void OnTime(int64_t now_ms, Outbox* out);
  // A Heartbeat to every registered node when heartbeat_interval_ms passed since the last.
  // Unlike OnTime it runs on every turn of the loop, also while messages keep arriving.
  void SendHeartbeats(int64_t now_ms, Outbox* out);
  // When SendHeartbeats has the next ones to send; nullopt before any node registered.
  std::optional<int64_t> NextHeartbeat() const;
  // When OnTime has something to check next; nullopt when nothing is watched.
  std::optional<int64_t> NextDeadline() const;

  int workers_done() const { return static_cast<int>(done_workers_.size()); }

  // Server failover. A lost server is not watched; it waits for Replaced.
  bool Lost(int server_rank) const { return lost_servers_.contains(server_rank); }
  // Declares the registered server `server_rank` lost for `reason` (failover must be on).
  void DeclareLost(int server_rank, const std::string& reason, int64_t now_ms, Outbox* out);
  // A replacement holds the lost server's rank: it is watched from now on.
  void Replaced(int server_rank, int64_t now_ms);
  // The lost server's keys moved to the others: its rank is not used again.
  void Retire(int server_rank);
  bool Retired(int server_rank) const { return retired_servers_.contains(server_rank); }
  // Lost servers, rank -> when each was declared lost.
  const absl::flat_hash_map<int, int64_t>& lost_servers() const { return lost_servers_; }
  // The nodes watched now (not done, lost or retired).
  std::vector<std::string> WatchedIdentities() const;
  // When the node was last heard from.
  int64_t LastSeen(const RegisteredNode& node) const;

 private:
  // Not a worker that said WorkerDone, nor a lost server.
  bool Watched(const RegisteredNode& node) const;
  void FailSilentNodes(int64_t now_ms, Outbox* out);

  const proto::ClusterConfig& config_;
  const NodeTable& nodes_;
  int64_t start_ms_;
  bool monitoring_ = false;
  int64_t next_heartbeat_ms_ = 0;
  uint64_t heartbeat_sequence_ = 0;
  absl::flat_hash_map<RoleRank, int64_t> last_seen_ms_;
  std::set<int> done_workers_;                      // ranks that sent WorkerDone
  absl::flat_hash_map<int, int64_t> lost_servers_;  // rank -> when it was declared lost
  std::set<int> retired_servers_;                   // their keys moved to the others
};

}  // namespace bytecomp
