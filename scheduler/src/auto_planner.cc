#include "bytecomp/scheduler/auto_planner.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "bytecomp/planner/planner.h"

namespace bytecomp {

absl::StatusOr<AutoPlan> PlanFromProfiles(const std::vector<proto::ModelProfile>& profiles,
                                          proto::ClusterDescription cluster,
                                          const proto::CostTable& costs, int num_workers,
                                          int num_servers) {
  if (profiles.empty() || profiles[0].tensors_size() == 0) {
    return absl::FailedPreconditionError("no profile with tensors was reported");
  }
  std::map<std::string, std::pair<double, int>> gaps;  // name -> (sum, count)
  for (const proto::ModelProfile& p : profiles) {
    for (const proto::TensorProfile& t : p.tensors()) {
      auto& g = gaps[t.name()];
      g.first += t.ready_gap_us();
      ++g.second;
    }
  }
  planner::PlannerInputs inputs;
  inputs.profile = profiles[0];
  for (proto::TensorProfile& t : *inputs.profile.mutable_tensors()) {
    const auto& g = gaps[t.name()];
    t.set_ready_gap_us(g.first / g.second);
  }
  inputs.profile.set_source(absl::StrCat(profiles[0].source(), "; gaps averaged over ",
                                         profiles.size(), " workers"));
  cluster.set_workers(num_workers);
  cluster.set_servers(num_servers);
  inputs.cluster = std::move(cluster);
  inputs.costs = costs;
  absl::StatusOr<planner::PreparedProblem> prepared = planner::Prepare(inputs);
  if (!prepared.ok()) return prepared.status();
  const planner::PlanResult plan = planner::PlanByteComp(*prepared);
  AutoPlan out;
  out.strategy = planner::ToStrategy(*prepared, plan.choice);
  int compressed = 0;
  for (size_t i = 0; i < plan.choice.size(); ++i) {
    if (plan.choice[i] != prepared->none_option_index(static_cast<int>(i))) ++compressed;
  }
  out.summary = absl::StrCat(
      "planned ", plan.choice.size(), " tensors in ", plan.planning_ms, " ms: ", compressed,
      " compressed; predicted iteration ", plan.predicted_us / 1000.0, " ms against ",
      plan.no_compression_us / 1000.0, " ms uncompressed and ",
      plan.compress_everything_us / 1000.0, " ms compressing everything");
  return out;
}

}  // namespace bytecomp
