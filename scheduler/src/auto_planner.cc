#include "bytecomp/scheduler/auto_planner.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bytecomp/common/stats.h"
#include "bytecomp/compress/strategy.h"
#include "bytecomp/planner/explain.h"
#include "bytecomp/planner/fusion.h"
#include "bytecomp/planner/placement.h"
#include "bytecomp/planner/planner.h"
#include "bytecomp/planner/timeline.h"

namespace bytecomp {

double TwoSignificantDigits(double x) {
  if (!(x > 0) || !std::isfinite(x)) return x;
  const double scale = std::pow(10.0, std::floor(std::log10(x)) - 1);
  return std::round(x / scale) * scale;
}

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
  link.set_bandwidth_gbps(TwoSignificantDigits(std::min(measured->up_gbps, measured->down_gbps)));
  link.set_latency_us(TwoSignificantDigits(measured->latency_us / 4));
  *cluster->mutable_worker_link() = link;
  *cluster->mutable_server_link() = link;
  return absl::StrFormat(
      "links from the probes of %d workers (%d worker-server pairs; medians: round trip %.1f "
      "us, up %.3f Gbit/s, down %.3f Gbit/s): worker_link and server_link %s each, instead "
      "of the --plan_cluster file's %s",
      measured->workers, measured->pairs, measured->latency_us, measured->up_gbps,
      measured->down_gbps, describe(link), file);
}

bool IsUncompressed(const proto::Strategy& strategy) {
  for (const proto::TensorStrategy& t : strategy.tensors()) {
    if (!compress::IsNoneName(t.push_codec().name())) return false;
  }
  return true;
}

