// bytecomp-plan: model profile + cluster + codec cost table -> Strategy (.pbtxt), the
// predicted iteration time against no compression and compress-everything, a per-tensor
// table, and a Chrome trace of the predicted timeline.
#include <cstdio>
#include <fstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bytecomp/common/command_line.h"
#include "bytecomp/common/config.h"
#include "bytecomp/planner/explain.h"
#include "bytecomp/planner/fusion.h"
#include "bytecomp/planner/placement.h"
#include "bytecomp/planner/planner.h"
#ifdef BYTECOMP_PLAN_CALIBRATE
#include "bytecomp/planner/calibrate.h"
#endif
#include "google/protobuf/text_format.h"

ABSL_FLAG(std::string, profile, "", "Model profile (.pbtxt, bytecomp.proto.ModelProfile)");
ABSL_FLAG(std::string, cluster, "", "Cluster description (.pbtxt, ClusterDescription)");
ABSL_FLAG(std::string, costs, "", "Codec cost table (.pbtxt, CostTable)");
ABSL_FLAG(std::string, options, "",
          "Planner options (.pbtxt, PlannerOptions: codecs, max_loss, partition sizes...); "
          "optional");
ABSL_FLAG(std::string, out, "strategy.pbtxt", "Where to write the Strategy");
ABSL_FLAG(std::string, trace, "", "Where to write the Chrome trace JSON of the plan; optional");
ABSL_FLAG(std::string, all_codec, "",
          "Codec of the compress-everything reference (default: the table's first)");
ABSL_FLAG(int64_t, fusion_below, 0,
          "Also plan the model with consecutive tensors under this many bytes fused into groups "
          "(Strategy.fusion_groups) of at most --fusion_cap bytes; keep the faster plan. 0: off");
ABSL_FLAG(int64_t, fusion_cap, 4 << 20, "A fusion group's bytes at most (--fusion_below)");
ABSL_FLAG(bool, exhaustive, false, "Exhaustive search instead of the algorithm (small models)");
ABSL_FLAG(bool, table, true,
          "Print the per-tensor table (chosen option, loss class, predicted saving, why); the "
          "strategy file has it as comments either way");
ABSL_FLAG(bool, calibrate, false,
          "Measure codec encode/decode costs on this host's CPU and write the cost table to "
          "--costs, then exit");
ABSL_FLAG(std::string, calibrate_template, "",
          "Cost table whose codecs (names, params, memories, GPU costs) --calibrate measures; "
          "default: every registered codec with default parameters");
ABSL_FLAG(double, calibrate_seconds, 0.02, "Time spent per measured point of --calibrate");
ABSL_FLAG(std::string, evaluate, "",
          "A Strategy file (.pbtxt) to simulate beside the plan: its predicted iteration is "
          "printed as 'evaluated <file>: <ms> ms'");

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "bytecomp-plan: %s\n", message.c_str());
  return 1;
}

int Calibrate() {
#ifdef BYTECOMP_PLAN_CALIBRATE
  using namespace bytecomp::planner;
  const std::string out = absl::GetFlag(FLAGS_costs);
  if (out.empty()) return Fail("--calibrate writes the table to --costs, which is empty");
  bytecomp::proto::CostTable template_table;
  if (const std::string path = absl::GetFlag(FLAGS_calibrate_template); !path.empty()) {
    auto loaded = LoadCostTable(path);
    if (!loaded.ok()) return Fail(std::string(loaded.status().message()));
    template_table = *std::move(loaded);
  }
  CalibrationOptions options;
  options.seconds_per_point = absl::GetFlag(FLAGS_calibrate_seconds);
  auto table = CalibrateCpuCosts(template_table, options);
  if (!table.ok()) return Fail(std::string(table.status().message()));
  if (absl::StatusOr<int> gpu = CalibrateGpuCosts(&*table, options); gpu.ok()) {
    std::printf("GPU: measured %d codecs\n", *gpu);
  } else if (absl::IsUnavailable(gpu.status())) {
    std::printf("GPU: not measured (%s)\n", std::string(gpu.status().message()).c_str());
  } else {
    return Fail(std::string(gpu.status().message()));
  }
  std::string text;
  google::protobuf::TextFormat::PrintToString(*table, &text);
  std::ofstream file(out);
  if (!file) return Fail("cannot write " + out);
  file << "# Written by bytecomp-plan --calibrate.\n" << text;
  std::printf("%-12s %8s %10s | %12s %12s | %12s %12s\n", "codec", "ratio", "overhead",
              "enc 1MiB us", "dec 1MiB us", "enc GB/s", "dec GB/s");
  for (const auto& codec : table->codecs()) {
    const auto& cpu = codec.costs(0);
    const double enc = InterpolateCost(cpu.encode(), 1 << 20);
    const double dec = InterpolateCost(cpu.decode(), 1 << 20);
    std::printf("%-12s %8.4f %10lld | %12.1f %12.1f | %12.2f %12.2f\n", codec.name().c_str(),
                codec.ratio(), static_cast<long long>(codec.overhead_bytes()), enc, dec,
                (1 << 20) / enc / 1e3, (1 << 20) / dec / 1e3);
  }
  std::printf("cost table: %s (%s)\n", out.c_str(), table->source().c_str());
  return 0;
#else
  return Fail(
      "--calibrate is not available in this build: it needs the codec registry "
      "(compress/, target bytecomp_compress), which was not built");
#endif
}

}  // namespace

