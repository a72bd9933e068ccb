// Tensor fusion as the planner proposes it (Strategy.fusion_groups): consecutive tensors of
// the profile (its order is the order their gradients become ready) under a size, packed into
// groups of at most a cap. The fused model is the profile with each group as one tensor, ready
// when its last member is (the members' ready gaps summed), which the planner plans like any
// model: PlanWithFusion plans it at some sizes and says whether a fused plan is faster
// (bytecomp-plan --fusion_below, and --strategy=auto's plan).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "bytecomp/planner/planner.h"
#include "planner.pb.h"
#include "strategy.pb.h"

namespace bytecomp::planner {

struct FusedModel {
  proto::ModelProfile profile;             // groups as tensors "fused.<k>", in ready order
  std::vector<proto::FusionGroup> groups;  // for the strategy
  int members = 0;                         // tensors that joined a group
};

// Groups of at least two consecutive host fp32 tensors each under below_bytes, of at most
// cap_bytes together; tensors with blocks of zeros (block_density below 1) or pushed in some
// rounds only stay alone, and no group spans a wait of the training thread (after_wait). No groups:
// the profile as it is.
FusedModel FuseProfile(const proto::ModelProfile& profile, int64_t below_bytes, int64_t cap_bytes);

// The profile with `groups` (a Strategy's fusion_groups) as FuseProfile makes them: each
// group's members, consecutive in the profile and in its order, as one tensor named after the
// group, ready with its last member. An error names a group whose members are not so.
absl::StatusOr<proto::ModelProfile> ProfileWithGroups(
    const proto::ModelProfile& profile, const std::vector<proto::FusionGroup>& groups);

// The fused model planned: its problem, its plan, and the size it fused below.
struct FusedPlan {
  FusedModel model;
  int64_t below_bytes = 0;
  PreparedProblem problem;
  PlanResult result;
  // Predicted faster than the unfused plan by more than the gain asked for: keep it.
  bool faster = false;
};
// `inputs`' model fused below each size of `below_bytes` (groups of at most cap_bytes) and
// planned with `plan`: the fastest of those plans (nullopt if no size makes a group), faster
// when it is predicted faster than `unfused_us` by more than `min_gain` (a fraction: a
// group's copies in and out, which the cost model leaves out, must not eat the gain). An
// error when a fused model cannot be prepared or planned.
absl::StatusOr<std::optional<FusedPlan>> PlanWithFusion(
    const PlannerInputs& inputs, absl::Span<const int64_t> below_bytes, int64_t cap_bytes,
    double unfused_us, double min_gain,
    absl::FunctionRef<absl::StatusOr<PlanResult>(const PreparedProblem&)> plan);

}  // namespace bytecomp::planner
