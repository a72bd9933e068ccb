#include "bytecomp/scheduler/auto_planner.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bytecomp/common/stats.h"
#include "bytecomp/planner/planner.h"

namespace bytecomp {

absl::StatusOr<PlanLinks> ParsePlanLinks(absl::string_view text) {
  if (text == "measured") return PlanLinks::kMeasured;
  if (text == "file") return PlanLinks::kFile;
  return absl::InvalidArgumentError(
      absl::StrCat("--plan_links='", text, "': expected 'measured' or 'file'"));
}

std::string ChooseLinks(PlanLinks mode, const std::optional<MeasuredLinks>& measured,
                        proto::ClusterDescription* cluster) {
  auto describe = [](const proto::LinkSpec& l) {
    return absl::StrFormat("%.3f Gbit/s, %.1f us", l.bandwidth_gbps(), l.latency_us());
  };
  const std::string file = absl::StrCat("worker_link ", describe(cluster->worker_link()),
                                        "; server_link ", describe(cluster->server_link()));
  if (mode == PlanLinks::kFile) {
    return absl::StrCat("links from --plan_cluster (--plan_links=file): ", file);
  }
  if (!measured.has_value()) {
    return absl::StrCat("links from --plan_cluster, no link probe measured them: ", file);
  }
  proto::LinkSpec link;
  link.set_bandwidth_gbps(std::min(measured->up_gbps, measured->down_gbps));
  link.set_latency_us(measured->latency_us / 4);
  *cluster->mutable_worker_link() = link;
  *cluster->mutable_server_link() = link;
  return absl::StrFormat(
      "links from the probes of %d workers (%d worker-server pairs; medians: round trip %.1f "
      "us, up %.3f Gbit/s, down %.3f Gbit/s): worker_link and server_link %s each, instead "
      "of the --plan_cluster file's %s",
      measured->workers, measured->pairs, measured->latency_us, measured->up_gbps,
      measured->down_gbps, describe(link), file);
}

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
  std::vector<double> forward;
  for (const proto::ModelProfile& p : profiles) forward.push_back(p.forward_us());
  inputs.profile.set_forward_us(Median(forward));
  inputs.profile.set_source(absl::StrCat(profiles[0].source(), "; gaps averaged over ",
                                         profiles.size(), " workers, forward_us their median"));
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
      plan.compress_everything_us / 1000.0, " ms compressing everything (measured forward ",
      inputs.profile.forward_us() / 1000.0, " ms)");
  return out;
}

}  // namespace bytecomp
