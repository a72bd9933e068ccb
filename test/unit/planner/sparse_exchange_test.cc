// The planner's sparse exchanges: the sizes of the servers' union, of artopk's two exchanges
// and of the block-sparse exchange; the gather-or-sum choice that follows from them (W, k,
// bandwidth, latency); the codecs a user's allowance admits; and a Strategy mapped back to
// its options (ChoiceOf).
#include <cmath>
#include <tuple>

#include "bytecomp/planner/allowed_codecs.h"
#include "bytecomp/planner/decision_tree.h"
#include "bytecomp/planner/exchange_sizes.h"
#include "bytecomp/planner/inputs.h"
#include "bytecomp/planner/planner.h"
#include "gtest/gtest.h"
#include "planner_test_util.h"

namespace bytecomp::planner {
namespace {

using testing::Point;
using testing::Tensor;

// CPU costs linear in size: encode 1000 us per MiB, decode 100.
proto::CodecCost Sparse(const std::string& name, double kept, proto::Exchange exchange) {
  proto::CodecCost c;
  c.set_name(name);
  (*c.mutable_params())["ratio"] = std::to_string(kept);
  c.set_memory("residual");
  c.set_ratio(2 * kept);  // values and raw int32 indices
  c.set_kept_fraction(kept);
  c.set_exchange(exchange);
  c.set_union_pull(exchange == proto::EXCHANGE_PUSH_PULL);
  c.set_reencodable(exchange == proto::EXCHANGE_PUSH_PULL);
  auto* cpu = c.add_costs();
  cpu->set_device(proto::DEVICE_CPU);
  *cpu->add_encode() = Point(1 << 20, 1000);
  *cpu->add_decode() = Point(1 << 20, 100);
  return c;
}

proto::CostTable TopkAndArtopk(double kept = 0.01) {
  proto::CostTable costs;
  *costs.add_codecs() = Sparse("topk", kept, proto::EXCHANGE_PUSH_PULL);
  *costs.add_codecs() = Sparse("artopk", kept, proto::EXCHANGE_SUMMED_INDICES);
  costs.set_sum_gbytes_per_s(8);
  costs.set_copy_gbytes_per_s(8);
  return costs;
}

proto::ClusterDescription Cluster(int workers, double gbps, double latency_us) {
  proto::ClusterDescription c;
  c.set_machines(workers);
  c.set_servers(workers);
  c.mutable_worker_link()->set_bandwidth_gbps(gbps);
  c.mutable_worker_link()->set_latency_us(latency_us);
  c.mutable_server_link()->set_bandwidth_gbps(gbps);
  c.mutable_server_link()->set_latency_us(latency_us);
  return WithDefaults(c);
}

TEST(ExchangeSizesTest, UnionSummedIndicesAndBlockSparse) {
  EXPECT_NEAR(UnionFraction(0.01, 1), 0.01, 1e-15);
  EXPECT_NEAR(UnionFraction(0.01, 4), 1 - std::pow(0.99, 4), 1e-12);
  EXPECT_DOUBLE_EQ(UnionFraction(1, 8), 1);
  // A value and a varint of the mean gap: 1 byte up to gaps of 127, 2 up to 16383.
  EXPECT_DOUBLE_EQ(SparseBytesPerElement(0.01), 5);
  EXPECT_DOUBLE_EQ(SparseBytesPerElement(0.001), 6);
  EXPECT_DOUBLE_EQ(SparseBytesPerElement(1), 5);
  // 4 MiB (2^20 elements), 1% kept by 8 workers: 7.7% of the elements, 5 bytes each.
  const double bytes = 4 << 20;
  EXPECT_NEAR(UnionPullBytes(0.01, 8, bytes), 16 + UnionFraction(0.01, 8) * (1 << 20) * 5, 1e-6);
  // artopk 1%: the index section is ratio - kept of the bytes, from a W-th of the workers.
  const SummedIndicesBytes s =
      SummedIndicesSizes(Sparse("artopk", 0.01, proto::EXCHANGE_SUMMED_INDICES), bytes, 4);
  EXPECT_DOUBLE_EQ(s.push1, 28 + 0.01 * bytes / 4);
  EXPECT_DOUBLE_EQ(s.pull1, 16 + 0.01 * bytes);
  EXPECT_DOUBLE_EQ(s.push2, 8 + 0.01 * bytes);
  EXPECT_DOUBLE_EQ(s.pull2, 4 + 0.01 * bytes);
  // Block-sparse: 1% of 4096 blocks of 1 KiB, a list (4 bytes a block) below the 512-byte
  // bitmap, and the header.
  EXPECT_DOUBLE_EQ(BlockSparseBytes(0.01, bytes), 16 + 41 * 4 + 41 * 1024);
  EXPECT_DOUBLE_EQ(BlockSparseBytes(0.5, bytes), 16 + 512 + 2048 * 1024);
  EXPECT_DOUBLE_EQ(BlockSparseBytes(1, bytes), 16 + 512 + bytes);
  // Off the block size (1000 elements, 4 blocks, the last of 232): the format's own size
  // (blocksparse_format.h), a bitmap padded to a whole word and exactly the tensor's values.
  EXPECT_DOUBLE_EQ(BlockSparseBytes(1, 4000), 16 + 4 + 4000);
}

TEST(SparseExchangeTest, TheTreeOffersTheUnionForTopkAndOneWayForArtopk) {
  const auto options = EnumerateOptions(Tensor(1 << 20), Cluster(4, 1, 50), TopkAndArtopk(),
                                        WithDefaults(proto::PlannerOptions()));
  int topk_union = 0, topk_two_way = 0, artopk = 0;
  for (const TensorOption& o : options) {
    if (o.codec == 0 && o.union_pull) ++topk_union;
    if (o.codec == 0 && o.two_way && !o.union_pull) ++topk_two_way;
    if (o.codec == 1) {
      ++artopk;
      EXPECT_FALSE(o.two_way);
    }
  }
  EXPECT_EQ(topk_union, 1);
  EXPECT_EQ(topk_two_way, 1);
  EXPECT_EQ(artopk, 1);
}

TEST(SparseExchangeTest, ArtopkHasTwoExchangesAndTheUnionPullGrowsWithTheWorkers) {
  const proto::CostTable costs = TopkAndArtopk();
  TensorOption o;
  o.codec = 1;
  o.encode_on = Where::kCpu;
  const OptionCost a = CostOf(o, Tensor(1 << 20), Cluster(4, 1, 50), costs);
  // encode, push 1, server 1, pull 1, gather, push 2, server 2, pull 2, decode.
  ASSERT_EQ(a.num_stages, 9);
  const int expected[] = {kCpuPool, kNicUp,  kServer,  kNicDown, kCpuPool,
                          kNicUp,   kServer, kNicDown, kCpuPool};
  for (int k = 0; k < 9; ++k) EXPECT_EQ(a.stages[k].resource, expected[k]) << k;
  const double us_per_byte = 8.0 / 1e3;  // 1 Gbit/s
  EXPECT_NEAR(a.stages[5].duration_us, 100 + (8 + 0.01 * (4 << 20)) * us_per_byte, 0.01);
  o.codec = 0;
  o.two_way = o.union_pull = true;
  o.decode_on = Where::kCpu;
  const double pull4 = CostOf(o, Tensor(1 << 20), Cluster(4, 1, 50), costs).stages[3].duration_us;
  const double pull16 = CostOf(o, Tensor(1 << 20), Cluster(16, 1, 50), costs).stages[3].duration_us;
  EXPECT_GT(pull16, 3 * pull4 - 200);  // about W times the bytes
}

// On a GPU cluster with the codec's GPU costs (compress/cuda's artopk), artopk may encode on the
// GPU: its selection, gather and scatter on the compute stream, and only its payloads and
// replies cross PCIe, where on the pool the whole tensor crosses both ways.
TEST(SparseExchangeTest, ArtopkOnTheGpuCrossesPcieWithItsPayloadsOnly) {
  proto::CostTable costs = TopkAndArtopk();
  auto* gpu = costs.mutable_codecs(1)->add_costs();
  gpu->set_device(proto::DEVICE_GPU);
  *gpu->add_encode() = Point(1 << 20, 40);
  *gpu->add_decode() = Point(1 << 20, 10);
  proto::ClusterDescription cluster = Cluster(4, 1, 50);
  cluster.set_gpus_per_machine(1);
  cluster = WithDefaults(cluster);
  int on_gpu = 0;
  for (const TensorOption& o :
       EnumerateOptions(Tensor(1 << 20), cluster, costs, WithDefaults(proto::PlannerOptions()))) {
    if (o.codec == 1 && o.encode_on == Where::kGpu) ++on_gpu;
  }
  EXPECT_EQ(on_gpu, 1);
  TensorOption o;
  o.codec = 1;
  o.encode_on = Where::kGpu;
  const OptionCost g = CostOf(o, Tensor(1 << 20), cluster, costs);
  // encode, D2H, push 1, server 1, pull 1, H2D, gather, D2H, push 2, server 2, pull 2, H2D,
  // decode.
  const int expected[] = {kCompute, kPcieD2H, kNicUp,  kServer,  kNicDown, kPcieH2D, kCompute,
                          kPcieD2H, kNicUp,   kServer, kNicDown, kPcieH2D, kCompute};
  ASSERT_EQ(g.num_stages, 13);
  for (int k = 0; k < 13; ++k) EXPECT_EQ(g.stages[k].resource, expected[k]) << k;
  const double bytes = 4 << 20;  // the tensor's
  EXPECT_NEAR(g.stages[0].duration_us, InterpolateCost(gpu->encode(), bytes), 0.01);
  EXPECT_NEAR(g.stages[12].duration_us, InterpolateCost(gpu->decode(), bytes), 0.01);
  // The values' D2H: the second payload's bytes, not the tensor's.
  const SummedIndicesBytes b = SummedIndicesSizes(costs.codecs(1), bytes, 4);
  auto pcie = [&](double moved) {
    return cluster.pcie_link().latency_us() +
           moved * 8 / (cluster.pcie_link().bandwidth_gbps() * 1e3);
  };
  EXPECT_NEAR(g.stages[7].duration_us, pcie(b.push2), 0.01);
  EXPECT_NEAR(g.stages[6].duration_us, InterpolateCost(gpu->decode(), b.push2), 0.01);
  o.encode_on = Where::kCpu;
  const OptionCost c = CostOf(o, Tensor(1 << 20), cluster, costs);
  EXPECT_EQ(c.stages[0].resource, kPcieD2H);
  EXPECT_NEAR(c.stages[0].duration_us, pcie(bytes), 0.01);
  EXPECT_GT(c.work_us[kCpuPool], 0);
  EXPECT_EQ(g.work_us[kCpuPool], 0);
}

// The predicted iteration of one tensor of `elements` with topk's fastest option (one-way,
// two-way or the union) and with artopk's, over `workers` machines.
std::pair<double, double> TopkAndArtopkUs(int64_t elements, int workers, double gbps,
                                          double latency_us) {
  PlannerInputs in;
  *in.profile.add_tensors() = Tensor(elements);
  in.cluster = Cluster(workers, gbps, latency_us);
  in.costs = TopkAndArtopk();
  auto problem = Prepare(in);
  EXPECT_TRUE(problem.ok()) << problem.status();
  TimelineSimulator sim(&problem->sim);
  double best[2] = {1e30, 1e30};
  const auto& options = problem->sim.tensors[0].options;
  for (int o = 0; o < static_cast<int>(options.size()); ++o) {
    const int codec = options[o].option.codec;
    if (codec >= 0) best[codec] = std::min(best[codec], sim.Simulate({o}));
  }
  return {best[0], best[1]};
}

TEST(SparseExchangeTest, GatherForSmallTensorsAndFewWorkersSumForLargeOnesAndMany) {
  // 64 MiB at 1 Gbit/s and 16 workers: the union would be 15% of the tensor; artopk's second
  // round trip costs far less.
  auto [topk, artopk] = TopkAndArtopkUs(16 << 20, 16, 1, 50);
  EXPECT_LT(artopk, 0.8 * topk);
  // 256 KiB, 2 workers, 2 ms of latency: two round trips cost more than the union's bytes.
  std::tie(topk, artopk) = TopkAndArtopkUs(64 << 10, 2, 10, 2000);
  EXPECT_LT(topk, 0.8 * artopk);
  // The planner picks artopk where it is faster.
  PlannerInputs in;
  *in.profile.add_tensors() = Tensor(16 << 20);
  in.cluster = Cluster(16, 1, 50);
  in.costs = TopkAndArtopk();
  auto problem = Prepare(in);
  ASSERT_TRUE(problem.ok());
  const PlanResult plan = PlanByteComp(*problem);
  EXPECT_EQ(
      DescribeOption(problem->sim.tensors[0].options[plan.choice[0]].option, in.costs).substr(0, 6),
      "artopk");
}

TEST(AllowedCodecsTest, NeverALossierCodecThanTheUserAccepts) {
  proto::PlannerOptions options;
  auto* a = options.add_allowed();
  a->set_name_pattern("emb*");
  auto* topk = a->add_codecs();
  topk->set_name("topk");
  (*topk->mutable_params())["ratio"] = "0.01";
  ASSERT_EQ(AllowanceFor(options, "embedding"), a);
  EXPECT_EQ(AllowanceFor(options, "fc"), nullptr);
  auto codec = [](const std::string& name, const std::string& ratio) {
    proto::CodecCost c;
    c.set_name(name);
    if (!ratio.empty()) (*c.mutable_params())["ratio"] = ratio;
    return c;
  };
  EXPECT_TRUE(CodecAllowedBy(codec("topk", "0.01"), *a));
  EXPECT_TRUE(CodecAllowedBy(codec("topk", "0.05"), *a));    // keeps more
  EXPECT_FALSE(CodecAllowedBy(codec("topk", "0.001"), *a));  // keeps less
  EXPECT_TRUE(CodecAllowedBy(codec("artopk", "0.01"), *a));  // the same accuracy class
  EXPECT_FALSE(CodecAllowedBy(codec("artopk", "0.005"), *a));
  EXPECT_FALSE(CodecAllowedBy(codec("onebit", ""), *a));
  EXPECT_FALSE(CodecAllowedBy(codec("randomk", "0.5"), *a));
  EXPECT_TRUE(CodecAllowedBy(codec("blocksparse", ""), *a));  // lossless
  proto::CodecCost lossy_blocks = codec("blocksparse", "");
  (*lossy_blocks.mutable_params())["threshold"] = "0.1";
  EXPECT_FALSE(CodecAllowedBy(lossy_blocks, *a));
  proto::CodecCost zeros = codec("threshold", "");
  EXPECT_FALSE(CodecAllowedBy(zeros, *a));  // threshold's default (0.01) drops small values
  (*zeros.mutable_params())["threshold"] = "0";
  EXPECT_TRUE(CodecAllowedBy(zeros, *a));
  EXPECT_FALSE(TwoWayAllowed(a));
  EXPECT_TRUE(TwoWayAllowed(nullptr));
  // In the tree: no two-way re-encode for the tensor, the union stays.
  options = WithDefaults(options);
  const auto opts =
      EnumerateOptions(Tensor(1 << 20, "embedding"), Cluster(4, 1, 50), TopkAndArtopk(), options);
  for (const TensorOption& o : opts) EXPECT_TRUE(!o.two_way || o.union_pull);
  proto::CostTable coarse = TopkAndArtopk(0.001);
  for (const TensorOption& o :
       EnumerateOptions(Tensor(1 << 20, "embedding"), Cluster(4, 1, 50), coarse, options)) {
    EXPECT_EQ(o.codec, -1) << "0.1% keeps less than the accepted 1%";
  }
}

TEST(ChoiceOfTest, AStrategyMapsBackToThePlannedOptions) {
  PlannerInputs in;
  for (int i = 0; i < 6; ++i)
    *in.profile.add_tensors() = Tensor(int64_t{1} << (14 + 2 * i), "t" + std::to_string(i));
  in.cluster = Cluster(8, 1, 50);
  in.costs = TopkAndArtopk();
  in.options.set_keep_dominated(true);
  auto problem = Prepare(in);
  ASSERT_TRUE(problem.ok()) << problem.status();
  const PlanResult plan = PlanByteComp(*problem);
  const proto::Strategy strategy = ToStrategy(*problem, plan.choice);
  auto choice = ChoiceOf(*problem, strategy);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(*choice, plan.choice);
  proto::Strategy unknown = strategy;
  unknown.mutable_tensors(5)->mutable_push_codec()->set_name("onebit");
  EXPECT_FALSE(ChoiceOf(*problem, unknown).ok());
}

}  // namespace
}  // namespace bytecomp::planner
