// --strategy=auto's link fit (PlanFromProfiles): the links are scaled until the model's
// uncompressed round matches the profiled rounds, when those ran uncompressed and slower.
#include "bytecomp/scheduler/auto_planner.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <string>

namespace bytecomp {
namespace {

// One 100 MB tensor, ready at once, no forward pass; `round_us` as the rounds measured.
proto::ModelProfile Profile(double round_us) {
  proto::ModelProfile p;
  p.set_model("one tensor");
  auto* t = p.add_tensors();
  t->set_name("w");
  t->set_elements(25'000'000);
  p.set_measured_round_us(round_us);
  return p;
}

// 2 workers and 1 server on 1 Gbit/s links without latency; no codecs: only "none".
proto::ClusterDescription Cluster() {
  proto::ClusterDescription c;
  c.set_machines(2);
  for (auto* link : {c.mutable_worker_link(), c.mutable_server_link()}) {
    link->set_bandwidth_gbps(1);
  }
  return c;
}

// A flat job of 2 workers and 1 server.
AutoPlanJob Job(bool profiled_uncompressed) {
  AutoPlanJob job;
  job.workers = 2;
  job.servers = 1;
  job.profiled_uncompressed = profiled_uncompressed;
  return job;
}

// Workers see tensors that become ready close together in different orders (their hooks'
// timing jitters). Merged, the profile keeps each tensor's median ready time, so the span of
// the backward pass is what the workers measured, not shrunk by taking each gap's median
// from a different predecessor.
TEST(AutoPlannerTest, MergedReadyTimesKeepTheBackwardSpan) {
  constexpr int kTensors = 200;
  constexpr double kSpacingUs = 10, kLastUs = 20'000;
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> jitter(-1000, 1000);
  std::vector<proto::ModelProfile> workers(4);
  for (proto::ModelProfile& w : workers) {
    std::vector<std::pair<double, std::string>> ready;  // this worker's (offset, name)
    for (int i = 0; i < kTensors; ++i) {
      ready.emplace_back(2000 + i * kSpacingUs + jitter(rng), "t" + std::to_string(i));
    }
    ready.emplace_back(0, "first");
    ready.emplace_back(kLastUs, "last");
    std::sort(ready.begin(), ready.end());
    double previous = 0;
    for (const auto& [offset, name] : ready) {
      auto* t = w.add_tensors();
      t->set_name(name);
      t->set_elements(1000);
      t->set_ready_gap_us(offset - previous);
      previous = offset;
    }
  }
  proto::ModelProfile merged = MergeReadyTimes(workers);
  ASSERT_EQ(merged.tensors_size(), kTensors + 2);
  double span = 0;
  std::set<std::string> names;
  for (const auto& t : merged.tensors()) {
    span += t.ready_gap_us();
    names.insert(t.name());
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(kTensors + 2));
  EXPECT_EQ(merged.tensors(0).name(), "first");
  EXPECT_EQ(merged.tensors(kTensors + 1).name(), "last");
  // Gaps to two significant digits (the last, 16 ms, by up to 3%); each gap's median would
  // give 7% less here.
  EXPECT_NEAR(span, kLastUs, 0.035 * kLastUs);
  // The middle tensors' ready times within the jitter of the truth.
  double offset = 0;
  for (const auto& t : merged.tensors()) {
    offset += t.ready_gap_us();
    if (t.name()[0] == 't' && t.name() != "t") {
      const double truth = 2000 + std::stoi(t.name().substr(1)) * kSpacingUs;
      EXPECT_NEAR(offset, truth, 1000) << t.name();
    }
  }
}

// What the workers measured is checked as a profile file is (a fuzzer's finding: a tensor past
// int32 partitions reached the cost model as an infinite partition size).
TEST(AutoPlannerTest, AWorkersProfileIsCheckedBeforeThePlannerSeesIt) {
  proto::ModelProfile huge = Profile(1);
  huge.mutable_tensors(0)->set_elements(int64_t{1} << 50);
  auto plan = PlanFromProfiles({huge}, Cluster(), {}, Job(true));
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("the workers' profile"), std::string::npos)
      << plan.status();
  EXPECT_NE(plan.status().message().find("tensors[0].elements: must be in 1..1099511627776"),
            std::string::npos)
      << plan.status();
  proto::ModelProfile endless = Profile(1);
  endless.mutable_tensors(0)->set_ready_gap_us(std::numeric_limits<double>::infinity());
  EXPECT_FALSE(PlanFromProfiles({endless}, Cluster(), {}, Job(true)).ok());
}

TEST(AutoPlannerTest, SlowerUncompressedRoundsScaleTheLinksUntilTheModelMatches) {
  auto model = PlanFromProfiles({Profile(1)}, Cluster(), {}, Job(true));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_DOUBLE_EQ(model->link_scale, 1);  // measured faster than the model: unchanged
  // Both workers' 100 MB through the server's 1 Gbit/s link (1.6 s) and back, overlapped.
  const double predicted = model->predicted_us;
  EXPECT_GT(predicted, 1.6e6);
  EXPECT_LT(predicted, 1.8e6);
  // Rounds 1.6 times as long: the links carry 1/1.6 of their bandwidth.
  auto fitted = PlanFromProfiles({Profile(1.6 * predicted), Profile(1.6 * predicted)}, Cluster(),
                                 {}, Job(true));
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  // (The scale is rounded to two significant digits: 0.62 or 0.63.)
  EXPECT_NEAR(fitted->link_scale, 1 / 1.6, 0.006);
  EXPECT_NEAR(fitted->predicted_us, 1.6 * predicted, 0.016 * predicted);
  EXPECT_NE(fitted->summary.find("links fitted: 0.62"), std::string::npos) << fitted->summary;
  // Rounds that ran compressed say nothing about the uncompressed model.
  auto compressed = PlanFromProfiles({Profile(1.6 * predicted)}, Cluster(), {}, Job(false));
  ASSERT_TRUE(compressed.ok());
  EXPECT_DOUBLE_EQ(compressed->link_scale, 1);
  EXPECT_NE(compressed->summary.find("not fitted: the profiled rounds ran compressed"),
            std::string::npos);
  // Three times as long: a third (the model's round is all communication here).
  auto third = PlanFromProfiles({Profile(3 * predicted)}, Cluster(), {}, Job(true));
  ASSERT_TRUE(third.ok());
  EXPECT_NEAR(third->link_scale, 1 / 3.0, 0.005);
  // Over four times as long: more than the links can explain; not fitted.
  auto far = PlanFromProfiles({Profile(5 * predicted)}, Cluster(), {}, Job(true));
  ASSERT_TRUE(far.ok());
  EXPECT_DOUBLE_EQ(far->link_scale, 1);
  EXPECT_NE(far->summary.find("links not fitted: the model's round is mostly backward compute"),
            std::string::npos)
      << far->summary;
}

TEST(AutoPlannerTest, ComputeBoundRoundsDoNotFitTheLinks) {
  // The 100 MB tensor's round trip (~1.7 s) hides under 10 s of backward compute before a
  // small last tensor: a slower measured round is the compute's doing, not the links'.
  proto::ModelProfile p = Profile(12e6);
  auto* last = p.add_tensors();
  last->set_name("b");
  last->set_elements(1000);
  last->set_ready_gap_us(10e6);
  auto plan = PlanFromProfiles({p}, Cluster(), {}, Job(true));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_DOUBLE_EQ(plan->link_scale, 1);
  EXPECT_LT(plan->predicted_us, 10.1e6);
  EXPECT_NE(plan->summary.find("links not fitted"), std::string::npos) << plan->summary;
}

TEST(AutoPlannerTest, HierarchicalJobsArePlannedPerMachine) {
  // 4 workers on 2 machines: one push per machine, and every tensor reduced locally first.
  AutoPlanJob job = Job(true);
  job.workers = 4;
  job.hierarchical_machines = 2;
  proto::ClusterDescription cluster = Cluster();
  cluster.mutable_intra_machine_link()->set_bandwidth_gbps(100);
  auto hier = PlanFromProfiles({Profile(1)}, cluster, {}, job);
  ASSERT_TRUE(hier.ok()) << hier.status();
  EXPECT_NE(hier->summary.find("planned 1 tensors (hierarchical, 2 machines)"), std::string::npos)
      << hier->summary;
  ASSERT_EQ(hier->strategy.tensors_size(), 1);
  EXPECT_TRUE(hier->strategy.tensors(0).hierarchical());
  // Flat, the same 4 workers push 4 copies through the server's link: about twice as long.
  job.hierarchical_machines = 0;
  auto flat = PlanFromProfiles({Profile(1)}, cluster, {}, job);
  ASSERT_TRUE(flat.ok());
  EXPECT_NE(flat->summary.find("(flat)"), std::string::npos) << flat->summary;
  EXPECT_FALSE(flat->strategy.tensors(0).hierarchical());
  EXPECT_GT(flat->predicted_us, 1.8 * hier->predicted_us);
}

// 300 host tensors of 1 KiB, each a round of its own unfused (the links' 50 us latency each):
// the plan fuses them into groups, which its strategy lists and whose entries it plans; with
// fusion disabled, or on a GPU, every tensor travels alone.
TEST(AutoPlannerTest, SmallTensorsAreFusedWhereThatIsPredictedFaster) {
  proto::ModelProfile tiny;
  tiny.set_model("tiny");
  for (int i = 0; i < 300; ++i) {
    proto::TensorProfile* t = tiny.add_tensors();
    t->set_name("t" + std::to_string(i));
    t->set_elements(256);
    t->set_ready_gap_us(1);
  }
  proto::ClusterDescription cluster = Cluster();
  cluster.mutable_worker_link()->set_latency_us(50);
  cluster.mutable_server_link()->set_latency_us(50);
  auto fused = PlanFromProfiles({tiny}, cluster, {}, Job(true));
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_GE(fused->strategy.fusion_groups_size(), 1) << fused->summary;
  int members = 0;
  for (const proto::FusionGroup& g : fused->strategy.fusion_groups()) {
    members += g.tensors_size();
    bool planned = false;  // each group is a tensor of the plan: its entry names it
    for (const auto& t : fused->strategy.tensors()) planned |= t.name_pattern() == g.name();
    EXPECT_TRUE(planned) << g.name();
  }
  EXPECT_EQ(members, 300);
  EXPECT_NE(fused->summary.find("; fused 300 small tensors in "), std::string::npos)
      << fused->summary;
  EXPECT_EQ(fused->profile.tensors_size(), 300);  // what was planned with: the measured model

  proto::PlannerOptions off;
  off.set_disable_fusion(true);
  auto alone = PlanFromProfiles({tiny}, cluster, {}, Job(true), off);
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_EQ(alone->strategy.fusion_groups_size(), 0);
  EXPECT_GT(alone->predicted_us, 2 * fused->predicted_us);

  for (proto::TensorProfile& t : *tiny.mutable_tensors()) t.set_on_device(true);
  auto device = PlanFromProfiles({tiny}, cluster, {}, Job(true));
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_EQ(device->strategy.fusion_groups_size(), 0) << device->summary;
}

TEST(AutoPlannerTest, CpuBoundRoundsDoNotFitTheLinks) {
  // The same rounds 1.6 times as long as the model's, once with the host's CPUs busy: a slow
  // CPU (reference BLAS, a shared host) is not a slow network.
  auto model = PlanFromProfiles({Profile(1)}, Cluster(), {}, Job(true));
  ASSERT_TRUE(model.ok());
  proto::ModelProfile slow = Profile(1.6 * model->predicted_us);
  slow.set_host_cpu_busy(0.97);
  auto cpu_bound = PlanFromProfiles({slow}, Cluster(), {}, Job(true));
  ASSERT_TRUE(cpu_bound.ok()) << cpu_bound.status();
  EXPECT_TRUE(cpu_bound->cpu_bound);
  EXPECT_DOUBLE_EQ(cpu_bound->link_scale, 1);
  EXPECT_NE(cpu_bound->summary.find("CPU-bound rounds (host CPUs 97% busy): links not fitted"),
            std::string::npos)
      << cpu_bound->summary;
  // A worker process that kept its 2 cores busy says the same.
  slow.set_host_cpu_busy(0);
  slow.set_cpu_cores(2);
  slow.set_measured_round_cpu_us(1.9 * slow.measured_round_us());
  auto busy_process = PlanFromProfiles({slow}, Cluster(), {}, Job(true));
  ASSERT_TRUE(busy_process.ok());
  EXPECT_DOUBLE_EQ(busy_process->link_scale, 1);
  EXPECT_NE(busy_process->summary.find("a worker process used 1.9 of its 2 cores"),
            std::string::npos)
      << busy_process->summary;
  // Idle CPUs: the network was the bottleneck, and the links are fitted.
  slow.set_measured_round_cpu_us(0.2 * slow.measured_round_us());
  slow.set_host_cpu_busy(0.3);
  auto network = PlanFromProfiles({slow}, Cluster(), {}, Job(true));
  ASSERT_TRUE(network.ok());
  EXPECT_FALSE(network->cpu_bound);
  EXPECT_NEAR(network->link_scale, 0.62, 1e-9);  // 1 / 1.6, to two significant digits
  EXPECT_NE(network->summary.find("network-bound rounds (host CPUs 30% busy"), std::string::npos)
      << network->summary;
  // Workers that do not report CPU use: fitted, and the summary says it could not tell.
  auto unknown = PlanFromProfiles({Profile(1.6 * model->predicted_us)}, Cluster(), {}, Job(true));
  ASSERT_TRUE(unknown.ok());
  EXPECT_NE(unknown->summary.find("the workers did not report their CPU use"), std::string::npos);
}

TEST(AutoPlannerTest, CpuBoundIsJudgedFromTheJobsOwnProcessesNotTheHostsLoad) {
  // The same slow rounds with the host's CPUs 98% busy: a program at low priority beside the
  // job keeps them busy, but the worker's threads hardly waited for a CPU. The network was the
  // limit, and the links are fitted.
  auto model = PlanFromProfiles({Profile(1)}, Cluster(), {}, Job(true));
  ASSERT_TRUE(model.ok());
  proto::ModelProfile slow = Profile(1.6 * model->predicted_us);
  slow.set_host_cpu_busy(0.98);
  slow.set_cpu_cores(2);
  slow.set_measured_round_cpu_us(0.3 * slow.measured_round_us());
  slow.set_measured_round_wait_us(0.02 * slow.measured_round_us());
  auto shared_host = PlanFromProfiles({slow}, Cluster(), {}, Job(true));
  ASSERT_TRUE(shared_host.ok()) << shared_host.status();
  EXPECT_FALSE(shared_host->cpu_bound) << shared_host->summary;
  EXPECT_NEAR(shared_host->link_scale, 0.62, 1e-9);
  EXPECT_NE(shared_host->summary.find(
                "network-bound rounds (a worker process used 0.3 of its 2 cores; its threads "
                "waited 2% of the round for a CPU; host CPUs 98% busy, other programs included)"),
            std::string::npos)
      << shared_host->summary;
  // The job's own processes crowding the cores (servers beside the workers): its threads
  // waited 40% of the round (41% once the merge rounds it to two digits). CPU-bound, whatever
  // the rest of the host does.
  slow.set_host_cpu_busy(0.5);
  slow.set_measured_round_wait_us(0.4 * slow.measured_round_us());
  auto crowded = PlanFromProfiles({slow}, Cluster(), {}, Job(true));
  ASSERT_TRUE(crowded.ok());
  EXPECT_TRUE(crowded->cpu_bound) << crowded->summary;
  EXPECT_DOUBLE_EQ(crowded->link_scale, 1);
  EXPECT_NE(crowded->summary.find("its threads waited 41% of the round for a CPU"),
            std::string::npos)
      << crowded->summary;
  // Several workers: the wait is their median, and a worker that did not report it (an older
  // engine) does not count as zero.
  proto::ModelProfile quiet = slow, unreported = slow;
  quiet.set_measured_round_wait_us(0);
  unreported.clear_measured_round_wait_us();
  AutoPlanJob three = Job(true);
  three.workers = 3;
  auto merged = PlanFromProfiles({slow, unreported, slow}, Cluster(), {}, three);
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_TRUE(merged->cpu_bound) << merged->summary;
  auto mostly_quiet = PlanFromProfiles({quiet, unreported, quiet}, Cluster(), {}, three);
  ASSERT_TRUE(mostly_quiet.ok());
  EXPECT_FALSE(mostly_quiet->cpu_bound) << mostly_quiet->summary;
}

// 3 workers (Job's links, no codecs) on one host of one core.
AutoPlanJob ThreeWorkers() {
  AutoPlanJob three = Job(false);
  three.workers = 3;
  return three;
}
proto::ClusterDescription OneCoreForThree() {
  proto::ClusterDescription host = Cluster();
  host.set_machines(3);
  host.set_host_cores(1);
  return host;
}

// The training thread's CPU and wait, as the workers measured them (ready_profiler.h): the
// medians over the workers that reported them, logged, and on one host (host_cores) the
// training threads' CPU competes with the communication's for the cores.
TEST(AutoPlannerTest, TheTrainingThreadsCpuIsMergedAndTakesTheSharedCores) {
  proto::ModelProfile a = Profile(2e6), b = Profile(2e6), old = Profile(2e6);
  a.set_measured_training_cpu_us(1e6);
  b.set_measured_training_cpu_us(3e6);
  a.set_measured_training_wait_us(4e5);
  b.set_measured_training_wait_us(6e5);
  const AutoPlanJob three = ThreeWorkers();
  proto::ClusterDescription host = OneCoreForThree();
  auto merged = PlanFromProfiles({a, old, b}, host, {}, three);
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_DOUBLE_EQ(merged->profile.measured_training_cpu_us(), 3e6);  // 1 and 3 s: the upper
  EXPECT_DOUBLE_EQ(merged->profile.measured_training_wait_us(), 6e5);
  EXPECT_NE(merged->summary.find(
                "its training thread 30% (what that added is left out of the ready gaps)"),
            std::string::npos)
      << merged->summary;
  // Three threads' 3 s each on one core before the push: at least 9 s.
  EXPECT_GT(merged->predicted_us, 9e6);
  auto untrained = PlanFromProfiles({old}, host, {}, three);
  ASSERT_TRUE(untrained.ok());
  EXPECT_LT(untrained->predicted_us, 3e6);
  // Machines of their own: training has its own cores.
  host.set_host_cores(0);
  auto own = PlanFromProfiles({a, old, b}, host, {}, three);
  ASSERT_TRUE(own.ok());
  EXPECT_DOUBLE_EQ(own->predicted_us, untrained->predicted_us);
}

// The training thread's CPU in the forward (a CPU model's compute, ready_profiler.h): the
// median over the workers that reported it; on one host every worker's forward runs at once on
// the shared cores, which the prediction and the log line hold.
TEST(AutoPlannerTest, TheForwardsCpuIsMergedAndEveryWorkersRunsOnTheSharedCores) {
  proto::ModelProfile a = Profile(2e6), b = Profile(2e6), old = Profile(2e6);
  for (proto::ModelProfile* p : {&a, &b, &old}) p->set_forward_us(1e6);
  a.set_measured_forward_cpu_us(8e5);
  b.set_measured_forward_cpu_us(9e5);
  const AutoPlanJob three = ThreeWorkers();
  const proto::ClusterDescription host = OneCoreForThree();
  auto merged = PlanFromProfiles({a, old, b}, host, {}, three);
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_DOUBLE_EQ(merged->profile.measured_forward_cpu_us(), 9e5);  // the upper median
  EXPECT_NE(merged->summary.find("(measured forward 1000.000 ms, 2700.000 ms with every "
                                 "worker's 900.000 ms of CPU on the host's cores)"),
            std::string::npos)
      << merged->summary;
  auto unmeasured = PlanFromProfiles({old}, host, {}, three);
  ASSERT_TRUE(unmeasured.ok());
  EXPECT_FALSE(unmeasured->profile.has_measured_forward_cpu_us());
  EXPECT_DOUBLE_EQ(merged->predicted_us - unmeasured->predicted_us, 2.7e6 - 1e6);
}

TEST(AutoPlannerTest, MeasuredInputsAreRoundedToTwoSignificantDigits) {
  EXPECT_DOUBLE_EQ(TwoSignificantDigits(0.4437), 0.44);
  EXPECT_DOUBLE_EQ(TwoSignificantDigits(9.46), 9.5);
  EXPECT_DOUBLE_EQ(TwoSignificantDigits(1234), 1200);
  EXPECT_DOUBLE_EQ(TwoSignificantDigits(0), 0);
  // Probes that differ by a little give the same links.
  MeasuredLinks a{.latency_us = 81, .up_gbps = 0.941, .down_gbps = 0.962, .pairs = 2};
  MeasuredLinks b{.latency_us = 79, .up_gbps = 0.938, .down_gbps = 0.955, .pairs = 2};
  proto::ClusterDescription ca = Cluster(), cb = Cluster();
  ChooseLinks(PlanLinks::kMeasured, a, &ca);
  ChooseLinks(PlanLinks::kMeasured, b, &cb);
  EXPECT_EQ(ca.SerializeAsString(), cb.SerializeAsString());
  EXPECT_DOUBLE_EQ(ca.worker_link().bandwidth_gbps(), 0.94);
  EXPECT_DOUBLE_EQ(ca.worker_link().latency_us(), 20);
}

// A model of 12 tensors of 1..12 MiB with 2 ms of compute between them, on 1 Gbit/s links,
// with three codecs of different speeds and sizes.
proto::ModelProfile ResnetLike(double noise, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> jitter(1 - noise, 1 + noise);
  proto::ModelProfile p;
  p.set_model("resnet-like");
  for (int i = 0; i < 12; ++i) {
    auto* t = p.add_tensors();
    t->set_name("t" + std::to_string(i));
    t->set_elements((i + 1) << 18);
    t->set_ready_gap_us(2000 * jitter(rng));
  }
  p.set_forward_us(10000 * jitter(rng));
  return p;
}

proto::CostTable ThreeCodecs() {
  proto::CostTable costs;
  auto add = [&](const std::string& name, const std::string& memory, double ratio,
                 double us_per_mb) {
    proto::CodecCost* c = costs.add_codecs();
    c->set_name(name);
    c->set_memory(memory);
    c->set_ratio(ratio);
    c->set_reencodable(true);
    proto::DeviceCost* cpu = c->add_costs();
    cpu->set_device(proto::DEVICE_CPU);
    for (auto* curve : {cpu->add_encode(), cpu->add_decode()}) {
      curve->set_bytes(1 << 20);
      curve->set_us(us_per_mb);
    }
  };
  add("fp16", "", 0.5, 300);
  add("topk", "residual", 0.0132, 700);
  add("onebit", "residual", 1 / 32.0, 400);
  return costs;
}

TEST(AutoPlannerTest, ProfilesThatDifferByNoiseGiveTheSamePlan) {
  // Two workers' profiles with +-2% noise, drawn again for every "run" of the job: the
  // rounded medians are the same (or a rounding boundary away) and so is the plan.
  std::set<std::string> plans;
  for (uint32_t run = 0; run < 20; ++run) {
    auto plan = PlanFromProfiles({ResnetLike(0.02, 2 * run), ResnetLike(0.02, 2 * run + 1)},
                                 Cluster(), ThreeCodecs(), Job(false));
    ASSERT_TRUE(plan.ok()) << plan.status();
    plans.insert(plan->strategy.SerializeAsString());
  }
  EXPECT_EQ(plans.size(), 1u);
}

TEST(AutoPlannerTest, PlannerOptionsDecideWhichCodecsMayBeUsed) {
  proto::CostTable costs = ThreeCodecs();
  proto::CodecCost* randomk = costs.add_codecs();
  *randomk = costs.codecs(1);
  randomk->set_name("randomk");
  randomk->set_ratio(0.001);  // the smallest and as fast: chosen when allowed
  auto plan = PlanFromProfiles({ResnetLike(0, 1)}, Cluster(), costs, Job(false));
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->strategy.SerializeAsString().find("randomk"), std::string::npos);
  EXPECT_NE(plan->summary.find("not considered: randomk (loss class high, above max_loss "
                               "compensated)"),
            std::string::npos)
      << plan->summary;
  proto::PlannerOptions options;
  options.set_max_loss(proto::LOSS_HIGH);
  auto allowed = PlanFromProfiles({ResnetLike(0, 1)}, Cluster(), costs, Job(false), options);
  ASSERT_TRUE(allowed.ok());
  EXPECT_NE(allowed->strategy.SerializeAsString().find("randomk"), std::string::npos);
  EXPECT_NE(allowed->table.find("randomk"), std::string::npos) << allowed->table;
  EXPECT_NE(allowed->table.find(" high "), std::string::npos) << allowed->table;
}

