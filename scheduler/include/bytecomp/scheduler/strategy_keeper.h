// The scheduler's live Strategy: loaded from a file, versioned, and changed in two phases so
// that every worker and server switches at the same round (control.proto, StrategyPrepare).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "cluster_config.pb.h"
#include "control.pb.h"
#include "strategy.pb.h"

namespace bytecomp {

class StrategyKeeper {
 public:
  // `job`: what a strategy must fit besides its own rules (JobRefuses).
  explicit StrategyKeeper(const proto::ClusterConfig& job = {})
      : collectives_(job.collectives()),
        keyed_(!job.key_file().empty()),
        hierarchical_(job.hierarchical()) {}
  // Loads the initial strategy (version 1, first round 0). An empty path: no compression.
  absl::Status LoadInitial(const std::string& path);
  const proto::Strategy& current() const { return current_; }
  // The strategy committed before current (rounds before current's first_round still use
  // it); nullopt while the first is in force.
  const std::optional<proto::Strategy>& previous() const { return previous_; }
  const std::string& path() const { return path_; }
  bool update_pending() const { return pending_.has_value(); }

  // Re-reads the file. An invalid file is an error naming file, line and field, and the
  // current strategy stays. On success returns the StrategyPrepare to send to every worker.
  absl::StatusOr<proto::ControlMessage> BeginReload();
  // Starts an update to `strategy` (from the planner, or tests), as BeginReload does.
  absl::StatusOr<proto::ControlMessage> BeginUpdate(proto::Strategy strategy);
  // A worker's StrategyPrepareReply. Once all `num_workers` answered, returns the
  // StrategyCommit (servers first, then workers) and makes the new strategy current.
  // A restarted scheduler taking the job up (takeover.h): `strategy` is in force (the latest
  // the nodes had committed); no update is pending, and the next one gets the next version.
  void Adopt(const proto::Strategy& strategy);
  // Why this job cannot run `strategy`, naming the entry: a collective scheme where the job's
  // ClusterConfig.collectives is off or that is hierarchical (only local roots reach the
  // network there), or, on a job with a cluster key, one that the strategy
  // does not allow unencrypted (Strategy.allow_unencrypted_collectives); fusion groups in a
  // hierarchical job. OK when it can. (An update may not change the fusion groups either:
  // FusionGroupsChange.)
  absl::Status JobRefuses(const proto::Strategy& strategy) const;
  // Why an update may not bring `strategy`'s fusion groups: a job's groups are set once (by
  // its first strategy, or by an update to a job without any, such as --strategy=auto's plan)
  // and then fixed; an update that sets them may not fuse a tensor whose entry in force keeps
  // error-feedback memory (its group's rounds would drop it). OK when it may.
  absl::Status FusionGroupsChange(const proto::Strategy& strategy) const;
  std::optional<proto::ControlMessage> OnPrepareReply(int worker_rank,
                                                      const proto::StrategyPrepareReply& reply,
                                                      int num_workers);

 private:
  // In a keyed job: a warning naming the entries whose tensors collectives sum unencrypted.
  void LogUnencrypted(const proto::Strategy& strategy) const;

  bool collectives_ = false;
  bool keyed_ = false;
  bool hierarchical_ = false;
  std::string path_;
  proto::Strategy current_;
  std::optional<proto::Strategy> previous_;
  std::optional<proto::Strategy> pending_;
  std::map<int, uint64_t> highest_round_by_worker_;
};

}  // namespace bytecomp
