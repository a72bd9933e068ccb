// Tensor fusion as the planner proposes it (Strategy.fusion_groups): consecutive tensors of
// the profile (its order is the order their gradients become ready) under a size, packed into
// groups of at most a cap. The fused model is the profile with each group as one tensor, ready
// when its last member is (the members' ready gaps summed), which the planner plans like any
// model: bytecomp-plan --fusion_below plans the model both ways and keeps the faster.
#pragma once

#include <cstdint>
#include <vector>

#include "planner.pb.h"
#include "strategy.pb.h"

namespace bytecomp::planner {

struct FusedModel {
  proto::ModelProfile profile;             // groups as tensors "fused.<k>", in ready order
  std::vector<proto::FusionGroup> groups;  // for the strategy
  int members = 0;                         // tensors that joined a group
};

// Groups of at least two consecutive fp32 tensors each under below_bytes, of at most
// cap_bytes together. No groups: the profile as it is.
FusedModel FuseProfile(const proto::ModelProfile& profile, int64_t below_bytes, int64_t cap_bytes);

}  // namespace bytecomp::planner
