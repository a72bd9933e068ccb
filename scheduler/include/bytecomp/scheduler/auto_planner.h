// --strategy=auto: the workers' measured profiles, planned with the ByteComp decision
// algorithm (scheduler/planner) into the Strategy the scheduler then switches every node to.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner.pb.h"
#include "strategy.pb.h"

namespace bytecomp {

struct AutoPlan {
  proto::Strategy strategy;
  std::string summary;  // predicted iteration times and what was compressed, for the log
};

// Merges the workers' profiles (worker 0's ready order, every tensor's gap averaged over the
// workers), sets the cluster's worker and server counts to the job's, and plans.
absl::StatusOr<AutoPlan> PlanFromProfiles(const std::vector<proto::ModelProfile>& profiles,
                                          proto::ClusterDescription cluster,
                                          const proto::CostTable& costs, int num_workers,
                                          int num_servers);

}  // namespace bytecomp
