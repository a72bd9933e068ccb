// The strategy versions this worker knows, and the switch between them. The scheduler
// announces a new version in two steps:
//   prepare: each worker reports the highest round it has started and holds every round beyond
//            that + 1, so the scheduler can pick a first round R that no worker has started;
//   commit:  the version (from round R on) is added and the held rounds may start.
// So no round ever mixes two versions. The tensor table asks Admit before it starts a round
// and keeps the tensors that are held until the commit.
//
// Fusion groups (Strategy.fusion_groups) are set by the first version that names any (the
// job's first, or the plan of --strategy=auto), from its first round on, and stay: every
// later version must name the same (the scheduler's keeper refuses a change). From that round
// a member's plan says its group, whose push_pull carries the member's round.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "bytecomp/compress/strategy.h"
#include "strategy.pb.h"

namespace bytecomp::worker {

class StrategySwitch {
 public:
  // The job's fusion groups, from the round of the version that set them; fixed once set.
  struct FusionGroups {
    uint64_t first_round = 0;
    proto::Strategy set_by;  // the version that set them (its fusion_groups are the groups)
    absl::flat_hash_map<std::string, int> group_of;  // a member's name -> its group's index
    absl::flat_hash_map<std::string, int> by_name;   // a group's name -> its index
    // The group named `name`; null if none.
    const proto::FusionGroup* Named(const std::string& name) const;
  };

  // The initial strategy (from the topology), or one committed later. A version whose fusion
  // groups differ from those in force is refused.
  absl::Status Add(const proto::Strategy& strategy) ABSL_LOCKS_EXCLUDED(mu_);

  // A tensor's `round` wants to start: nullopt while a switch holds it (round beyond the
  // prepared one + 1); else the round counts as started and its plan for the tensor (the
  // version in force at `round`; an uncompressed plan of version 0 when none is).
  // `row_elements`: the tensor's row length when declared with a shape (compress::PlanFor).
  std::optional<compress::TensorPlan> Admit(uint64_t round, absl::string_view tensor,
                                            int64_t tensor_bytes, int64_t row_elements = 0)
      ABSL_LOCKS_EXCLUDED(mu_);

  // StrategyPrepare: holds every round beyond the highest started + 1; returns that highest.
  uint64_t Prepare(uint64_t version) ABSL_LOCKS_EXCLUDED(mu_);
  // StrategyCommit: adds the version (a refused one is logged: the old version goes on) and
  // ends the hold; a version it has already (a restarted scheduler's commit of the version in
  // force) only ends the hold. The caller then restarts the tensors that were held.
  void Commit(const proto::Strategy& strategy) ABSL_LOCKS_EXCLUDED(mu_);

  // The seed of `version` (codecs that draw shared random numbers); 0 if unknown.
  uint64_t SeedOf(uint64_t version) const ABSL_LOCKS_EXCLUDED(mu_);
  // The version in force at `round`; 0 if none.
  uint64_t VersionAt(uint64_t round) const ABSL_LOCKS_EXCLUDED(mu_);

  // The fusion groups; null until a version sets them. Fixed once set: keep the pointer.
  std::shared_ptr<const FusionGroups> fusion_groups() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Status AddLocked(const proto::Strategy& strategy) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  compress::StrategyHistory history_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const FusionGroups> fusion_ ABSL_GUARDED_BY(mu_);
  // Set between prepare and commit: no round beyond it starts.
  std::optional<uint64_t> hold_after_round_ ABSL_GUARDED_BY(mu_);
  uint64_t highest_started_round_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace bytecomp::worker
