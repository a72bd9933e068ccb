// Strategy changes, in two phases so that every node switches at the same round
// (control.proto, StrategyPrepare): a reload of the strategy file (SIGHUP), or
// --strategy=auto's plan once every worker reported its profiled rounds, sends
// StrategyPrepare{version} to every worker; once all answered StrategyPrepareReply, every
// server and then every worker gets StrategyCommit{strategy, first_round}. A file that does
// not load or validate is logged and the strategy in force stays.
//
// Also the adaptive ratio: the workers' RatioReports go to AdaptiveRatioControl
// (adaptive_ratio.h), whose changes are prepared and committed as any other update, one at a
// time, each logged with its reason.
//
// --strategy=auto plans on a thread of its own (StartPlanning: copies of the profiles and
// inputs, a std::future for the result), so that the scheduler's thread goes on heartbeating
// and answering the nodes while it plans: planning a large model, or any model under a
// sanitizer, can take seconds, longer than the nodes' scheduler timeout. OnTime, on the
// scheduler's thread, takes the finished plan up and prepares it; nothing else is shared.
// Destroying a StrategyControl waits for a plan still being computed.
//
// --strategy=auto writes the strategy it switches to, as committed, to a file (AutoPlanInputs
// .plan_out) with the plan's summary and per-tensor table as comments, and logs the path, the
// summary and the table; `--strategy=FILE` runs that plan again. Beside it, what was planned
// with (FILE.profile.pbtxt, FILE.cluster.pbtxt, FILE.options.pbtxt), for bytecomp-plan.
//
// Also the workers' LinkProbeReports (sent once at start): kept, printed as one table once
// every worker reported, and used by --strategy=auto's plan. Prepare replies and link probe
// reports from a server are answered with an Error.
#pragma once

#include <cstdint>
#include <future>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "bytecomp/scheduler/adaptive_ratio.h"
#include "bytecomp/scheduler/auto_planner.h"
#include "bytecomp/scheduler/link_book.h"
#include "bytecomp/scheduler/node_table.h"
#include "bytecomp/scheduler/outbox.h"
#include "bytecomp/scheduler/strategy_keeper.h"
#include "cluster_config.pb.h"
#include "control.pb.h"
#include "planner.pb.h"

namespace bytecomp {

// What --strategy=auto plans with, and where the plan goes.
struct AutoPlanInputs {
  proto::ClusterDescription cluster;
  proto::CostTable costs;
  proto::PlannerOptions options;
  PlanLinks links = PlanLinks::kMeasured;
  // The strategy file the plan is written to (empty: not written).
  std::string plan_out;
};

// Reads the --plan_cluster and --plan_costs files and, when given, the --plan_options file;
// the error names what is missing or wrong.
absl::StatusOr<AutoPlanInputs> LoadAutoPlanInputs(const std::string& cluster_path,
                                                  const std::string& costs_path,
                                                  const std::string& options_path, PlanLinks links);

// The default --plan_out: $TMPDIR (else /tmp)/bytecomp-auto-strategy-<pid>.pbtxt.
std::string DefaultPlanOut();

class StrategyControl {
 public:
  // `keeper`: the strategy loaded at start. `auto_plan`: set for --strategy=auto.
  StrategyControl(const proto::ClusterConfig& config, const NodeTable& nodes, StrategyKeeper keeper,
                  std::optional<AutoPlanInputs> auto_plan);

  // The strategy in force and the file it came from (Registration sends it in the topology).
  const StrategyKeeper& keeper() const { return keeper_; }
  const LinkBook& links() const { return links_; }
  // --strategy=auto: the plan's predicted iteration, once planned.
  std::optional<double> predicted_us() const { return predicted_us_; }

  // A restarted scheduler taking the job up (takeover.h): `in_force` is the strategy the nodes
  // run. Under --strategy=auto a strategy beyond the first (version 1) means the plan was
  // switched to already: it is not planned again.
  void Restore(const proto::Strategy& in_force);
  // SIGHUP: re-read the strategy file and prepare every worker for it.
  void Reload(Outbox* out);
  void HandlePrepareReply(const RegisteredNode& node, const proto::StrategyPrepareReply& reply,
                          Outbox* out);
  // --strategy=auto: once every worker reported, start planning (OnTime prepares the plan once
  // it is computed). Other jobs ignore profiles.
  void HandleProfileReport(const RegisteredNode& node, const proto::ProfileReport& report,
                           Outbox* out);
  void HandleLinkProbeReport(const RegisteredNode& node, const proto::LinkProbeReport& report,
                             Outbox* out);
  // A worker's measurements of a window of an adaptive-ratio tensor; the policy may change the
  // entry's ratio (adaptive_ratio.h).
  void HandleRatioReport(const RegisteredNode& node, const proto::RatioReport& report, Outbox* out);
  // --strategy=auto: once the plan is computed (and no other switch is under way), logs it and
  // prepares every worker for it; a failed plan is logged and the job goes on as it is.
  void OnTime(Outbox* out);
  // While a plan is being computed: when OnTime should look again (every kPlanCheckMs).
  std::optional<int64_t> NextCheckMs(int64_t now_ms) const;

 private:
  void Prepare(const proto::ControlMessage& prepare, Outbox* out);
  static constexpr int64_t kPlanCheckMs = 10;

  void StartPlanning();
  // Writes the committed plan to auto_plan_->plan_out and logs where.
  void WritePlan(const proto::Strategy& committed);

  const proto::ClusterConfig& config_;
  const NodeTable& nodes_;
  StrategyKeeper keeper_;
  std::optional<AutoPlanInputs> auto_plan_;
  std::map<int, proto::ModelProfile> profiles_;  // by worker rank
  bool planned_ = false;
  // The plan being computed (valid from StartPlanning until OnTime takes its result).
  std::future<absl::StatusOr<AutoPlan>> planning_;
  // The plan being switched to (for WritePlan).
  uint64_t plan_version_ = 0;
  std::optional<AutoPlan> plan_;
  std::optional<double> predicted_us_;
  LinkBook links_;
  AdaptiveRatioControl adaptive_;
};

}  // namespace bytecomp