namespace {

// The sizes below which --strategy=auto tries fusing small tensors, and the gain a fused plan
// must be predicted to bring (a group's copies in and out are not in the cost model).
constexpr int64_t kFusionBelow[] = {int64_t{64} << 10, int64_t{1} << 20};
constexpr double kFusionMinGain = 0.02;

// Multiplies both links' bandwidth by `scale`.
void ScaleLinks(proto::ClusterDescription* cluster, double scale) {
  for (proto::LinkSpec* link : {cluster->mutable_worker_link(), cluster->mutable_server_link()}) {
    link->set_bandwidth_gbps(link->bandwidth_gbps() * scale);
  }
}

// The model's uncompressed round (without forward_us) with both links at `scale` of their
// bandwidth.
absl::StatusOr<double> UncompressedRoundUs(planner::PlannerInputs inputs, double scale) {
  ScaleLinks(&inputs.cluster, scale);
  absl::StatusOr<planner::PreparedProblem> prepared = planner::Prepare(inputs);
  if (!prepared.ok()) return prepared.status();
  planner::TimelineSimulator sim(&prepared->sim);
  return sim.Simulate(prepared->none_index) - prepared->sim.forward_us;
}

// Scales inputs->cluster's links so that the model's uncompressed round matches
// `measured_us`; returns the scale. 1 when the model is not faster than the measurement, or
// when the model's round is mostly backward compute: the communication it exposes beyond the
// compute must be at least a quarter of the measured excess over the compute, or else the
// difference is more likely the compute's than the links'.
absl::StatusOr<double> FitLinks(planner::PlannerInputs* inputs, double measured_us,
                                double* predicted_us) {
  absl::StatusOr<double> at_one = UncompressedRoundUs(*inputs, 1.0);
  if (!at_one.ok()) return at_one.status();
  *predicted_us = *at_one;
  double compute_us = 0;
  for (const proto::TensorProfile& t : inputs->profile.tensors()) compute_us += t.ready_gap_us();
  if (measured_us <= *at_one || *at_one - compute_us < 0.25 * (measured_us - compute_us)) {
    return 1.0;
  }
  double lo = 0.1, hi = 1.0;  // the round at lo is longer than measured, at hi shorter
  for (int i = 0; i < 14; ++i) {
    const double mid = (lo + hi) / 2;
    absl::StatusOr<double> at_mid = UncompressedRoundUs(*inputs, mid);
    if (!at_mid.ok()) return at_mid.status();
    (*at_mid > measured_us ? lo : hi) = mid;
  }
  hi = TwoSignificantDigits(hi);
  ScaleLinks(&inputs->cluster, hi);
  return hi;
}

// What the CPUs did during the profiled rounds (ModelProfile's CPU fields, merged).
struct RoundCpu {
  bool reported = false;
  bool bound = false;
  std::string words;  // "host CPUs 93% busy; a worker process used 1.9 of 2 cores"
};
RoundCpu CpuOfRounds(const proto::ModelProfile& profile) {
  constexpr double kBusy = 0.85;
  constexpr double kWaiting = 0.25;  // of the round, every thread's wait summed
  RoundCpu cpu;
  std::vector<std::string> seen;
  const bool wait_known = profile.has_measured_round_wait_us() && profile.measured_round_us() > 0;
  if (profile.measured_round_cpu_us() > 0 && profile.measured_round_us() > 0 &&
      profile.cpu_cores() > 0) {
    cpu.reported = true;
    const double cores = profile.measured_round_cpu_us() / profile.measured_round_us();
    cpu.bound = cores >= kBusy * profile.cpu_cores();
    seen.push_back(
        absl::StrFormat("a worker process used %.2g of its %d cores", cores, profile.cpu_cores()));
  }
  if (wait_known) {
    cpu.reported = true;
    const double share = profile.measured_round_wait_us() / profile.measured_round_us();
    cpu.bound = cpu.bound || share >= kWaiting;
    seen.push_back(
        absl::StrFormat("its threads waited %.0f%% of the round for a CPU", 100 * share));
  }
  if (profile.has_measured_training_wait_us() && profile.measured_round_us() > 0) {
    cpu.reported = true;
    seen.push_back(absl::StrFormat(
        "its training thread %.0f%% (what that added is left out of the ready gaps)",
        100 * profile.measured_training_wait_us() / profile.measured_round_us()));
  }
  if (profile.host_cpu_busy() > 0) {
    cpu.reported = true;
    if (wait_known) {
      seen.push_back(absl::StrFormat("host CPUs %.0f%% busy, other programs included",
                                     100 * profile.host_cpu_busy()));
    } else {
      cpu.bound = cpu.bound || profile.host_cpu_busy() >= kBusy;
      seen.insert(seen.begin(),
                  absl::StrFormat("host CPUs %.0f%% busy", 100 * profile.host_cpu_busy()));
    }
  }
  cpu.words = absl::StrJoin(seen, "; ");
  return cpu;
}

// The link fit for PlanFromProfiles: scales inputs->cluster's links when the job's profiled
// rounds allow (AutoPlanJob, FitLinks); returns the log's words for what it did.
absl::StatusOr<std::string> ApplyLinkFit(planner::PlannerInputs* inputs, const AutoPlanJob& job,
                                         double* scale, bool* cpu_bound) {
  *scale = 1;
  const double measured_us = inputs->profile.measured_round_us();
  const RoundCpu cpu = CpuOfRounds(inputs->profile);
  *cpu_bound = cpu.bound;
  const std::string bound = !cpu.reported ? "the workers did not report their CPU use"
                            : cpu.bound   ? absl::StrCat("CPU-bound rounds (", cpu.words, ")")
                                          : absl::StrCat("network-bound rounds (", cpu.words, ")");
  if (!job.profiled_uncompressed) {
    return absl::StrCat("links not fitted: the profiled rounds ran compressed; ", bound);
  }
  if (measured_us <= 0) return "links not fitted: the profiled rounds were not timed";
  if (cpu.bound) {
    absl::StatusOr<double> model_us = UncompressedRoundUs(*inputs, 1.0);
    if (!model_us.ok()) return model_us.status();
    return absl::StrFormat(
        "the profiled (uncompressed) rounds took %.3f ms, the model %.3f ms with the links "
        "given; %s: links not fitted (a slow CPU is not a slow network)",
        measured_us / 1000.0, *model_us / 1000.0, bound);
  }
  double predicted_us = 0;
  absl::StatusOr<double> fitted = FitLinks(inputs, measured_us, &predicted_us);
  if (!fitted.ok()) return fitted.status();
  *scale = *fitted;
  std::string fit = absl::StrFormat(
      "the profiled (uncompressed) rounds took %.3f ms, the model %.3f ms with the links "
      "given; ",
      measured_us / 1000.0, predicted_us / 1000.0);
  if (*scale < 1) {
    absl::StrAppendFormat(
        &fit, "links fitted: %.3f of their bandwidth, worker_link and server_link %.3f Gbit/s",
        *scale, inputs->cluster.worker_link().bandwidth_gbps());
  } else if (measured_us > predicted_us) {
    fit +=
        "links not fitted: the model's round is mostly backward compute, or too far off for "
        "the links to explain";
  } else {
    fit += "links kept";
  }
  return absl::StrCat(fit, "; ", bound);
}

}  // namespace

