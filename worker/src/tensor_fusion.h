// Tensor fusion (Strategy.fusion_groups): the push_pulls of a group's small tensors are packed
// into one buffer per round, and one push_pull of the group's own tensor carries them, so a
// round of many small tensors is one round on the servers (and one codec call, one message per
// partition) rather than one per tensor. Sockets and threads are the engine's: this class only
// keeps the rounds, each member's place in the buffer and the copies in and out, so that it is
// tested without them (test/unit/worker/tensor_fusion_test.cc).
//
// A member's push_pull is queued on its own tensor like any; when the tensor table starts its
// round r and the strategy switch's plan names its group (strategy_switch.h: from the round
// the groups were set), the engine hands it here and it waits in its group's round r. When
// every member of that round has come, Add packs them in the group's order and returns the
// group's own push_pull of round r (an internal operation). Its end (Finish) copies the sums
// out to the members and returns them, to be completed with its status (which ends their
// tensors' rounds). A member that never comes holds its round: its group's other push_pulls
// wait until their wait's bound.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "bytecomp/worker/engine.h"
#include "strategy.pb.h"

namespace bytecomp::worker {

class Operation;

class TensorFusion {
 public:
  // A group's push_pull for one of its rounds (its data: the round's buffer, alive until
  // Finish).
  struct GroupRound {
    PushPullRequest request;
    uint64_t round = 0;  // its members' round
  };
  // A member's push_pull, started at its round, joins that round of `group` (the strategy's
  // definition: the members in their order in the buffer). InvalidArgument when it cannot be
  // fused (not host fp32, its size changed, averaging unlike the round's other members, not a
  // member): the caller fails it. On success, the group's push_pull to start when this member
  // completed the round, else nullopt.
  absl::StatusOr<std::optional<GroupRound>> Add(const std::shared_ptr<Operation>& member,
                                                const proto::FusionGroup& group)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The group's push_pull of `round` ended with `status`: on success the sums are copied out to
  // the members. Returns the members, for the caller to complete with `status` (none when the
  // round is unknown).
  std::vector<std::shared_ptr<Operation>> Finish(const std::string& group, uint64_t round,
                                                 const absl::Status& status)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The engine failed: every member waiting in a round not started (the started ones end
  // through their group's push_pull).
  std::vector<std::shared_ptr<Operation>> TakeWaiting() ABSL_LOCKS_EXCLUDED(mu_);

  // Members packed and group push_pulls started so far (the log's shutdown line, tests).
  struct Counts {
    int64_t members = 0;
    int64_t group_rounds = 0;
  };
  Counts counts() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Round {
    uint64_t index = 0;
    std::vector<std::shared_ptr<Operation>> members;  // by position in the group; null: not yet
    int arrived = 0;
    bool average = false;  // its first member's (the others must match)
    std::vector<float> buffer;
    // Every member came: its group's push_pull started (Add returned it).
    bool started() const { return arrived == static_cast<int>(members.size()); }
  };
  struct Group {
    std::string name;
    size_t size = 0;                                 // members
    absl::flat_hash_map<std::string, int> position;  // a member's place in the buffer
    std::vector<int64_t> counts;                // each member's elements once known (-1: not yet)
    std::deque<std::unique_ptr<Round>> rounds;  // oldest first
  };

  // Packs a complete round; returns the group's push_pull.
  PushPullRequest Pack(Group& group, Round& round) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  // By name, made when their first member comes.
  absl::flat_hash_map<std::string, std::unique_ptr<Group>> groups_ ABSL_GUARDED_BY(mu_);
  Counts counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace bytecomp::worker
