// Tensor fusion (Strategy.fusion_groups): the push_pulls of a group's small tensors are packed
// into one buffer per round, and one push_pull of the group's own tensor carries them, so a
// round of many small tensors is one round on the servers (and one codec call, one message per
// partition) rather than one per tensor. Sockets and threads are the engine's: this class only
// keeps the rounds, each member's place in the buffer and the copies in and out, so that it is
// tested without them (test/unit/worker/tensor_fusion_test.cc).
//
// A member's push_pull (an Operation with a handle, never queued on a tensor) waits in its
// group's first round that lacks it. When every member of that round has come, Add packs them
// in the group's order and returns the group's own push_pull (an internal operation). Its end
// (Finish, in the group's round order: the group's tensor runs its rounds one at a time) copies
// the sums out to the members and returns them, to be completed with its status. A member that
// never comes holds its round: its group's other push_pulls wait until their wait's bound.
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
  // The groups of the job's strategy (validated: compress::ValidateStrategy).
  explicit TensorFusion(const proto::Strategy& strategy);

  bool empty() const { return group_of_.empty(); }
  // Whether `name` is a member of a group.
  bool Fuses(const std::string& name) const { return group_of_.contains(name); }
  // Whether `name` is a group's own tensor (a caller's push_pull of it is refused).
  bool IsGroup(const std::string& name) const;
  // The group of member `name`; `name` itself when it is no member.
  const std::string& GroupOf(const std::string& name) const;

  // A group's push_pull for one of its rounds (its data: the round's buffer, alive until
  // Finish).
  struct GroupRound {
    PushPullRequest request;
    uint64_t round = 0;  // the group's rounds counted from 0
  };
  // A member's push_pull joins its group's round. InvalidArgument when it cannot be fused (not
  // host fp32, its size changed, averaging unlike the round's other members): the caller fails
  // it. On success, the group's push_pull to start when this member completed a round, else
  // nullopt.
  absl::StatusOr<std::optional<GroupRound>> Add(const std::shared_ptr<Operation>& member)
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
    std::vector<float> buffer;
    // Every member came: its group's push_pull started (Add returned it).
    bool started() const { return arrived == static_cast<int>(members.size()); }
  };
  struct Group {
    std::string name;
    std::vector<std::string> tensors;
    std::vector<int64_t> counts;                // each member's elements once known (-1: not yet)
    std::deque<std::unique_ptr<Round>> rounds;  // oldest first
    uint64_t next_round = 0;
  };
  struct Member {
    Group* group;
    int position;
  };

  // Packs a complete round; returns the group's push_pull.
  PushPullRequest Pack(Group& group, Round& round) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::vector<std::unique_ptr<Group>> groups_;  // fixed after construction
  absl::flat_hash_map<std::string, Member> group_of_;
  absl::flat_hash_map<std::string, Group*> by_group_name_;

  mutable absl::Mutex mu_;
  Counts counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace bytecomp::worker
