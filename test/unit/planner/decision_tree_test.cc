// The decision tree's pruning rules and the cost model's numbers.
#include "bytecomp/planner/decision_tree.h"

#include <algorithm>

#include "bytecomp/planner/inputs.h"
#include "gtest/gtest.h"
#include "planner_test_util.h"

namespace bytecomp::planner {
namespace {

using testing::Point;
using testing::Tensor;

// Costs linear in size: `us_per_mb` per MiB for encode and decode.
proto::CodecCost Codec(const std::string& name, double ratio, bool reencodable, bool cpu,
                       bool gpu) {
  proto::CodecCost c;
  c.set_name(name);
  c.set_ratio(ratio);
  c.set_reencodable(reencodable);
  // With error feedback: within the default max_loss (LOSS_COMPENSATED).
  if (name != "fp16") c.set_memory("residual");
  auto add = [&](proto::Device device, double us_per_mb) {
    auto* d = c.add_costs();
    d->set_device(device);
    *d->add_encode() = Point(1 << 20, us_per_mb);
    *d->add_decode() = Point(1 << 20, us_per_mb / 2);
  };
  if (cpu) add(proto::DEVICE_CPU, 1000);
  if (gpu) add(proto::DEVICE_GPU, 10);
  return c;
}

proto::ClusterDescription Cluster(int gpus) {
  proto::ClusterDescription c;
  c.set_machines(4);
  c.set_gpus_per_machine(gpus);
  c.set_servers(2);
  c.mutable_worker_link()->set_bandwidth_gbps(10);
  c.mutable_worker_link()->set_latency_us(10);
  c.mutable_server_link()->set_bandwidth_gbps(10);
  c.mutable_server_link()->set_latency_us(10);
  c.mutable_intra_machine_link()->set_bandwidth_gbps(800);
  return WithDefaults(c);
}

proto::CostTable TwoCodecs() {
  proto::CostTable costs;
  *costs.add_codecs() = Codec("fp16", 0.5, /*reencodable=*/true, true, true);
  *costs.add_codecs() = Codec("dgc", 0.02, /*reencodable=*/false, true, true);
  return costs;
}

proto::PlannerOptions Options() { return WithDefaults(proto::PlannerOptions()); }

TEST(DecisionTreeTest, SmallTensorsOnlyStayUncompressed) {
  auto options = EnumerateOptions(Tensor(1000), Cluster(1), TwoCodecs(), Options());
  ASSERT_EQ(options.size(), 1u);
  EXPECT_EQ(options[0].codec, -1);
}

// Partition counts stay within int32 for the largest tensor a profile may hold, split into the
// smallest partitions, so that no option has 0 partitions (an infinite partition size).
TEST(DecisionTreeTest, PartitionCountsOfTheLargestTensorStayPositive) {
  proto::TensorProfile t = Tensor(1 << 20);
  t.set_elements(kMaxProfileElements);
  proto::PlannerOptions options = Options();
  options.add_partition_bytes(64);
  for (const TensorOption& o : EnumerateOptions(t, Cluster(1), TwoCodecs(), options)) {
    EXPECT_GT(o.partitions, 0);
  }
}

TEST(DecisionTreeTest, OneGpuPerMachine) {
  auto options = EnumerateOptions(Tensor(1 << 20), Cluster(1), TwoCodecs(), Options());
  // none + fp16: {GPU, CPU} encode x {1-way, 2-way GPU decode, 2-way CPU decode}
  //      + dgc (not re-encodable): {GPU, CPU} x 1-way.
  EXPECT_EQ(options.size(), 1u + 6u + 2u);
  for (const auto& o : options) {
    EXPECT_FALSE(o.hierarchical);  // one GPU: nothing to reduce inside the machine
    if (o.codec == 1) {
      EXPECT_FALSE(o.two_way);
    }
    if (!o.two_way) {
      EXPECT_EQ(o.decode_on, Where::kNone);
    }
  }
  EXPECT_EQ(options[0].codec, -1);
}

TEST(DecisionTreeTest, NoGpuMeansCpuPlacementsOnly) {
  auto options = EnumerateOptions(Tensor(1 << 20), Cluster(0), TwoCodecs(), Options());
  EXPECT_EQ(options.size(), 1u + 2u + 1u);
  for (const auto& o : options) {
    EXPECT_NE(o.encode_on, Where::kGpu);
    EXPECT_NE(o.decode_on, Where::kGpu);
  }
}

TEST(DecisionTreeTest, SeveralGpusAddHierarchical) {
  auto options = EnumerateOptions(Tensor(1 << 20), Cluster(8), TwoCodecs(), Options());
  EXPECT_EQ(options.size(), 2u * 9u);
  EXPECT_EQ(std::count_if(options.begin(), options.end(),
                          [](const TensorOption& o) { return o.hierarchical; }),
            9);
  proto::PlannerOptions flat = Options();
  flat.set_disable_hierarchical(true);
  EXPECT_EQ(EnumerateOptions(Tensor(1 << 20), Cluster(8), TwoCodecs(), flat).size(), 9u);
}

TEST(DecisionTreeTest, CodecWithoutCpuCostsIsUnusable) {
  proto::CostTable costs;
  *costs.add_codecs() = Codec("gpu_only", 0.1, true, /*cpu=*/false, /*gpu=*/true);
  EXPECT_EQ(EnumerateOptions(Tensor(1 << 20), Cluster(1), costs, Options()).size(), 1u);
}

TEST(DecisionTreeTest, CodecWithoutGpuCostsRunsOnTheCpuPool) {
  proto::CostTable costs;
  *costs.add_codecs() = Codec("cpu_only", 0.1, true, /*cpu=*/true, /*gpu=*/false);
  auto options = EnumerateOptions(Tensor(1 << 20), Cluster(1), costs, Options());
  EXPECT_EQ(options.size(), 1u + 2u);  // none, CPU 1-way, CPU 2-way with CPU decode
}

TEST(DecisionTreeTest, OptionFlagsPrune) {
  proto::PlannerOptions o = Options();
  o.set_disable_two_way(true);
  o.set_disable_cpu(true);
  EXPECT_EQ(EnumerateOptions(Tensor(1 << 20), Cluster(1), TwoCodecs(), o).size(), 3u);
  o = Options();
  o.add_codecs("dgc");
  EXPECT_EQ(EnumerateOptions(Tensor(1 << 20), Cluster(1), TwoCodecs(), o).size(), 3u);
}

TEST(DecisionTreeTest, PartitionCountsAreDeduplicated) {
  proto::PlannerOptions o = Options();
  o.add_partition_bytes(4 << 20);        // 1 part for 2 MiB, same as the cluster default
  o.add_partition_bytes((4 << 20) + 4);  // 1 part again
  o.add_partition_bytes(1 << 20);        // 2 parts
  auto options = EnumerateOptions(Tensor(512 << 10), Cluster(1), TwoCodecs(), o);
  EXPECT_EQ(options.size(), 2u * 9u);
  int two_parts = 0;
  for (const auto& opt : options) two_parts += opt.partitions == 2;
  EXPECT_EQ(two_parts, 9);
}

TEST(CostModelTest, UncompressedPushIsAlphaBetaWithServerIncast) {
  // 1 MB (250,000 fp32), 4 workers, 2 servers, 10 Gbit/s = 1250 bytes/us everywhere.
  // Push: alpha 10 + 10 us; beta = max(1 / 1250 (own NIC), 4 / (2 * 1250) (incast)).
  proto::TensorProfile t = Tensor(250000);
  OptionCost cost = CostOf(TensorOption{}, t, Cluster(1), TwoCodecs());
  ASSERT_EQ(cost.num_stages, 5);  // d2h, push, server, pull, h2d
  EXPECT_EQ(cost.stages[1].resource, kNicUp);
  EXPECT_NEAR(cost.stages[1].duration_us, 20 + 1e6 * 4 / 2500.0, 1e-3);
  EXPECT_EQ(cost.stages[3].resource, kNicDown);
  EXPECT_NEAR(cost.stages[3].duration_us, 20 + 1e6 * 4 / 2500.0, 1e-3);
  // Server: 4 pushes summed at 8 GB/s.
  EXPECT_NEAR(cost.stages[2].duration_us, 4 * 1e6 / 8e3, 1e-3);
  // PCIe: 96 Gbit/s = 12,000 bytes/us.
  EXPECT_NEAR(cost.stages[0].duration_us, 1e6 / 12e3, 1e-3);
}

TEST(CostModelTest, GpuTwoWayCompression) {
  proto::TensorProfile t = Tensor(1 << 18);  // 1 MiB
  TensorOption o;
  o.codec = 0;  // fp16, ratio 0.5: 10 us / MiB encode, 5 us decode on the GPU
  o.encode_on = Where::kGpu;
  o.two_way = true;
  o.decode_on = Where::kGpu;
  OptionCost cost = CostOf(o, t, Cluster(1), TwoCodecs());
  std::vector<std::pair<int, double>> stages;
  for (int k = 0; k < cost.num_stages; ++k) {
    stages.push_back({cost.stages[k].resource, cost.stages[k].duration_us});
  }
  const double half = (1 << 20) / 2.0;
  ASSERT_EQ(stages.size(), 7u);
  EXPECT_EQ(stages[0].first, kCompute);
  EXPECT_NEAR(stages[0].second, 10, 1e-3);
  EXPECT_NEAR(stages[1].second, half / 12e3, 1e-3);
  EXPECT_NEAR(stages[2].second, 20 + half * 4 / 2500.0, 1e-2);
  // Server: fp16 is not summable here, so 4 CPU decodes (500 us) + sum + one re-encode.
  EXPECT_NEAR(stages[3].second, 4 * 500 + 4 * (1 << 20) / 8e3 + 1000, 1e-2);
  EXPECT_NEAR(stages[4].second, 20 + half * 4 / 2500.0, 1e-2);
  EXPECT_EQ(stages[6].first, kCompute);
  EXPECT_NEAR(stages[6].second, 5, 1e-3);
  EXPECT_NEAR(cost.work_us[kCompute], 15, 1e-3);
}

TEST(CostModelTest, HierarchicalPushesOncePerMachine) {
  proto::TensorProfile t = Tensor(250000);  // 1 MB
  TensorOption flat, hier;
  hier.hierarchical = true;
  OptionCost f = CostOf(flat, t, Cluster(8), TwoCodecs());
  OptionCost h = CostOf(hier, t, Cluster(8), TwoCodecs());
  // Flat: 8 workers share the NIC (8 / 1250 us per byte) and 32 senders hit 2 servers.
  EXPECT_NEAR(f.work_us[kNicUp], 20 + 1e6 * std::max(8 / 1250.0, 32 / 2500.0), 1e-2);
  // Hierarchical: one push per machine, 4 senders; reduce and broadcast over NVLink
  // (800 Gbit/s = 100,000 bytes/us, 7/8 of the bytes, 10 us latency by default 0 here).
  EXPECT_NEAR(h.work_us[kNicUp], 20 + 1e6 * std::max(1 / 1250.0, 4 / 2500.0), 1e-2);
  EXPECT_NEAR(h.work_us[kIntraMachine], 2 * (1e6 * 7 / 8 / 1e5), 1e-3);
}

TEST(CostModelTest, MeasuredAggregationAndOneWayCopies) {
  // 1 MiB, CPU only: fp16 with measured server costs of 100 us per push and 40 us per round.
  proto::TensorProfile t = Tensor(1 << 18);
  proto::CostTable costs = TwoCodecs();
  auto* cpu = costs.mutable_codecs(0)->mutable_costs(0);
  *cpu->add_aggregate() = Point(1 << 20, 100);
  *cpu->add_aggregate_base() = Point(1 << 20, 40);
  costs.set_copy_gbytes_per_s(2);  // 2000 bytes/us
  TensorOption o;
  o.codec = 0;
  o.encode_on = Where::kCpu;
  OptionCost one_way = CostOf(o, t, Cluster(0), costs);
  // encode, push, server, pull, copy of the fp32 sum into the tensor.
  ASSERT_EQ(one_way.num_stages, 5);
  EXPECT_EQ(one_way.stages[2].resource, kServer);
  EXPECT_NEAR(one_way.stages[2].duration_us, 40 + 4 * 100, 1e-3);
  EXPECT_EQ(one_way.stages[4].resource, kCpuPool);
  EXPECT_NEAR(one_way.stages[4].duration_us, (1 << 20) / 2000.0, 1e-3);
  // An fp16 tensor's sum goes through a scratch buffer first: two copies.
  proto::TensorProfile half = Tensor(1 << 19);
  half.set_element_bytes(2);
  EXPECT_NEAR(CostOf(o, half, Cluster(0), costs).stages[4].duration_us, 2 * (1 << 20) / 2000.0,
              1e-3);
  // Two-way: the server re-encodes (1000 us) and the worker decodes (500 us), no extra copy.
  o.two_way = true;
  o.decode_on = Where::kCpu;
  OptionCost two_way = CostOf(o, t, Cluster(0), costs);
  ASSERT_EQ(two_way.num_stages, 5);
  EXPECT_NEAR(two_way.stages[2].duration_us, 40 + 4 * 100 + 1000, 1e-3);
  EXPECT_NEAR(two_way.stages[4].duration_us, 500, 1e-3);
}

TEST(CostModelTest, OneHostSharesItsCoresBetweenWorkersAndServers) {
  // 4 workers with 2 pool threads each and 2 servers with 2 threads, all on 2 cores.
  proto::TensorProfile t = Tensor(1 << 18);
  proto::ClusterDescription cluster = Cluster(0);
  cluster.set_cpu_pool_threads(2);
  cluster.set_host_cores(2);
  TensorOption o;
  o.codec = 1;  // dgc on the CPU pool: 1000 us per MiB single-threaded
  o.encode_on = Where::kCpu;
  OptionCost shared = CostOf(o, t, cluster, TwoCodecs());
  cluster.set_host_cores(0);
  OptionCost own = CostOf(o, t, cluster, TwoCodecs());
  EXPECT_NEAR(own.stages[0].duration_us, 1000, 1e-3);
  // The 4 workers' encodes at once on 2 cores: 4 x 1000 us / 2.
  EXPECT_EQ(shared.stages[0].resource, kCpuPool);
  EXPECT_NEAR(shared.stages[0].duration_us, 2000, 1e-3);
  // The server's work moves to the same cores, spread over min(2 cores, 4 threads).
  EXPECT_EQ(own.stages[2].resource, kServer);
  EXPECT_EQ(shared.stages[2].resource, kCpuPool);
  EXPECT_NEAR(shared.stages[2].duration_us, own.stages[2].duration_us / 2, 1e-2);
  EXPECT_EQ(shared.work_us[kServer], 0);
  // Plenty of cores: the same speed as cores of its own, as one fluid slot of 2 threads.
  cluster.set_host_cores(64);
  OptionCost roomy = CostOf(o, t, cluster, TwoCodecs());
  EXPECT_NEAR(roomy.stages[0].duration_us, 500, 1e-3);
}

TEST(CostModelTest, OneHostHierarchicalCountsOnlyTheMachineRootsWork) {
  // 2 machines of 4 CPU workers on 2 cores: only the 2 machine roots encode and push.
  proto::TensorProfile t = Tensor(1 << 18);
  proto::ClusterDescription cluster = Cluster(0);
  cluster.set_machines(2);
  cluster.set_workers(8);
  cluster.set_cpu_pool_threads(2);
  cluster.set_host_cores(2);
  TensorOption o;
  o.codec = 1;  // dgc on the CPU pool: 1000 us per MiB single-threaded
  o.encode_on = Where::kCpu;
  o.hierarchical = true;
  OptionCost roots = CostOf(o, t, cluster, TwoCodecs());
  ASSERT_EQ(roots.stages[1].kind, kEncode);  // after the intra-machine reduce
  EXPECT_NEAR(roots.stages[1].duration_us, 2 * 1000 / 2.0, 1e-3);
  // Flat, all 8 workers encode at once on the 2 cores.
  o.hierarchical = false;
  EXPECT_NEAR(CostOf(o, t, cluster, TwoCodecs()).stages[0].duration_us, 8 * 1000 / 2.0, 1e-3);
}

TEST(CostModelTest, OneHostChargesMovingEachPushAndPullToItsCores) {
  // 4 workers on 2 cores; moving a message costs 10 us + 1 us per KiB of CPU (both ends).
  proto::TensorProfile t = Tensor(1 << 18);  // 1 MiB
  proto::ClusterDescription cluster = Cluster(0);
  cluster.set_cpu_pool_threads(2);
  cluster.set_host_cores(2);
  proto::CostTable costs = TwoCodecs();
  *costs.add_transfer_cpu() = Point(1024, 11);
  *costs.add_transfer_cpu() = Point(1 << 20, 10 + 1024);
  const OptionCost none = CostOf(TensorOption{}, t, cluster, costs);
  // transport, push, server, pull, transport: every worker's message at once on 2 cores.
  ASSERT_EQ(none.num_stages, 5);
  for (int stage : {0, 4}) {
    EXPECT_EQ(none.stages[stage].resource, kCpuPool);
    EXPECT_EQ(none.stages[stage].kind, kTransport);
    EXPECT_NEAR(none.stages[stage].duration_us, 4 * 1034 / 2.0, 1e-2);
  }
  EXPECT_EQ(none.stages[1].kind, kPush);
  EXPECT_EQ(none.stages[3].kind, kPull);
  // fp16 both ways moves half the bytes each way: 10 + 512 us per message.
  TensorOption fp16;
  fp16.codec = 0;
  fp16.encode_on = Where::kCpu;
  fp16.two_way = true;
  fp16.decode_on = Where::kCpu;
  const OptionCost halved = CostOf(fp16, t, cluster, costs);
  ASSERT_EQ(halved.num_stages, 7);  // encode, transport, push, server, pull, transport, decode
  EXPECT_EQ(halved.stages[1].kind, kTransport);
  EXPECT_NEAR(halved.stages[1].duration_us, 4 * 522 / 2.0, 1e-2);
  EXPECT_EQ(halved.stages[5].kind, kTransport);
  EXPECT_NEAR(halved.stages[5].duration_us, 4 * 522 / 2.0, 1e-2);
  // Machines of their own: their network work is not modelled.
  cluster.set_host_cores(0);
  EXPECT_EQ(CostOf(TensorOption{}, t, cluster, costs).num_stages, 3);
}

TEST(CostModelTest, OneHostChargesTheTrainingThreadsCpuBeforeThePush) {
  // 4 workers on 2 cores: each training thread runs 300 us of CPU before this tensor is ready;
  // the four take 4 x 300 / 2 us of the shared cores, a partition's share each.
  proto::TensorProfile t = Tensor(1 << 18);
  proto::ClusterDescription cluster = Cluster(0);
  cluster.set_host_cores(2);
  TensorOption o;
  o.partitions = 3;
  const OptionCost none = CostOf(o, t, cluster, TwoCodecs(), 300);
  ASSERT_EQ(none.num_stages, 4);  // training cpu, push, server, pull
  EXPECT_EQ(none.stages[0].resource, kCpuPool);
  EXPECT_EQ(none.stages[0].kind, kTrainingCpu);
  EXPECT_STREQ(StageKindName(kTrainingCpu), "training cpu");
  EXPECT_NEAR(none.stages[0].duration_us, 4 * 300 / 2.0 / 3, 1e-3);
  EXPECT_EQ(none.stages[1].kind, kPush);
  // 8 cores: each thread has a core of its own.
  cluster.set_host_cores(8);
  EXPECT_NEAR(CostOf(o, t, cluster, TwoCodecs(), 300).stages[0].duration_us, 300 / 3.0, 1e-3);
  // Machines of their own: training does not take the communication's cores.
  cluster.set_host_cores(0);
  EXPECT_EQ(CostOf(o, t, cluster, TwoCodecs(), 300).num_stages, 3);
}

TEST(CostModelTest, TrainingCpuIsSharedByTheTensorsInProportionToTheirGaps) {
  proto::ModelProfile profile;
  for (double gap : {0.0, 100.0, 300.0}) profile.add_tensors()->set_ready_gap_us(gap);
  EXPECT_EQ(TrainingCpuUs(profile), (std::vector<double>{0, 0, 0}));  // not measured
  profile.set_measured_training_cpu_us(80);
  EXPECT_EQ(TrainingCpuUs(profile), (std::vector<double>{0, 20, 60}));
  for (proto::TensorProfile& t : *profile.mutable_tensors()) t.set_ready_gap_us(0);
  EXPECT_EQ(TrainingCpuUs(profile), (std::vector<double>{80 / 3.0, 80 / 3.0, 80 / 3.0}));
}

TEST(DecisionTreeTest, HierarchicalJobsGetOnlyHierarchicalOptionsWithOrWithoutGpus) {
  // 4 machines of 2 CPU workers each (a hierarchical job, --strategy=auto).
  proto::ClusterDescription cluster = Cluster(0);
  cluster.set_workers(8);
  proto::PlannerOptions options = Options();
  options.set_hierarchical_only(true);
  auto all = EnumerateOptions(Tensor(1 << 20), cluster, TwoCodecs(), options);
  ASSERT_FALSE(all.empty());
  for (const TensorOption& o : all) EXPECT_TRUE(o.hierarchical) << DescribeOption(o, TwoCodecs());
  // Without the option, CPU machines have no hierarchical choice.
  for (const TensorOption& o : EnumerateOptions(Tensor(1 << 20), cluster, TwoCodecs(), Options())) {
    EXPECT_FALSE(o.hierarchical);
  }
  // One worker per machine: nothing to reduce locally, so flat.
  cluster.set_workers(4);
  for (const TensorOption& o : EnumerateOptions(Tensor(1 << 20), cluster, TwoCodecs(), options)) {
    EXPECT_FALSE(o.hierarchical);
  }
}

TEST(CostModelTest, HostReducerSendsEveryLocalCopyToTheRootWhichAddsThem) {
  // 4 machines of 4 CPU workers; 4 MiB fp32; 800 Gbit/s = 100,000 bytes/us inside a machine,
  // summing at 8 GB/s (the default) = 8000 bytes/us.
  proto::ClusterDescription cluster = Cluster(0);
  cluster.set_workers(16);
  TensorOption o;
  o.hierarchical = true;
  const double bytes = 4 << 20;
  OptionCost cost = CostOf(o, Tensor(1 << 20), cluster, TwoCodecs());
  ASSERT_EQ(cost.stages[0].kind, kReduce);
  EXPECT_NEAR(cost.stages[0].duration_us, 3 * bytes / 1e5 + 3 * bytes / 8e3, 1e-2);
  EXPECT_EQ(cost.stages[cost.num_stages - 1].kind, kBroadcast);
  EXPECT_NEAR(cost.stages[cost.num_stages - 1].duration_us, 3 * bytes / 1e5, 1e-2);
}

TEST(CostModelTest, DescribeOption) {
  TensorOption o;
  o.codec = 0;
  o.encode_on = Where::kGpu;
  o.two_way = true;
  o.decode_on = Where::kCpu;
  o.hierarchical = true;
  o.partitions = 4;
  EXPECT_EQ(DescribeOption(o, TwoCodecs()), "fp16(GPU,2-way:CPU) hier p4");
  EXPECT_EQ(DescribeOption(TensorOption{}, TwoCodecs()), "none");
}

}  // namespace
}  // namespace bytecomp::planner
