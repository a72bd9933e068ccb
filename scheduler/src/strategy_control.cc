#include "bytecomp/scheduler/strategy_control.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/planner/explain.h"
#include "bytecomp/planner/inputs.h"
#include "google/protobuf/text_format.h"

namespace bytecomp {

absl::StatusOr<AutoPlanInputs> LoadAutoPlanInputs(const std::string& cluster_path,
                                                  const std::string& costs_path,
                                                  const std::string& options_path,
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
  if (!options_path.empty()) {
    absl::StatusOr<proto::PlannerOptions> options = planner::LoadPlannerOptions(options_path);
    if (!options.ok()) return options.status();
    inputs.options = *std::move(options);
  }
  inputs.links = links;
  return inputs;
}

std::string DefaultPlanOut() {
  const char* tmp = std::getenv("TMPDIR");
  return absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/bytecomp-auto-strategy-",
                      getpid(), ".pbtxt");
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

void StrategyControl::Restore(const proto::Strategy& in_force) {
  keeper_.Adopt(in_force);
  if (auto_plan_.has_value() && in_force.version() > 1) planned_ = true;
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
  if (plan_version_ != 0 && commit->strategy_commit().strategy().version() == plan_version_) {
    WritePlan(commit->strategy_commit().strategy());
  }
  // Servers first: they validate pushes against the version a worker names.
  for (const std::string& id : nodes_.ServerIdentities()) out->Send(id, *commit);
  for (const std::string& id : nodes_.WorkerIdentities()) out->Send(id, *commit);
}

void StrategyControl::HandleProfileReport(const RegisteredNode& node,
                                          const proto::ProfileReport& report, Outbox* out) {
  (void)out;  // the plan is prepared later, by OnTime, once it is computed
  if (node.role != proto::ROLE_WORKER || !auto_plan_.has_value() || planned_) return;
  profiles_[node.rank] = report.profile();
  if (static_cast<int>(profiles_.size()) < config_.num_workers()) return;
  planned_ = true;
  StartPlanning();
}

void StrategyControl::StartPlanning() {
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
  job.partition_bytes = config_.partition_bytes();
  job.collectives = config_.collectives() && config_.key_file().empty();
  BC_LOG_INFO("--strategy=auto: every worker reported its profiled rounds; planning ",
              profiles.empty() ? 0 : profiles.front().tensors_size(),
              " tensors on a thread of its own (the job goes on, uncompressed, meanwhile)");
  // The thread gets copies of everything it plans with and shares nothing with this one:
  // PlanFromProfiles is a pure function. The future hands the result back.
  planning_ = std::async(std::launch::async,
                         [profiles = std::move(profiles), cluster = std::move(cluster),
                          costs = auto_plan_->costs, job, options = auto_plan_->options] {
                           return PlanFromProfiles(profiles, cluster, costs, job, options);
                         });
}

std::optional<int64_t> StrategyControl::NextCheckMs(int64_t now_ms) const {
  if (!planning_.valid()) return std::nullopt;
  return now_ms + kPlanCheckMs;
}

void StrategyControl::OnTime(Outbox* out) {
  if (!planning_.valid() ||
      planning_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    return;
  }
  // One switch at a time: a reload (SIGHUP) or a ratio change begun while the plan was
  // computed is committed first.
  if (keeper_.update_pending()) return;
  absl::StatusOr<AutoPlan> plan = planning_.get();
  if (!plan.ok()) {
    BC_LOG_ERROR("--strategy=auto: planning failed, training goes on uncompressed: ",
                 plan.status().message());
    return;
  }
  BC_LOG_INFO("--strategy=auto: ", plan->summary);
  BC_LOG_INFO(
      "--strategy=auto: the plan per tensor (saving: how much longer the predicted "
      "iteration is when the tensor alone goes uncompressed):\n",
      plan->table);
  predicted_us_ = plan->predicted_us;
  absl::StatusOr<proto::ControlMessage> prepare = keeper_.BeginUpdate(plan->strategy);
  if (!prepare.ok()) {
    BC_LOG_ERROR("--strategy=auto: ", prepare.status().message());
    return;
  }
  plan_version_ = prepare->strategy_prepare().version();
  plan_ = *std::move(plan);
  Prepare(*prepare, out);
}

namespace {

// Writes `text` to `path` through a file beside it, renamed, so that a reader never sees half
// a file.
absl::Status WriteWhole(const std::string& path, const std::string& text) {
  const std::string partial = absl::StrCat(path, ".partial");
  {
    std::ofstream file(partial, std::ios::trunc);
    file << text;
    if (!file.good()) return absl::UnavailableError(absl::StrCat("cannot write ", partial));
  }
  if (std::rename(partial.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot rename ", partial, " to ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

std::string TextOf(const google::protobuf::Message& message, absl::string_view comment) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(message, &text);
  return absl::StrCat("# ", comment, "\n", text);
}

}  // namespace

void StrategyControl::WritePlan(const proto::Strategy& committed) {
  const std::string& path = auto_plan_->plan_out;
  if (path.empty() || !plan_.has_value()) return;
  const std::string inputs = absl::StrCat(path, ".{profile,cluster,options}.pbtxt");
  const std::string header = absl::StrCat(
      "Written by bytecomp-scheduler --strategy=auto: the strategy every node runs, version ",
      committed.version(), " from round ", committed.first_round(), " on (", config_.num_workers(),
      " workers, ", config_.num_servers(), " servers). Run this plan again with --strategy=", path,
      " (version and first_round are set anew when it is loaded).\n", plan_->summary,
      "\nPlanned with ", inputs,
      " and the --plan_costs table (bytecomp-plan --profile, "
      "--cluster, --options and --costs give this plan again).\n"
      "saving: how much longer the predicted iteration is when the tensor alone goes "
      "uncompressed, the others as planned.");
  absl::Status written =
      WriteWhole(path, planner::StrategyFileText(committed, header, plan_->table));
  const std::string what = "--strategy=auto's planning inputs";
  for (const auto& [suffix, message] :
       {std::pair<const char*, const google::protobuf::Message*>{".profile.pbtxt", &plan_->profile},
        {".cluster.pbtxt", &plan_->cluster},
        {".options.pbtxt", &plan_->options}}) {
    if (written.ok()) written = WriteWhole(absl::StrCat(path, suffix), TextOf(*message, what));
  }
  if (!written.ok()) {
    BC_LOG_ERROR("--strategy=auto: the plan was not written (--plan_out): ", written.message());
    return;
  }
  BC_LOG_INFO("--strategy=auto: the plan (strategy version ", committed.version(), ", from round ",
              committed.first_round(), ") is in ", path, "; --strategy=", path,
              " runs it again; planned with ", inputs);
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
    BC_LOG_WARNING(name, " reported link probes of ", report.links_size(), " servers, the job has ",
                   config_.num_servers());
  }
  if (links_.Add(node.rank, report, config_.num_workers())) BC_LOG_INFO(links_.Table());
}

void StrategyControl::HandleRatioReport(const RegisteredNode& node,
                                        const proto::RatioReport& report, Outbox* out) {
  if (node.role != proto::ROLE_WORKER) {
    const std::string why =
        absl::StrCat("RatioReport from ", NodeTable::Name(node), ", which is not a worker");
    out->Refuse(node.identity, why, why);
    return;
  }
  if (keeper_.update_pending()) return;  // one change at a time
  // The windows come from every worker, or from each machine's local root (hierarchical).
  const int pushers = config_.hierarchical() && nodes_.local() != nullptr
                          ? static_cast<int>(nodes_.local()->machines.size())
                          : config_.num_workers();
  std::string dropped;
  std::optional<AdaptiveRatioControl::Change> change =
      adaptive_.Add(node.rank, report, keeper_.current(), pushers, &dropped);
  // Reports of the version before a switch arrive after it: expected, not worth a line.
  if (!dropped.empty() && report.strategy_version() >= keeper_.current().version()) {
    BC_LOG_WARNING(dropped);
  }
  if (!change.has_value()) return;
  absl::StatusOr<proto::ControlMessage> prepare = keeper_.BeginUpdate(change->strategy);
  if (!prepare.ok()) {
    BC_LOG_ERROR(change->log, "; not applied: ", prepare.status().message());
    return;
  }
  BC_LOG_INFO(change->log, "; preparing version ", prepare->strategy_prepare().version());
  Prepare(*prepare, out);
}

}  // namespace bytecomp