proto::ModelProfile MergeReadyTimes(const std::vector<proto::ModelProfile>& profiles) {
  // name -> every worker's ready offset (its gaps summed from its first gradient).
  std::map<std::string, std::vector<double>> offsets;
  for (const proto::ModelProfile& p : profiles) {
    double offset = 0;
    for (const proto::TensorProfile& t : p.tensors()) {
      offset += t.ready_gap_us();
      offsets[t.name()].push_back(offset);
    }
  }
  std::vector<std::pair<double, int>> order;  // (median offset, index in profiles[0])
  const proto::ModelProfile& first = profiles[0];
  for (int i = 0; i < first.tensors_size(); ++i) {
    order.emplace_back(Median(offsets[first.tensors(i).name()]), i);
  }
  std::stable_sort(order.begin(), order.end());
  proto::ModelProfile merged = first;
  merged.clear_tensors();
  double previous = 0;
  for (const auto& [offset, i] : order) {
    proto::TensorProfile* t = merged.add_tensors();
    *t = first.tensors(i);
    t->set_ready_gap_us(TwoSignificantDigits(std::max(0.0, offset - previous)));
    previous = offset;
  }
  return merged;
}

absl::StatusOr<AutoPlan> PlanFromProfiles(const std::vector<proto::ModelProfile>& profiles,
                                          proto::ClusterDescription cluster,
                                          const proto::CostTable& costs, const AutoPlanJob& job,
                                          const proto::PlannerOptions& options) {
  if (profiles.empty() || profiles[0].tensors_size() == 0) {
    return absl::FailedPreconditionError("no profile with tensors was reported");
  }
  planner::PlannerInputs inputs;
  inputs.profile = MergeReadyTimes(profiles);
  // Medians over the workers that measured the value, to two significant digits.
  auto median = [&](auto field) {
    std::vector<double> values;
    for (const proto::ModelProfile& p : profiles) {
      if (field(p) > 0) values.push_back(field(p));
    }
    return values.empty() ? 0.0 : TwoSignificantDigits(Median(values));
  };
  inputs.profile.set_forward_us(median([](const auto& p) { return p.forward_us(); }));
  inputs.profile.set_measured_round_us(median([](const auto& p) { return p.measured_round_us(); }));
  inputs.profile.set_measured_round_cpu_us(
      median([](const auto& p) { return p.measured_round_cpu_us(); }));
  inputs.profile.set_host_cpu_busy(median([](const auto& p) { return p.host_cpu_busy(); }));
  inputs.profile.set_measured_training_cpu_us(
      median([](const auto& p) { return p.measured_training_cpu_us(); }));
  // Medians of optional fields over the workers that reported them (0 is a measurement
  // there: absent is not); unset when none did.
  auto optional_median = [&](auto has, auto field) -> std::optional<double> {
    std::vector<double> values;
    for (const proto::ModelProfile& p : profiles) {
      if (has(p)) values.push_back(field(p));
    }
    if (values.empty()) return std::nullopt;
    return TwoSignificantDigits(Median(values));
  };
  if (std::optional<double> wait =
          optional_median([](const auto& p) { return p.has_measured_round_wait_us(); },
                          [](const auto& p) { return p.measured_round_wait_us(); })) {
    inputs.profile.set_measured_round_wait_us(*wait);
  }
  if (std::optional<double> wait =
          optional_median([](const auto& p) { return p.has_measured_training_wait_us(); },
                          [](const auto& p) { return p.measured_training_wait_us(); })) {
    inputs.profile.set_measured_training_wait_us(*wait);
  }
  if (std::optional<double> cpu =
          optional_median([](const auto& p) { return p.has_measured_forward_cpu_us(); },
                          [](const auto& p) { return p.measured_forward_cpu_us(); })) {
    inputs.profile.set_measured_forward_cpu_us(*cpu);
  }
  inputs.profile.set_cpu_cores(
      static_cast<int>(median([](const auto& p) { return static_cast<double>(p.cpu_cores()); })));
  inputs.profile.set_source(absl::StrCat(profiles[0].source(), "; the medians over ",
                                         profiles.size(), " workers, to two significant digits"));
  // What the workers measured is checked as a profile file is: a tensor of 2^41 elements must
  // not reach the cost model.
  if (absl::Status s = planner::ValidateProfile(inputs.profile, nullptr, "the workers' profile");
      !s.ok()) {
    return s;
  }
  cluster.set_workers(job.workers);
  cluster.set_servers(job.servers);
  if (job.partition_bytes > 0) cluster.set_partition_bytes(job.partition_bytes);
  cluster.set_collectives(job.collectives);
  std::string scheme = "flat";
  if (job.hierarchical_machines > 0) {
    cluster.set_machines(job.hierarchical_machines);
    scheme = absl::StrCat("hierarchical, ", job.hierarchical_machines, " machines");
  }
  if (cluster.colocated_servers()) absl::StrAppend(&scheme, ", servers beside the workers");
  if (cluster.collectives()) absl::StrAppend(&scheme, ", collectives among the workers");
  inputs.cluster = std::move(cluster);
  inputs.costs = costs;
  inputs.options = options;
  if (job.hierarchical_machines > 0) inputs.options.set_hierarchical_only(true);
  AutoPlan out;
  absl::StatusOr<std::string> fit = ApplyLinkFit(&inputs, job, &out.link_scale, &out.cpu_bound);
  if (!fit.ok()) return fit.status();
  absl::StatusOr<planner::PreparedProblem> prepared = planner::Prepare(inputs);
  if (!prepared.ok()) return prepared.status();
  planner::PlanResult plan = planner::PlanByteComp(*prepared);
  const planner::PreparedProblem* problem = &*prepared;
  const int model_tensors = inputs.profile.tensors_size();
  double planning_ms = plan.planning_ms;
  // Fusion groups (a flat job's host fp32 tensors): the model planned again with its small
  // tensors fused below each size of kFusionBelow, kept where predicted faster.
  std::optional<planner::FusedPlan> fused;
  std::string fusion;
  if (job.hierarchical_machines == 0 && !inputs.options.disable_fusion()) {
    const int64_t cap =
        inputs.cluster.partition_bytes() > 0 ? inputs.cluster.partition_bytes() : int64_t{4} << 20;
    absl::StatusOr<std::optional<planner::FusedPlan>> planned = planner::PlanWithFusion(
        inputs, kFusionBelow, cap, plan.predicted_us, kFusionMinGain,
        [](const planner::PreparedProblem& p) -> absl::StatusOr<planner::PlanResult> {
          return planner::PlanByteComp(p);
        });
    if (!planned.ok()) return planned.status();
    fused = *std::move(planned);
    if (fused.has_value()) {
      planning_ms += fused->result.planning_ms;
      fusion = absl::StrFormat(
          "; %s %d small tensors in %zu fusion groups (under %lld bytes: predicted %.3f ms "
          "against %.3f ms unfused)",
          fused->faster ? "fused" : "did not fuse", fused->model.members,
          fused->model.groups.size(), static_cast<long long>(fused->below_bytes),
          fused->result.predicted_us / 1000.0, plan.predicted_us / 1000.0);
    }
    if (fused.has_value() && fused->faster) {
      plan = fused->result;
      problem = &fused->problem;
    }
  }
  out.strategy = planner::ToStrategy(*problem, plan.choice);
  if (fused.has_value() && fused->faster) {
    for (const proto::FusionGroup& g : fused->model.groups) *out.strategy.add_fusion_groups() = g;
  }
  out.profile = inputs.profile;
  out.cluster = inputs.cluster;
  out.options = inputs.options;
  out.predicted_us = plan.predicted_us;
  out.table = planner::PlanTable(*problem, plan.choice, planner::ExplainPlan(*problem, plan.choice),
                                 /*large_only=*/true);
  // The model's tensors compressed (a fused group's members count).
  absl::flat_hash_map<std::string, int> members;
  for (const proto::FusionGroup& g : out.strategy.fusion_groups())
    members[g.name()] = g.tensors_size();
  int compressed = 0;
  for (size_t i = 0; i < plan.choice.size(); ++i) {
    if (problem->sim.tensors[i].options[plan.choice[i]].option.codec < 0) continue;
    auto group = members.find(problem->inputs.profile.tensors(static_cast<int>(i)).name());
    compressed += group == members.end() ? 1 : group->second;
  }
  const std::string excluded = planner::ExcludedCodecs(*problem);
  const std::string placement =
      planner::PlacementWarning(planner::PlaceOnServers(problem->inputs.profile, inputs.cluster),
                                problem->inputs.profile, inputs.cluster);
  // The forward on one host: every worker's at once on the shared cores.
  const std::string forward_on_host =
      problem->sim.forward_us > inputs.profile.forward_us()
          ? absl::StrFormat(", %.3f ms with every worker's %.3f ms of CPU on the host's cores",
                            problem->sim.forward_us / 1000.0,
                            inputs.profile.measured_forward_cpu_us() / 1000.0)
          : "";
  out.summary = absl::StrCat(
      "planned ", model_tensors, " tensors (", scheme, ") in ",
      absl::StrFormat("%.1f", planning_ms), " ms: ", compressed,
      " compressed; predicted iteration ", absl::StrFormat("%.3f", plan.predicted_us / 1000.0),
      " ms against ", absl::StrFormat("%.3f", plan.no_compression_us / 1000.0),
      " ms uncompressed and ", absl::StrFormat("%.3f", plan.compress_everything_us / 1000.0),
      " ms compressing everything (measured forward ",
      absl::StrFormat("%.3f", inputs.profile.forward_us() / 1000.0), " ms", forward_on_host, "); ",
      *fit, fusion,
      excluded.empty() ? ""
                       : absl::StrCat("; not considered: ", excluded,
                                      " (PlannerOptions.max_loss, --plan_options)"),
      placement.empty() ? "" : absl::StrCat("; ", placement));
  return out;
}

}  // namespace bytecomp