int main(int argc, char** argv) {
  bytecomp::ParseCommandLine(
      argc, argv,
      "bytecomp-plan --profile=P.pbtxt --cluster=C.pbtxt --costs=T.pbtxt [--out=strategy.pbtxt]\n"
      "       bytecomp-plan --calibrate --costs=OUT.pbtxt [--calibrate_template=T.pbtxt]\n"
      "The ByteComp planner: per tensor whether, how and where to compress "
      "(scheduler/planner/README.md).");
  using namespace bytecomp::planner;
  if (absl::GetFlag(FLAGS_calibrate)) return Calibrate();
  if (absl::GetFlag(FLAGS_profile).empty() || absl::GetFlag(FLAGS_cluster).empty() ||
      absl::GetFlag(FLAGS_costs).empty()) {
    return Fail("--profile, --cluster and --costs are required");
  }
  PlannerInputs inputs;
  auto profile = LoadModelProfile(absl::GetFlag(FLAGS_profile));
  if (!profile.ok()) return Fail(std::string(profile.status().message()));
  auto cluster = LoadClusterDescription(absl::GetFlag(FLAGS_cluster));
  if (!cluster.ok()) return Fail(std::string(cluster.status().message()));
  auto costs = LoadCostTable(absl::GetFlag(FLAGS_costs));
  if (!costs.ok()) return Fail(std::string(costs.status().message()));
  inputs.profile = *std::move(profile);
  inputs.cluster = *std::move(cluster);
  inputs.costs = *std::move(costs);
  if (!absl::GetFlag(FLAGS_options).empty()) {
    auto options = LoadPlannerOptions(absl::GetFlag(FLAGS_options));
    if (!options.ok()) return Fail(std::string(options.status().message()));
    inputs.options = *std::move(options);
  }
  auto plan = [](const PreparedProblem& problem) -> absl::StatusOr<PlanResult> {
    if (absl::GetFlag(FLAGS_exhaustive)) return PlanExhaustive(problem);
    return PlanByteComp(problem);
  };
  auto prepared = Prepare(inputs);
  if (!prepared.ok()) return Fail(std::string(prepared.status().message()));
  auto planned = plan(*prepared);
  if (!planned.ok()) return Fail(std::string(planned.status().message()));
  PlanResult result = *std::move(planned);
  const PreparedProblem* chosen = &*prepared;
  const bytecomp::proto::ModelProfile given_profile = inputs.profile;  // before any fusion

  // Tensor fusion: the model again with its small tensors in groups, planned the same way;
  // the faster plan is kept.
  std::vector<bytecomp::proto::FusionGroup> fusion_groups;
  std::optional<FusedPlan> fused;
  if (const int64_t below = absl::GetFlag(FLAGS_fusion_below); below > 0) {
    auto planned_fused = PlanWithFusion(inputs, {below}, absl::GetFlag(FLAGS_fusion_cap),
                                        result.predicted_us, /*min_gain=*/0, plan);
    if (!planned_fused.ok()) return Fail(std::string(planned_fused.status().message()));
    fused = *std::move(planned_fused);
    if (!fused.has_value()) {
      std::printf("fusion: no two consecutive tensors under %lld bytes\n",
                  static_cast<long long>(below));
    } else {
      std::printf(
          "fusion: %d tensors under %lld bytes in %zu groups: predicted %.3f ms against %.3f ms "
          "unfused: %s\n",
          fused->model.members, static_cast<long long>(below), fused->model.groups.size(),
          fused->result.predicted_us / 1e3, result.predicted_us / 1e3,
          fused->faster ? "fused" : "not fused");
      if (fused->faster) {
        result = fused->result;
        chosen = &fused->problem;
        inputs.profile = fused->model.profile;  // the references below compare like with like
        fusion_groups = fused->model.groups;
      }
    }
  }
  const PreparedProblem& problem = *chosen;
  // The compress-everything reference is simulated over every option: dropping dominated ones
  // (which the search may) can remove the reference codec's options altogether.
  const std::string all_codec = absl::GetFlag(FLAGS_all_codec);
  {
    PlannerInputs all_options = inputs;
    all_options.options.set_keep_dominated(true);
    auto reference = Prepare(all_options);
    if (!reference.ok()) return Fail(std::string(reference.status().message()));
    TimelineSimulator reference_sim(&reference->sim);
    result.compress_everything_choice = CompressEverythingChoice(*reference, all_codec);
    result.compress_everything_us = reference_sim.Simulate(result.compress_everything_choice);
  }

  if (const std::string path = absl::GetFlag(FLAGS_evaluate); !path.empty()) {
    bytecomp::proto::Strategy strategy;
    if (absl::Status s = bytecomp::ParseTextProtoFile(path, &strategy); !s.ok()) {
      return Fail(std::string(s.message()));
    }
    // Every option, so that the strategy's are there even where a search would drop them;
    // the model with the strategy's fusion groups as tensors.
    PlannerInputs all_options = inputs;
    all_options.options.set_keep_dominated(true);
    auto grouped = ProfileWithGroups(
        given_profile, {strategy.fusion_groups().begin(), strategy.fusion_groups().end()});
    if (!grouped.ok()) return Fail(absl::StrCat(path, ": ", grouped.status().message()));
    all_options.profile = *std::move(grouped);
    auto everything = Prepare(all_options);
    if (!everything.ok()) return Fail(std::string(everything.status().message()));
    auto choice = ChoiceOf(*everything, strategy);
    if (!choice.ok()) return Fail(absl::StrCat(path, ": ", choice.status().message()));
    std::printf("evaluated %s: %.3f ms\n", path.c_str(),
                TimelineSimulator(&everything->sim).Simulate(*choice) / 1e3);
  }

  const auto& c = problem.inputs.cluster;
  double total_bytes = 0;
  for (const auto& t : problem.sim.tensors) total_bytes += t.bytes;
  std::printf(
      "model %s: %zu tensors, %s; cluster: %d machines x %d GPUs, %d workers, %d "
      "servers, %.1f Gbit/s NICs\n",
      problem.inputs.profile.model().c_str(), problem.sim.tensors.size(),
      HumanBytes(total_bytes).c_str(), c.machines(), c.gpus_per_machine(), c.workers(), c.servers(),
      c.worker_link().bandwidth_gbps());
  std::string everything_codec = all_codec.empty() && problem.inputs.costs.codecs_size() > 0
                                     ? problem.inputs.costs.codecs(0).name()
                                     : all_codec;
  std::printf(
      "predicted iteration: no compression %.3f ms | compress-everything (%s) %.3f ms "
      "| planned %.3f ms\n",
      result.no_compression_us / 1e3, everything_codec.c_str(), result.compress_everything_us / 1e3,
      result.predicted_us / 1e3);
  std::printf("speed-up: %.2fx vs no compression, %.2fx vs compress-everything\n",
              result.no_compression_us / result.predicted_us,
              result.compress_everything_us / result.predicted_us);
  std::printf(
      "planner: %s, %.2f ms, %lld simulations, %lld events, %d tensors dropped "
      "before a communication bubble\n",
      absl::GetFlag(FLAGS_exhaustive) ? "exhaustive" : "bytecomp", result.planning_ms,
      static_cast<long long>(result.simulations), static_cast<long long>(result.events),
      result.dropped_before_bubble);
  if (const std::string excluded = ExcludedCodecs(problem); !excluded.empty()) {
    std::printf("not considered: %s\n", excluded.c_str());
  }
  if (const std::string placement =
          PlacementWarning(PlaceOnServers(problem.inputs.profile, problem.inputs.cluster),
                           problem.inputs.profile, problem.inputs.cluster);
      !placement.empty()) {
    std::printf("%s\n", placement.c_str());
  }
  const std::vector<TensorExplanation> why = ExplainPlan(problem, result.choice);
  const std::string table = PlanTable(problem, result.choice, why, /*large_only=*/false,
                                      /*option_counts=*/true);
  if (absl::GetFlag(FLAGS_table)) std::printf("%s", table.c_str());
  const std::string out = absl::GetFlag(FLAGS_out);
  {
    std::ofstream file(out);
    if (!file) return Fail("cannot write " + out);
    std::string header = absl::StrFormat(
        "Written by bytecomp-plan for %s: predicted %.3f ms per iteration (uncompressed %.3f "
        "ms). The saving of a tensor is how much longer the predicted iteration is when it "
        "alone goes uncompressed.",
        problem.inputs.profile.model(), result.predicted_us / 1e3, result.no_compression_us / 1e3);
    bytecomp::proto::Strategy strategy = ToStrategy(problem, result.choice);
    for (const auto& group : fusion_groups) *strategy.add_fusion_groups() = group;
    file << StrategyFileText(strategy, header, table);
  }
  std::printf("strategy: %s\n", out.c_str());
  if (const std::string trace_path = absl::GetFlag(FLAGS_trace); !trace_path.empty()) {
    std::vector<TraceSpan> spans;
    TimelineSimulator(&problem.sim).Simulate(result.choice, &spans);
    std::ofstream file(trace_path);
    if (!file) return Fail("cannot write " + trace_path);
    file << ChromeTraceJson(problem.sim, spans);
    std::printf("trace: %s (%zu spans; open in chrome://tracing or ui.perfetto.dev)\n",
                trace_path.c_str(), spans.size());
  }
  return 0;
}
