// The decision algorithm against the exhaustive optimum, and the Strategy it writes.
#include "bytecomp/planner/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>

#include "bytecomp/common/config.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "planner_test_util.h"

namespace bytecomp::planner {
namespace {

using testing::kPlannerDir;

double LogUniform(std::mt19937& rng, double lo, double hi) {
  return std::exp(std::uniform_real_distribution<double>(std::log(lo), std::log(hi))(rng));
}

void Curve(proto::DeviceCost* cost, double fixed_us, double encode_gbps, double decode_gbps) {
  for (int64_t bytes : {int64_t{4096}, int64_t{1} << 20, int64_t{64} << 20}) {
    auto* e = cost->add_encode();
    e->set_bytes(bytes);
    e->set_us(fixed_us + bytes / (encode_gbps * 1e3));
    auto* d = cost->add_decode();
    d->set_bytes(bytes);
    d->set_us(fixed_us + bytes / (decode_gbps * 1e3));
  }
}

// A random small model on a random cluster with two random codecs.
PlannerInputs RandomInputs(std::mt19937& rng) {
  PlannerInputs in;
  auto& c = in.cluster;
  c.set_machines(2 + rng() % 7);
  const int gpu_choices[] = {0, 1, 1, 1, 2};
  c.set_gpus_per_machine(gpu_choices[rng() % 5]);
  c.set_servers(1 + rng() % 4);
  c.mutable_worker_link()->set_bandwidth_gbps(LogUniform(rng, 1, 40));
  c.mutable_worker_link()->set_latency_us(LogUniform(rng, 2, 50));
  c.mutable_server_link()->set_bandwidth_gbps(LogUniform(rng, 1, 40));
  c.mutable_server_link()->set_latency_us(LogUniform(rng, 2, 50));
  c.mutable_intra_machine_link()->set_bandwidth_gbps(LogUniform(rng, 100, 1200));
  c.mutable_pcie_link()->set_bandwidth_gbps(LogUniform(rng, 32, 128));
  c.set_cpu_pool_threads(1 + rng() % 4);

  auto* light = in.costs.add_codecs();  // fp16-like
  light->set_name("fp16");
  light->set_ratio(0.5);
  light->set_summable(rng() % 2);
  light->set_reencodable(true);
  auto* heavy = in.costs.add_codecs();  // top-k-like
  heavy->set_name("topk");
  heavy->set_memory("residual");
  heavy->set_ratio(LogUniform(rng, 0.005, 0.1));
  heavy->set_overhead_bytes(8);
  heavy->set_reencodable(rng() % 10 < 7);
  for (auto* codec : {light, heavy}) {
    auto* cpu = codec->add_costs();
    cpu->set_device(proto::DEVICE_CPU);
    Curve(cpu, LogUniform(rng, 1, 20), LogUniform(rng, 0.1, 8), LogUniform(rng, 0.5, 8));
    auto* gpu = codec->add_costs();
    gpu->set_device(proto::DEVICE_GPU);
    Curve(gpu, LogUniform(rng, 5, 50), LogUniform(rng, 5, 500), LogUniform(rng, 20, 500));
  }
  const int n = 1 + rng() % 6;
  in.profile.set_model("random");
  in.profile.set_forward_us(LogUniform(rng, 100, 20000));
  for (int i = 0; i < n; ++i) {
    auto* t = in.profile.add_tensors();
    t->set_name("t" + std::to_string(i));
    t->set_elements(static_cast<int64_t>(LogUniform(rng, 4096, 16 << 20)));
    t->set_ready_gap_us(rng() % 4 == 0 ? 0 : LogUniform(rng, 10, 20000));
  }
  return in;
}

double Combinations(const PreparedProblem& p) {
  double combinations = 1;
  for (const auto& t : p.sim.tensors) combinations *= static_cast<double>(t.options.size());
  return combinations;
}

// A sanitized build (clang's ASan, several times slower here; TSan too) checks the first
// 100 random models: the same checks on a tenth of the search.
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define BYTECOMP_PLANNER_TEST_SANITIZED 1
#endif
#endif
#ifdef BYTECOMP_PLANNER_TEST_SANITIZED
constexpr int kRandomModels = 100;
#else
constexpr int kRandomModels = 1000;
#endif

TEST(PlannerTest, WithinThreePercentOfExhaustiveOnRandomSmallModels) {
  std::mt19937 rng(20240521);
  const int kModels = kRandomModels;
  int within = 0, better_than_none = 0;
  double worst_ratio = 0, sum_ratio = 0;
  std::string worst;
  for (int m = 0; m < kModels; ++m) {
    PlannerInputs in = RandomInputs(rng);
    auto prepared = Prepare(in);
    ASSERT_TRUE(prepared.ok()) << prepared.status();
    // Keep the exhaustive search affordable: drop tensors from the end while too many.
    while (in.profile.tensors_size() > 1) {
      PlannerInputs every_option = in;
      every_option.options.set_keep_dominated(true);
      if (Combinations(*Prepare(every_option)) <= 40000) break;
      in.profile.mutable_tensors()->RemoveLast();
    }
    prepared = Prepare(in);
    ASSERT_TRUE(prepared.ok());
    PlanResult planned = PlanByteComp(*prepared);
    // The optimum over every leaf of the decision tree, dominated options included.
    PlannerInputs every_option = in;
    every_option.options.set_keep_dominated(true);
    auto full = Prepare(every_option);
    ASSERT_TRUE(full.ok());
    auto optimum = PlanExhaustive(*full);
    ASSERT_TRUE(optimum.ok()) << optimum.status();
    // The exhaustive search is exact: the algorithm can never beat it.
    ASSERT_GE(planned.predicted_us, optimum->predicted_us * (1 - 1e-9)) << "model " << m;
    // The algorithm only accepts improvements: never worse than no compression.
    ASSERT_LE(planned.predicted_us, planned.no_compression_us * (1 + 1e-12)) << "model " << m;
    better_than_none += planned.predicted_us < planned.no_compression_us * (1 - 1e-6);
    // Its prediction is the simulator's.
    TimelineSimulator sim(&prepared->sim);
    ASSERT_NEAR(sim.Simulate(planned.choice), planned.predicted_us, 1e-6 * planned.predicted_us);
    const double ratio = planned.predicted_us / optimum->predicted_us;
    sum_ratio += ratio;
    within += ratio <= 1.03;
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = "model " + std::to_string(m) + " (" + std::to_string(prepared->sim.tensors.size()) +
              " tensors, " + std::to_string(in.cluster.gpus_per_machine()) +
              " GPUs/machine): planned " + std::to_string(planned.predicted_us) + " us, optimum " +
              std::to_string(optimum->predicted_us) + " us; planned [";
      for (size_t i = 0; i < planned.choice.size(); ++i) {
        const auto& t = prepared->sim.tensors[i];
        worst += DescribeOption(t.options[planned.choice[i]].option, in.costs) + " / " +
                 DescribeOption(full->sim.tensors[i].options[optimum->choice[i]].option, in.costs) +
                 "; ";
      }
      worst += "] (planned / optimum)";
    }
  }
  std::printf(
      "random small models: %d/%d within 3%% of the exhaustive optimum, mean ratio "
      "%.5f, worst %.5f: %s; %d of them gain from compression\n",
      within, kModels, sum_ratio / kModels, worst_ratio, worst.c_str(), better_than_none);
  EXPECT_GE(within, kModels * 99 / 100);
  // The random models must exercise compression, or the comparison says little.
  EXPECT_GE(better_than_none, kModels / 4);
}

TEST(PlannerTest, ExhaustiveRefusesLargeInputs) {
  std::mt19937 rng(1);
  PlannerInputs in = RandomInputs(rng);
  auto prepared = Prepare(in);
  ASSERT_TRUE(prepared.ok());
  auto result = PlanExhaustive(*prepared, /*max_combinations=*/0.5);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(PlannerTest, UnknownCodecInOptionsIsAnError) {
  std::mt19937 rng(2);
  PlannerInputs in = RandomInputs(rng);
  in.options.add_codecs("nosuchcodec");
  auto prepared = Prepare(in);
  ASSERT_FALSE(prepared.ok());
  EXPECT_NE(prepared.status().message().find("nosuchcodec"), std::string::npos);
}

PlannerInputs Shipped(const std::string& model, const std::string& cluster) {
  PlannerInputs in;
  in.profile = *LoadModelProfile(kPlannerDir + "/profiles/" + model + ".pbtxt");
  in.cluster = *LoadClusterDescription(kPlannerDir + "/clusters/" + cluster + ".pbtxt");
  in.costs = *LoadCostTable(kPlannerDir + "/costs/nominal.pbtxt");
  return in;
}

TEST(PlannerTest, StrategyForAShippedModelParsesBackAndMatchesTheChoice) {
  auto prepared = Prepare(Shipped("vgg16", "4x1gpu-1g"));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  PlanResult result = PlanByteComp(*prepared);
  // On a 1 Gbit/s network a comm-heavy model gains from compression.
  EXPECT_LT(result.predicted_us, 0.5 * result.no_compression_us);
  EXPECT_LE(result.predicted_us, result.compress_everything_us);
  proto::Strategy strategy = ToStrategy(*prepared, result.choice);
  std::string text;
  ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(strategy, &text));
  proto::Strategy parsed;
  ASSERT_TRUE(ParseTextProto(text, "strategy.pbtxt", &parsed).ok());
  ASSERT_EQ(parsed.tensors_size(), 32);
  EXPECT_EQ(parsed.min_compress_bytes(), 65536);
  for (int i = 0; i < parsed.tensors_size(); ++i) {
    const auto& ts = parsed.tensors(i);
    const auto& option = prepared->sim.tensors[i].options[result.choice[i]].option;
    EXPECT_EQ(ts.name_pattern(), prepared->sim.tensors[i].name);
    EXPECT_EQ(ts.push_codec().name().empty(), option.codec < 0);
    EXPECT_EQ(ts.pull_codec().name().empty(), !option.two_way);
    if (option.codec >= 0) {
      EXPECT_EQ(ts.push_codec().name(), prepared->inputs.costs.codecs(option.codec).name());
      EXPECT_EQ(ts.compress_on(),
                option.encode_on == Where::kGpu ? proto::PLACEMENT_GPU : proto::PLACEMENT_CPU_POOL);
    }
  }
}

// planner_bench's generated-2000: bert-base's tensors repeated under prefixed names to 2,000
// tensors, the forward pass growing with the copies.
PlannerInputs Generated2000() {
  PlannerInputs in = Shipped("bert-base", "8x1gpu-10g");
  const proto::ModelProfile base = in.profile;
  in.profile.clear_tensors();
  int copies = 0;
  while (in.profile.tensors_size() < 2000) {
    for (const auto& t : base.tensors()) {
      if (in.profile.tensors_size() == 2000) break;
      auto* copy = in.profile.add_tensors();
      *copy = t;
      copy->set_name("copy" + std::to_string(copies) + "." + t.name());
    }
    ++copies;
  }
  in.profile.set_forward_us(base.forward_us() * copies);
  return in;
}

// The planner's work, counted: a slower algorithm fails here on any host, where a timing test
// would only be noisy. Each shipped profile's plan and generated-2000's (8x1gpu-10g, the
// nominal table, as planner_bench) stays within its stated simulations and events, about
// 1.25x what it takes today; a change that needs more says so here, with the planner_bench
// figures.
TEST(PlannerTest, ShippedProfilesPlanWithinTheirSimulationAndEventBudgets) {
  struct Budget {
    const char* model;
    int64_t simulations;
    int64_t events;
  };
  for (const Budget& budget : {Budget{"resnet50", 93, 50'500}, Budget{"resnet101", 132, 58'200},
                               Budget{"vgg16", 24, 15'700}, Budget{"bert-base", 1'065, 485'000},
                               Budget{"gpt2", 768, 194'000}, Budget{"lstm", 5'390, 691'100},
                               Budget{"generated-2000", 3'700, 5'360'000}}) {
    const std::string model = budget.model;
    auto prepared =
        Prepare(model == "generated-2000" ? Generated2000() : Shipped(model, "8x1gpu-10g"));
    ASSERT_TRUE(prepared.ok()) << prepared.status();
    const PlanResult plan = PlanByteComp(*prepared);
    std::printf("%-14s %6lld simulations (budget %lld), %9lld events (budget %lld)\n", budget.model,
                static_cast<long long>(plan.simulations),
                static_cast<long long>(budget.simulations), static_cast<long long>(plan.events),
                static_cast<long long>(budget.events));
    EXPECT_LE(plan.simulations, budget.simulations) << budget.model;
    EXPECT_LE(plan.events, budget.events) << budget.model;
    // The counts are of real work: a plan that simulates nothing would pass any budget.
    EXPECT_GT(plan.events, 10 * static_cast<int64_t>(prepared->sim.tensors.size())) << budget.model;
  }
}

// The run memo (TimelineSimulator::UseRunMemo): PreferLessLoss's questions on resnet101 (each
// compressed tensor uncompressed, against the plan, at the budget and without a cutoff) get the
// same answers with it as without, and some take their end from another run's.
TEST(PlannerTest, RunMemoAnswersAsFullRunsDo) {
  auto prepared = Prepare(Shipped("resnet101", "8x1gpu-10g"));
  ASSERT_TRUE(prepared.ok());
  const SimProblem& problem = prepared->sim;
  const std::vector<int> plan = PlanByteComp(*prepared).choice;
  TimelineSimulator with(&problem), without(&problem);
  const double planned = with.Rebase(plan);
  without.Rebase(plan);
  with.UseRunMemo(true);
  TailBounds bounds;
  ComputeTailBounds(problem, plan, &bounds);
  int asked = 0;
  for (double cutoff : {planned * 1.001, TimelineSimulator::kAborted}) {
    for (size_t i = 0; i < plan.size(); ++i) {
      const int none = prepared->none_index[i];
      if (plan[i] == none) continue;
      std::vector<int> changed = plan;
      changed[i] = none;
      const auto total = with.TotalWork(changed);
      const int t = static_cast<int>(i);
      const double remembered = with.Evaluate(changed, t, cutoff, t, &total, &bounds.after);
      EXPECT_EQ(remembered, without.Evaluate(changed, t, cutoff, t, &total, &bounds.after))
          << problem.tensors[i].name << " cutoff " << cutoff;
      ++asked;
    }
  }
  EXPECT_GT(asked, 100);
  EXPECT_GT(with.memo_hits(), 10);
  EXPECT_EQ(without.memo_hits(), 0);
  EXPECT_LT(with.events_processed(), without.events_processed());
}

// On a model with checkpoints every few tensors (resnet101: 314 tensors): evaluations resume
// from checkpoints, a new baseline keeps the previous one's snapshots where it meets it, and
// the tail bounds stay below the simulated end, for changes of random tensors to random
// options, kept or undone.
TEST(PlannerTest, IncrementalRunsAndTailBoundsMatchFullSimulationsOfALargeModel) {
  auto prepared = Prepare(Shipped("resnet101", "8x1gpu-10g"));
  ASSERT_TRUE(prepared.ok());
  const SimProblem& problem = prepared->sim;
  const int n = static_cast<int>(problem.tensors.size());
  TimelineSimulator sim(&problem);
  // From the plan: most changes of it meet its timeline again soon.
  std::vector<int> base = PlanByteComp(*prepared).choice;
  sim.Rebase(base);
  TailBounds bounds;
  ComputeTailBounds(problem, base, &bounds);
  std::mt19937 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    int i = static_cast<int>(rng() % n);
    while (problem.tensors[i].options.size() < 2) i = static_cast<int>(rng() % n);
    std::vector<int> changed = base;
    changed[i] = static_cast<int>(rng() % problem.tensors[i].options.size());
    const double full = sim.Simulate(changed);
    const auto total = sim.TotalWork(changed);
    EXPECT_DOUBLE_EQ(
        sim.Evaluate(changed, i, TimelineSimulator::kAborted, i, &total, &bounds.after), full);
    EXPECT_EQ(sim.Evaluate(changed, i, full, i, &total, &bounds.after),
              TimelineSimulator::kAborted);
    EXPECT_DOUBLE_EQ(sim.Evaluate(changed, i, full + 1, i, &total, &bounds.after), full);
    // The changed choice as the baseline: what it kept of the previous one is a fresh
    // baseline's, and its bounds hold at every tensor.
    EXPECT_DOUBLE_EQ(sim.Rebase(changed, i, i), full);
    TimelineSimulator fresh(&problem);
    fresh.Rebase(changed);
    TailBounds changed_bounds;
    ComputeTailBounds(problem, changed, &changed_bounds);
    for (int k = 0; k < n; ++k) {
      ASSERT_EQ(sim.ready_time_us(k), fresh.ready_time_us(k)) << k;
      ASSERT_EQ(sim.idle_before(k), fresh.idle_before(k)) << k;
      ASSERT_NEAR(sim.LowerBound(k, total), fresh.LowerBound(k, total), 1e-9 * full) << k;
      ASSERT_LE(sim.ready_time_us(k) + changed_bounds.after[k] + problem.forward_us,
                full * (1 + 1e-12))
          << "trial " << trial << " tensor " << k;
      ASSERT_LE(sim.LowerBound(k, total, changed_bounds.after[k]), full) << k;
    }
    if (trial % 3 == 0) {
      base = changed;
      bounds = changed_bounds;
    } else {
      EXPECT_DOUBLE_EQ(sim.Rebase(base, i, i), sim.Simulate(base));
    }
  }
}

TEST(PlannerTest, ResNet101PlanBeatsBothReferences) {
  auto prepared = Prepare(Shipped("resnet101", "8x1gpu-10g"));
  ASSERT_TRUE(prepared.ok());
  ASSERT_EQ(prepared->sim.tensors.size(), 314u);
  PlanResult result = PlanByteComp(*prepared);
  EXPECT_LE(result.predicted_us, result.no_compression_us);
  EXPECT_LE(result.predicted_us, result.compress_everything_us);
  // Never below the compute alone (forward + backward).
  double compute = prepared->sim.forward_us;
  for (const auto& t : prepared->sim.tensors) compute += t.ready_gap_us;
  EXPECT_GE(result.predicted_us, compute * (1 - 1e-6));
}

TEST(PlannerTest, NoGpuClusterPlansCpuCompression) {
  PlannerInputs in = Shipped("lstm", "4x1gpu-1g");
  in.cluster.set_gpus_per_machine(0);
  auto prepared = Prepare(in);
  ASSERT_TRUE(prepared.ok());
  PlanResult result = PlanByteComp(*prepared);
  EXPECT_LT(result.predicted_us, result.no_compression_us);
  for (size_t i = 0; i < result.choice.size(); ++i) {
    const auto& o = prepared->sim.tensors[i].options[result.choice[i]].option;
    EXPECT_NE(o.encode_on, Where::kGpu);
    EXPECT_NE(o.decode_on, Where::kGpu);
  }
}

}  // namespace
}  // namespace bytecomp::planner

namespace bytecomp::planner {
namespace {

// One codec, cheap on the CPU pool (0.5 ms per MiB per thread) and `gpu_us_per_mb` on the
// GPU (where it holds up the backward pass), on a 1 Gbit/s network where compression pays.
PlannerInputs SlowGpuCodec(int tensors, double gap_us, double gpu_us_per_mb) {
  PlannerInputs in;
  in.cluster.set_machines(4);
  in.cluster.set_gpus_per_machine(1);
  in.cluster.set_servers(4);
  in.cluster.mutable_worker_link()->set_bandwidth_gbps(1);
  in.cluster.mutable_server_link()->set_bandwidth_gbps(1);
  in.cluster.set_cpu_pool_threads(8);
  auto* codec = in.costs.add_codecs();
  codec->set_name("topk");
  codec->set_memory("residual");
  codec->set_ratio(0.02);
  codec->set_reencodable(true);
  for (auto [device, us_per_mb] : std::vector<std::pair<proto::Device, double>>{
           {proto::DEVICE_CPU, 500}, {proto::DEVICE_GPU, gpu_us_per_mb}}) {
    auto* cost = codec->add_costs();
    cost->set_device(device);
    auto* e = cost->add_encode();
    e->set_bytes(1 << 20);
    e->set_us(us_per_mb);
    auto* d = cost->add_decode();
    d->set_bytes(1 << 20);
    d->set_us(us_per_mb / 10);
  }
  in.profile.set_forward_us(1000);
  for (int i = 0; i < tensors; ++i) {
    auto* t = in.profile.add_tensors();
    t->set_name("w" + std::to_string(i));
    t->set_elements(1 << 20);  // 4 MiB: 34 ms uncompressed at 1 Gbit/s
    t->set_ready_gap_us(gap_us);
  }
  return in;
}

int CountCpuEncodes(const PreparedProblem& p, const std::vector<int>& choice) {
  int on_cpu = 0;
  for (size_t i = 0; i < choice.size(); ++i) {
    const auto& o = p.sim.tensors[i].options[choice[i]].option;
    on_cpu += o.codec >= 0 && o.encode_on == Where::kCpu;
  }
  return on_cpu;
}

TEST(PlannerTest, OffloadStepMovesGpuCompressionToTheCpuPool) {
  // GPU encode 2 ms per MiB (8 ms per tensor, on the backward stream): compressing on the
  // GPU beats sending 4 MiB at 1 Gbit/s, so step 3 picks it; the 8-thread CPU pool at
  // 0.5 ms per MiB does the same without delaying the backward pass, so step 4 moves it.
  PlannerInputs in = SlowGpuCodec(6, 2000, /*gpu_us_per_mb=*/2000);
  in.options.set_skip_refinement(true);  // the published steps alone, from no compression
  in.options.set_start_uncompressed(true);
  auto prepared = Prepare(in);
  ASSERT_TRUE(prepared.ok());
  PlanResult result = PlanByteComp(*prepared);
  EXPECT_GT(CountCpuEncodes(*prepared, result.choice), 0);
  EXPECT_LT(result.predicted_us, 0.5 * result.no_compression_us);
}

TEST(PlannerTest, RefinementFindsCpuCompressionThatThePublishedStepsMiss) {
  // GPU encode 200 ms per MiB: worse than no compression, so the published algorithm, which
  // offloads only what it compressed on the GPU, keeps everything uncompressed; our
  // refinement over all options compresses on the CPU pool.
  PlannerInputs in = SlowGpuCodec(6, 2000, /*gpu_us_per_mb=*/200000);
  in.options.set_skip_refinement(true);
  in.options.set_start_uncompressed(true);
  auto published_problem = Prepare(in);
  ASSERT_TRUE(published_problem.ok());
  PlanResult published = PlanByteComp(*published_problem);
  EXPECT_EQ(published.predicted_us, published.no_compression_us);
  in.options.set_skip_refinement(false);
  in.options.set_start_uncompressed(false);
  auto prepared = Prepare(in);
  ASSERT_TRUE(prepared.ok());
  PlanResult result = PlanByteComp(*prepared);
  EXPECT_EQ(CountCpuEncodes(*prepared, result.choice), 6);
  EXPECT_LT(result.predicted_us, 0.5 * result.no_compression_us);
}

TEST(PlannerTest, HostContentionSlowsTheSharedCoresAsCalibrated) {
  // 4 CPU workers and 4 servers on 2 cores, links so fast that the shared cores are the only
  // limit: every tensor ready at once and compressed on the pool, so the iteration is the
  // forward pass plus the cores' work, all of which (encodes, the servers' work, the pulls'
  // copies) comes from the cost table and runs host_cpu_inflation times as long, and
  // 2 / host_effective_cores times as long when the job's processes get fewer cores.
  PlannerInputs in = SlowGpuCodec(6, 0, 2000);
  in.cluster.set_gpus_per_machine(0);
  in.cluster.set_cpu_pool_threads(2);
  in.cluster.set_host_cores(2);
  in.options.set_keep_dominated(true);
  in.cluster.mutable_worker_link()->set_bandwidth_gbps(1e5);
  in.cluster.mutable_server_link()->set_bandwidth_gbps(1e5);
  auto simulate = [&](double inflation, double cores = 0) {
    in.cluster.set_host_cpu_inflation(inflation);
    in.cluster.set_host_effective_cores(cores);
    auto prepared = Prepare(in);
    EXPECT_TRUE(prepared.ok());
    std::vector<int> choice;
    for (const auto& tensor : prepared->sim.tensors) {
      int index = -1;
      for (size_t i = 0; i < tensor.options.size(); ++i) {
        const TensorOption& o = tensor.options[i].option;
        if (o.codec >= 0 && o.encode_on == Where::kCpu && !o.two_way) index = i;
      }
      EXPECT_GE(index, 0);
      choice.push_back(index);
    }
    TimelineSimulator sim(&prepared->sim);
    return sim.Simulate(choice) - in.profile.forward_us();
  };
  const double alone = simulate(0);
  // 1 and all the cores are the defaults: the same plans as without the fields.
  EXPECT_EQ(simulate(1), alone);
  EXPECT_EQ(simulate(0, 2), alone);
  // 6 tensors x 4 workers x 2 ms encode of 4 MiB / 2 cores, and more for the servers and pulls.
  EXPECT_GT(alone, 24000);
  EXPECT_NEAR(simulate(1.25) / alone, 1.25, 0.01);
  EXPECT_NEAR(simulate(0, 1.6) / alone, 2 / 1.6, 0.01);
  EXPECT_NEAR(simulate(1.25, 1.6) / alone, 1.25 * 2 / 1.6, 0.01);
}

TEST(PlannerTest, OnOneHostEveryWorkersForwardRunsOnTheSharedCores) {
  // 4 workers on 2 cores, each forward 63 ms of which 60 ms on the CPU (the rest: waits that
  // are not compute): the 4 forwards at once take 4 x 60 ms over 2 cores, 120 ms, and the
  // iteration holds that instead of one worker's 63 ms. Without the CPU figure, with more
  // cores than workers, or off one host: the profile's forward.
  PlannerInputs in = SlowGpuCodec(6, 0, 2000);
  in.cluster.set_gpus_per_machine(0);
  in.cluster.set_host_cores(2);
  in.profile.set_forward_us(63000);
  auto forward = [&] {
    auto prepared = Prepare(in);
    EXPECT_TRUE(prepared.ok()) << prepared.status();
    return prepared.ok() ? prepared->sim.forward_us : -1;
  };
  EXPECT_EQ(forward(), 63000);
  in.profile.set_measured_forward_cpu_us(60000);
  EXPECT_EQ(forward(), 120000);
  in.cluster.set_host_effective_cores(1.5);  // calibrated: the job gets 1.5 of the 2
  EXPECT_EQ(forward(), 160000);
  in.cluster.set_host_effective_cores(0);
  in.cluster.set_host_cores(8);  // a core each: every forward as alone
  EXPECT_EQ(forward(), 63000);
  in.cluster.set_host_cores(0);  // machines of their own
  EXPECT_EQ(forward(), 63000);
  // The whole iteration moves by as much: the forward is added to the simulated rounds.
  in.cluster.set_host_cores(2);
  auto prepared = Prepare(in);
  ASSERT_TRUE(prepared.ok());
  const double rounds_on_host = TimelineSimulator(&prepared->sim).Simulate(prepared->none_index);
  in.profile.clear_measured_forward_cpu_us();
  prepared = Prepare(in);
  ASSERT_TRUE(prepared.ok());
  EXPECT_DOUBLE_EQ(
      rounds_on_host - TimelineSimulator(&prepared->sim).Simulate(prepared->none_index),
      120000 - 63000);
}

TEST(PlannerTest, TensorsBeforeACommunicationBubbleAreLeftAlone) {
  // The first three tensors' pushes (tiny: 64 KiB, at 1 Gbit/s about 2 ms with 4 senders
  // on 4 servers) end long before the fourth is ready 50 ms later.
  PlannerInputs in = SlowGpuCodec(5, 100, 2000);
  for (int i = 0; i < 3; ++i) in.profile.mutable_tensors(i)->set_elements(16384);
  in.profile.mutable_tensors(3)->set_ready_gap_us(50000);
  auto prepared = Prepare(in);
  ASSERT_TRUE(prepared.ok());
  PlanResult result = PlanByteComp(*prepared);
  EXPECT_EQ(result.dropped_before_bubble, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(result.choice[i], prepared->none_index[i]);
  EXPECT_LT(result.predicted_us, result.no_compression_us);
}

TEST(PlannerTest, CliWritesAParseableStrategyAndTrace) {
  const std::string out = ::testing::TempDir() + "/planner_cli_strategy.pbtxt";
  const std::string trace = ::testing::TempDir() + "/planner_cli_trace.json";
  const std::string command = std::string(BYTECOMP_PLAN_BINARY) + " --profile=" + kPlannerDir +
                              "/profiles/lstm.pbtxt --cluster=" + kPlannerDir +
                              "/clusters/4x1gpu-1g.pbtxt --costs=" + kPlannerDir +
                              "/costs/nominal.pbtxt --out=" + out + " --trace=" + trace +
                              " > /dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  proto::Strategy strategy;
  ASSERT_TRUE(ParseTextProtoFile(out, &strategy).ok());
  EXPECT_EQ(strategy.tensors_size(), 11);
  std::ifstream in(trace);
  std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(json.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(json.find("push encoder.weight"), std::string::npos);
  // A bad input file fails with its name, line and field.
  const std::string bad = ::testing::TempDir() + "/planner_cli_bad.pbtxt";
  std::ofstream(bad) << "model: \"x\"\ntensors { name: \"a\" elements: -5 }\n";
  const std::string failing = std::string(BYTECOMP_PLAN_BINARY) + " --profile=" + bad +
                              " --cluster=" + kPlannerDir +
                              "/clusters/4x1gpu-1g.pbtxt --costs=" + kPlannerDir +
                              "/costs/nominal.pbtxt --out=" + out + " 2> " + bad + ".err";
  EXPECT_NE(std::system(failing.c_str()), 0);
  std::ifstream err(bad + ".err");
  std::string message((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  EXPECT_NE(message.find(bad + ":2:21: tensors[0].elements: must be in 1.."), std::string::npos)
      << message;
}

}  // namespace
}  // namespace bytecomp::planner
