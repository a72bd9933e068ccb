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
  // Without collectives, or with GPUs (the engine's collectives take host tensors), none.
  for (const auto& cluster : {CollectiveCluster(1, false), [] {
                                proto::ClusterDescription c = CollectiveCluster(1, true);
                                c.set_gpus_per_machine(1);
                                return WithDefaults(c);
                              }()}) {
    for (const TensorOption& o :
         EnumerateOptions(testing::Tensor(1 << 20), cluster, costs, options)) {
      EXPECT_FALSE(o.collective()) << DescribeOption(o, costs);
    }
  }
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

}  // namespace
}  // namespace bytecomp::planner