TEST(AutoPlannerTest, IsUncompressed) {
  proto::Strategy s;
  EXPECT_TRUE(IsUncompressed(s));
  s.add_tensors()->set_name_pattern("*");
  s.mutable_tensors(0)->mutable_push_codec()->set_name("none");
  EXPECT_TRUE(IsUncompressed(s));
  s.add_tensors()->mutable_push_codec()->set_name("fp16");
  EXPECT_FALSE(IsUncompressed(s));
}

// The plan partitions as the job does (its partition_bytes, not the cluster file's), and the
// summary says when the scheduler's placement of those partitions loads some servers' links
// more than the plan assumes (planner/placement.h).
TEST(AutoPlannerTest, ThePlanPartitionsAsTheJobAndSaysWhereThePlacementIsUneven) {
  AutoPlanJob job = Job(true);
  job.servers = 4;
  job.partition_bytes = int64_t{64} << 20;  // the 100 MB tensor in 2 partitions: 2 servers idle
  auto coarse = PlanFromProfiles({Profile(1)}, Cluster(), {}, job);
  ASSERT_TRUE(coarse.ok()) << coarse.status();
  EXPECT_EQ(coarse->cluster.partition_bytes(), int64_t{64} << 20);
  EXPECT_NE(coarse->summary.find("placement: the scheduler puts the model's 2 partitions"),
            std::string::npos)
      << coarse->summary;
  EXPECT_NE(coarse->summary.find("(2 hold none)"), std::string::npos) << coarse->summary;
  job.partition_bytes = int64_t{1} << 20;  // 96 partitions, 24 a server
  auto fine = PlanFromProfiles({Profile(1)}, Cluster(), {}, job);
  ASSERT_TRUE(fine.ok()) << fine.status();
  EXPECT_EQ(fine->summary.find("placement:"), std::string::npos) << fine->summary;
}

}  // namespace
}  // namespace bytecomp
