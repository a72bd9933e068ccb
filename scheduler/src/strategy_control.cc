#include "bytecomp/scheduler/strategy_control.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/planner/inputs.h"

namespace bytecomp {

absl::StatusOr<AutoPlanInputs> LoadAutoPlanInputs(const std::string& cluster_path,
                                                  const std::string& costs_path,
                                                  PlanLinks links) {
  if (cluster_path.empty() || costs_path.empty()) {
    return absl::InvalidArgumentError(
        "--strategy=auto needs --plan_cluster (a ClusterDescription: links, GPUs) and "
        "--plan_costs (a codec cost table, e.g. from bytecomp-plan --calibrate)");
  }
  AutoPlanInputs inputs;
  absl::StatusOr<proto::ClusterDescription> cluster = planner::LoadClusterDescription(cluster_path);
  if (!cluster.ok()) return cluster.status();
  absl::StatusOr<proto::CostTable> costs = planner::LoadCostTable(costs_path);
  if (!costs.ok()) return costs.status();
  inputs.cluster = *std::move(cluster);
  inputs.costs = *std::move(costs);
  inputs.links = links;
  return inputs;
}

StrategyControl::StrategyControl(const proto::ClusterConfig& config, const NodeTable& nodes,
                                 StrategyKeeper keeper, std::optional<AutoPlanInputs> auto_plan)
    : config_(config),
      nodes_(nodes),
      keeper_(std::move(keeper)),
      auto_plan_(std::move(auto_plan)) {}

void StrategyControl::Prepare(const proto::ControlMessage& prepare, Outbox* out) {
  for (const std::string& id : nodes_.WorkerIdentities()) out->Send(id, prepare);
}

void StrategyControl::Reload(Outbox* out) {
  absl::StatusOr<proto::ControlMessage> prepare = keeper_.BeginReload();
  if (!prepare.ok()) {
    BC_LOG_ERROR("strategy not reloaded, version ", keeper_.current().version(),
                 " stays: ", prepare.status().message());
    return;
  }
  BC_LOG_INFO("reloading strategy from ", keeper_.path(), ": preparing version ",
              prepare->strategy_prepare().version());
  Prepare(*prepare, out);
}

void StrategyControl::HandlePrepareReply(const RegisteredNode& node,
                                         const proto::StrategyPrepareReply& reply, Outbox* out) {
  if (node.role != proto::ROLE_WORKER) {
    const std::string why = absl::StrCat("StrategyPrepareReply from ", NodeTable::Name(node),
                                         ", which is not a worker");
    out->Refuse(node.identity, why, why);
    return;
  }
  std::optional<proto::ControlMessage> commit =
      keeper_.OnPrepareReply(node.rank, reply, config_.num_workers());
  if (!commit.has_value()) return;
  // Servers first: they validate pushes against the version a worker names.
  for (const std::string& id : nodes_.ServerIdentities()) out->Send(id, *commit);
  for (const std::string& id : nodes_.WorkerIdentities()) out->Send(id, *commit);
}

void StrategyControl::HandleProfileReport(const RegisteredNode& node,
                                          const proto::ProfileReport& report, Outbox* out) {
  if (node.role != proto::ROLE_WORKER || !auto_plan_.has_value() || planned_) return;
  profiles_[node.rank] = report.profile();
  if (static_cast<int>(profiles_.size()) < config_.num_workers()) return;
  planned_ = true;
  Plan(out);
}

void StrategyControl::Plan(Outbox* out) {
  std::vector<proto::ModelProfile> profiles;
  for (auto& [rank, p] : profiles_) profiles.push_back(p);
  proto::ClusterDescription cluster = auto_plan_->cluster;
  BC_LOG_INFO("--strategy=auto: ", ChooseLinks(auto_plan_->links, links_.Median(), &cluster));
  AutoPlanJob job;
  job.workers = config_.num_workers();
  job.servers = config_.num_servers();
  if (config_.hierarchical() && nodes_.local() != nullptr) {
    job.hierarchical_machines = static_cast<int>(nodes_.local()->machines.size());
  }
  job.profiled_uncompressed = IsUncompressed(keeper_.current());
  absl::StatusOr<AutoPlan> plan = PlanFromProfiles(profiles, cluster, auto_plan_->costs, job);
  if (!plan.ok()) {
    BC_LOG_ERROR("--strategy=auto: planning failed, training goes on uncompressed: ",
                 plan.status().message());
    return;
  }
  BC_LOG_INFO("--strategy=auto: ", plan->summary);
  absl::StatusOr<proto::ControlMessage> prepare = keeper_.BeginUpdate(plan->strategy);
  if (!prepare.ok()) {
    BC_LOG_ERROR("--strategy=auto: ", prepare.status().message());
    return;
  }
  Prepare(*prepare, out);
}

void StrategyControl::HandleLinkProbeReport(const RegisteredNode& node,
                                            const proto::LinkProbeReport& report, Outbox* out) {
  const std::string name = NodeTable::Name(node);
  if (node.role != proto::ROLE_WORKER) {
    const std::string why = absl::StrCat("LinkProbeReport from ", name, ", which is not a worker");
    out->Refuse(node.identity, why, why);
    return;
  }
  if (report.links_size() != config_.num_servers()) {
    BC_LOG_WARNING(name, " reported link probes of ", report.links_size(),
                   " servers, the job has ", config_.num_servers());
  }
  if (links_.Add(node.rank, report, config_.num_workers())) BC_LOG_INFO(links_.Table());
}

}  // namespace bytecomp
