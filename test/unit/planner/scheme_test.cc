// The scheme as a dimension of the decision tree (ClusterDescription.collectives): which
// options a tensor gets, what an allreduce and an allgather cost (decision_tree.cc,
// AddCollectiveStages), and that the planner picks the scheme the model favours, writes it into
// the strategy and says why.
#include <algorithm>
#include <cmath>

#include "bytecomp/planner/decision_tree.h"
#include "bytecomp/planner/explain.h"
#include "bytecomp/planner/inputs.h"
#include "gtest/gtest.h"
#include "planner_test_util.h"

namespace bytecomp::planner {
namespace {

// A codec with CPU costs of 100 us per MiB to encode, 50 to decode.
proto::CodecCost SchemeCodec(const std::string& name, double ratio, bool summable,
                             bool two_round = false) {
  proto::CodecCost c;
  c.set_name(name);
  c.set_ratio(ratio);
  c.set_summable(summable);
  c.set_two_round(two_round);
  c.set_memory(name == "fp16" ? "" : "residual");
  proto::DeviceCost* cpu = c.add_costs();
  cpu->set_device(proto::DEVICE_CPU);
  *cpu->add_encode() = testing::Point(1 << 20, 100);
  *cpu->add_decode() = testing::Point(1 << 20, 50);
  if (two_round) *cpu->add_between_rounds() = testing::Point(1 << 20, 100);
  return c;
}

proto::CostTable SchemeCodecs() {
  proto::CostTable costs;
  *costs.add_codecs() = SchemeCodec("fp16", 0.5, /*summable=*/true);
  *costs.add_codecs() = SchemeCodec("topk", 0.02, /*summable=*/false);
  *costs.add_codecs() = SchemeCodec("powersgd", 0.02, /*summable=*/false, /*two_round=*/true);
  return costs;
}

// 4 CPU machines of one worker, 8 Gbit/s (1000 bytes/us) and 10 us links.
proto::ClusterDescription CollectiveCluster(int servers, bool collectives) {
  proto::ClusterDescription c = testing::Cluster(4, servers, 8);
  c.mutable_worker_link()->set_latency_us(10);
  c.mutable_server_link()->set_latency_us(10);
  c.set_collectives(collectives);
  return WithDefaults(c);
}

// The same 4 machines with 2 GPUs each (8 workers), 100 Gbit/s PCIe (12,500 bytes/us) and 5 us.
proto::ClusterDescription GpuCollectiveCluster(int servers) {
  proto::ClusterDescription c = CollectiveCluster(servers, true);
  c.set_gpus_per_machine(2);
  c.clear_workers();  // a worker per GPU
  c.mutable_pcie_link()->set_bandwidth_gbps(100);
  c.mutable_pcie_link()->set_latency_us(5);
  return WithDefaults(c);
}

std::vector<std::string> Described(const std::vector<TensorOption>& options,
                                   const proto::CostTable& costs) {
  std::vector<std::string> out;
  for (const TensorOption& o : options) out.push_back(DescribeOption(o, costs));
  return out;
}

bool Has(const std::vector<std::string>& all, const std::string& one) {
  return std::find(all.begin(), all.end(), one) != all.end();
}

TEST(SchemeTest, CollectivesAddAllreduceForSummingCodecsAndAllgatherForTheOthers) {
  const proto::PlannerOptions options = WithDefaults(proto::PlannerOptions());
  const proto::CostTable costs = SchemeCodecs();
  const auto with = Described(
      EnumerateOptions(testing::Tensor(1 << 20), CollectiveCluster(1, true), costs, options),
      costs);
  EXPECT_TRUE(Has(with, "none allreduce"));
  EXPECT_TRUE(Has(with, "fp16(CPU,1-way) allreduce"));
  EXPECT_TRUE(Has(with, "powersgd(CPU,2-round) allreduce"));
  EXPECT_TRUE(Has(with, "topk(CPU,1-way) allgather"));
  EXPECT_FALSE(Has(with, "topk(CPU,1-way) allreduce"));
  EXPECT_FALSE(Has(with, "fp16(CPU,2-way:CPU) allreduce"));  // collectives are one-way
  // Without collectives, or in a hierarchical job (only each machine's root reaches the
  // network), none.
  proto::PlannerOptions hierarchical = options;
  hierarchical.set_hierarchical_only(true);
  for (const auto& [cluster, opts] : {std::pair{CollectiveCluster(1, false), options},
                                      std::pair{CollectiveCluster(1, true), hierarchical}}) {
    for (const TensorOption& o : EnumerateOptions(testing::Tensor(1 << 20), cluster, costs, opts)) {
      EXPECT_FALSE(o.collective()) << DescribeOption(o, costs);
    }
  }
  // With GPUs the same schemes: device tensors take NCCL or their pinned host copy.
  const auto gpu = Described(
      EnumerateOptions(testing::Tensor(1 << 20), GpuCollectiveCluster(1), costs, options), costs);
  EXPECT_TRUE(Has(gpu, "none allreduce"));
  EXPECT_TRUE(Has(gpu, "fp16(CPU,1-way) allreduce"));
  EXPECT_TRUE(Has(gpu, "topk(CPU,1-way) allgather"));
  // A small tensor (not compressed) still gets the uncompressed allreduce.
  const auto small = Described(
      EnumerateOptions(testing::Tensor(100), CollectiveCluster(1, true), costs, options), costs);
  EXPECT_EQ(small, (std::vector<std::string>{"none", "none allreduce"}));
}

TEST(SchemeTest, AnAllreduceMovesTwiceThreeQuartersOfTheBytesThroughEveryLinkAndNoServer) {
  const proto::ClusterDescription cluster = CollectiveCluster(4, true);
  const proto::CostTable costs = SchemeCodecs();
  TensorOption ring;
  ring.scheme = proto::SCHEME_ALLREDUCE;
  const double bytes = 4 << 20;  // 4 MiB: past bcube's 256 KiB, the ring's W - 1 = 3 steps
  const OptionCost cost = CostOf(ring, testing::Tensor(1 << 20), cluster, costs);
  EXPECT_DOUBLE_EQ(cost.work_us[kServer], 0);
  const double moved = bytes * 3 / 4 / 1000;
  // Reduce-scatter and allgather, each way; the latencies: the batch's broadcast, 3 + 3 steps.
  EXPECT_NEAR(cost.work_us[kNicUp], 2 * moved + 10 * 7, 1e-3);
  EXPECT_NEAR(cost.work_us[kNicDown], 2 * moved, 1e-3);
  // Small: bcube's log2(4) = 2 steps each way.
  const OptionCost small = CostOf(ring, testing::Tensor(1000), cluster, costs);
  EXPECT_NEAR(small.work_us[kNicUp], 2 * 4000.0 * 3 / 4 / 1000 + 10 * 5, 1e-3);
  // fp16 allreduces its half-size values and expands them after (a decode).
  TensorOption half = ring;
  half.codec = 0;
  half.encode_on = Where::kCpu;
  const OptionCost fp16 = CostOf(half, testing::Tensor(1 << 20), cluster, costs);
  EXPECT_NEAR(fp16.work_us[kNicDown], moved, 1e-3);
  // An allgather: 3 payloads each way in 3 steps, and 4 decodes.
  TensorOption gather;
  gather.scheme = proto::SCHEME_ALLGATHER;
  gather.codec = 1;
  gather.encode_on = Where::kCpu;
  const OptionCost topk = CostOf(gather, testing::Tensor(1 << 20), cluster, costs);
  const double payload = CompressedBytes(costs.codecs(1), bytes);
  EXPECT_NEAR(topk.work_us[kNicDown], 3 * payload / 1000, 1e-3);
  EXPECT_NEAR(topk.work_us[kNicUp], 3 * payload / 1000 + 10 * 4, 1e-3);
  EXPECT_DOUBLE_EQ(topk.work_us[kServer], 0);
}

TEST(SchemeTest, OnGpusAnUncompressedAllreduceIsNcclsRingAndTheRestGoesThroughThePinnedCopy) {
  const proto::ClusterDescription cluster = GpuCollectiveCluster(4);
  ASSERT_EQ(cluster.workers(), 8);
  const proto::CostTable costs = SchemeCodecs();
  const double bytes = 4 << 20;
  TensorOption ring;
  ring.scheme = proto::SCHEME_ALLREDUCE;
  // NCCL: one ring over the 8 GPUs crosses each machine's NIC once (not once per GPU, as
  // gloo's flat mesh of host copies does), 7 steps each way plus the batch's broadcast; the
  // adds on the GPU: no CPU pool, no PCIe, no server.
  const OptionCost nccl = CostOf(ring, testing::Tensor(1 << 20), cluster, costs);
  const double moved = bytes * 7 / 8 / 1000;
  EXPECT_NEAR(nccl.work_us[kNicUp], 2 * moved + 10 * 15, 1e-3);
  EXPECT_NEAR(nccl.work_us[kNicDown], 2 * moved, 1e-3);
  for (Resource r : {kCpuPool, kPcieD2H, kPcieH2D, kServer, kCompute}) {
    EXPECT_DOUBLE_EQ(nccl.work_us[r], 0) << ResourceName(r);
  }
  // fp16 gradients too (NCCL sums them); 8-byte elements are not NCCL's here: the pinned copy,
  // and gloo's flat mesh, where the machine's two workers share its link.
  proto::TensorProfile half = testing::Tensor(2 << 20);
  half.set_element_bytes(2);
  EXPECT_NEAR(CostOf(ring, half, cluster, costs).work_us[kNicDown], 2 * moved, 1e-3);
  proto::TensorProfile wide = testing::Tensor(1 << 19);
  wide.set_element_bytes(8);
  const OptionCost copied = CostOf(ring, wide, cluster, costs);
  EXPECT_NEAR(copied.work_us[kPcieD2H], 5 + bytes / 12500, 1e-3);
  EXPECT_NEAR(copied.work_us[kPcieH2D], 5 + bytes / 12500, 1e-3);
  EXPECT_NEAR(copied.work_us[kNicDown], 2 * 2 * moved, 1e-3);
  EXPECT_GT(copied.work_us[kCpuPool], 0);
  // A compressed collective: copied out, encoded on the pool, gloo, decoded, copied back.
  TensorOption fp16 = ring;
  fp16.codec = 0;
  fp16.encode_on = Where::kCpu;
  const OptionCost pinned = CostOf(fp16, testing::Tensor(1 << 20), cluster, costs);
  EXPECT_EQ(pinned.stages[0].kind, kCopyD2H);
  EXPECT_EQ(pinned.stages[1].kind, kEncode);
  EXPECT_EQ(pinned.stages[pinned.num_stages - 2].kind, kDecode);
  EXPECT_EQ(pinned.stages[pinned.num_stages - 1].kind, kCopyH2D);
  EXPECT_NEAR(pinned.work_us[kNicDown], 2 * 2 * moved / 2, 1e-3);  // half the bytes, shared link
}

PlannerInputs UncompressedModel(int servers, bool collectives) {
  PlannerInputs in;
  in.cluster = CollectiveCluster(servers, collectives);
  in.costs = SchemeCodecs();
  in.options.set_max_loss(proto::LOSS_NONE);  // no codec is allowed: the scheme alone is chosen
  for (int i = 0; i < 4; ++i) {
    proto::TensorProfile* t = in.profile.add_tensors();
    t->set_name("layer" + std::to_string(i));
    t->set_elements(8 << 20);  // 32 MiB
    t->set_ready_gap_us(i == 0 ? 0 : 1000);
  }
  return in;
}

TEST(SchemeTest, OneServerApartForFourWorkersLosesToTheRingAndThePlanSaysSo) {
  // One server behind one link takes every worker's push and sends every pull: 4x the bytes a
  // ring moves per link.
  auto problem = Prepare(UncompressedModel(/*servers=*/1, /*collectives=*/true));
  ASSERT_TRUE(problem.ok()) << problem.status();
  const PlanResult plan = PlanByteComp(*problem);
  EXPECT_LT(plan.predicted_us, 0.6 * plan.no_compression_us);
  const proto::Strategy strategy = ToStrategy(*problem, plan.choice);
  for (const proto::TensorStrategy& t : strategy.tensors()) {
    EXPECT_EQ(t.scheme(), proto::SCHEME_ALLREDUCE) << t.name_pattern();
    EXPECT_TRUE(t.push_codec().name().empty()) << t.name_pattern();
  }
  const std::vector<TensorExplanation> why = ExplainPlan(*problem, plan.choice);
  EXPECT_EQ(why[3].why, Why::kCollective);
  EXPECT_GT(why[3].saving_us, 0);
  EXPECT_GT(why[3].scheme_saving_us, 0);  // on the servers it would take longer
  const std::string table = PlanTable(*problem, plan.choice, why, false, false);
  EXPECT_NE(table.find(" allreduce "), std::string::npos) << table;
  EXPECT_NE(table.find("allreduce: the servers would take +"), std::string::npos) << table;
  // Four servers beside four links move what the ring moves with fewer latencies: the
  // servers keep it (or tie), and the planner never does worse than without collectives.
  auto spread = Prepare(UncompressedModel(/*servers=*/4, /*collectives=*/true));
  auto without = Prepare(UncompressedModel(/*servers=*/4, /*collectives=*/false));
  ASSERT_TRUE(spread.ok() && without.ok());
  EXPECT_LE(PlanByteComp(*spread).predicted_us, PlanByteComp(*without).predicted_us * 1.001);
}

TEST(SchemeTest, OnGpusTheRingOfNcclBeatsOneServerAndThePlanPicksIt) {
  PlannerInputs in = UncompressedModel(/*servers=*/1, /*collectives=*/true);
  in.cluster = GpuCollectiveCluster(1);
  auto problem = Prepare(in);
  ASSERT_TRUE(problem.ok()) << problem.status();
  const PlanResult plan = PlanByteComp(*problem);
  // One server takes 8 workers' pushes; NCCL's ring moves 2 x 7/8 of the bytes per NIC.
  EXPECT_LT(plan.predicted_us, 0.3 * plan.no_compression_us);
  const proto::Strategy strategy = ToStrategy(*problem, plan.choice);
  for (const proto::TensorStrategy& t : strategy.tensors()) {
    EXPECT_EQ(t.scheme(), proto::SCHEME_ALLREDUCE) << t.name_pattern();
    EXPECT_TRUE(t.push_codec().name().empty()) << t.name_pattern();
  }
}

}  // namespace
}  // namespace bytecomp::planner
