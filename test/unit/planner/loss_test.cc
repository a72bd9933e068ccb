// Which codecs the planner may pick (loss classes, max_loss), and that it prefers less loss
// where the gain is within its tolerance.
#include "bytecomp/planner/allowed_codecs.h"
#include "bytecomp/planner/decision_tree.h"
#include "bytecomp/planner/explain.h"
#include "bytecomp/planner/planner.h"
#include "gtest/gtest.h"
#include "planner_test_util.h"

namespace bytecomp::planner {
namespace {

proto::CodecCost Codec(const std::string& name, const std::string& memory, double ratio,
                       double us_per_mb) {
  proto::CodecCost c;
  c.set_name(name);
  c.set_memory(memory);
  c.set_ratio(ratio);
  c.set_reencodable(true);
  proto::DeviceCost* cpu = c.add_costs();
  cpu->set_device(proto::DEVICE_CPU);
  for (auto* curve : {cpu->add_encode(), cpu->add_decode()}) {
    curve->set_bytes(1 << 20);
    curve->set_us(us_per_mb);
  }
  return c;
}

TEST(LossTest, ClassesFromNameAndMemoryUnlessTheTableSays) {
  EXPECT_EQ(LossOf(Codec("fp16", "", 0.5, 1)), proto::LOSS_ROUNDING);
  EXPECT_EQ(LossOf(Codec("bf16", "", 0.5, 1)), proto::LOSS_ROUNDING);
  EXPECT_EQ(LossOf(Codec("topk", "residual", 0.02, 1)), proto::LOSS_COMPENSATED);
  EXPECT_EQ(LossOf(Codec("powersgd", "powersgd", 0.01, 1)), proto::LOSS_COMPENSATED);
  EXPECT_EQ(LossOf(Codec("topk", "", 0.02, 1)), proto::LOSS_HIGH);  // no error feedback
  EXPECT_EQ(LossOf(Codec("randomk", "residual", 0.01, 1)), proto::LOSS_HIGH);
  proto::CodecCost told = Codec("randomk", "residual", 0.01, 1);
  told.set_loss(proto::LOSS_COMPENSATED);
  EXPECT_EQ(LossOf(told), proto::LOSS_COMPENSATED);
  // blocksparse drops only all-zero blocks by default, threshold 0 only zeros: lossless.
  EXPECT_EQ(LossOf(Codec("blocksparse", "", 1, 1)), proto::LOSS_NONE);
  proto::CodecCost lossy_blocks = Codec("blocksparse", "", 1, 1);
  (*lossy_blocks.mutable_params())["threshold"] = "0.5";
  EXPECT_EQ(LossOf(lossy_blocks), proto::LOSS_HIGH);
  proto::CodecCost zeros = Codec("threshold", "", 1, 1);
  (*zeros.mutable_params())["threshold"] = "0";
  EXPECT_EQ(LossOf(zeros), proto::LOSS_NONE);
  EXPECT_EQ(LossOf(Codec("artopk", "residual", 0.02, 1)), proto::LOSS_COMPENSATED);
}

// From the codecs' facts (compress CodecFacts: loss, lossless_when) and the memory, the classes
// the planner gave by name: a memory lifts only a compensable codec; "none" is no memory.
TEST(LossTest, ClassesOfEveryKindOfCodecWithAndWithoutAMemory) {
  EXPECT_EQ(LossOf(Codec("none", "", 1, 1)), proto::LOSS_NONE);
  EXPECT_EQ(LossOf(Codec("", "", 1, 1)), proto::LOSS_NONE);
  EXPECT_EQ(LossOf(Codec("fp16", "residual", 0.5, 1)), proto::LOSS_ROUNDING);
  EXPECT_EQ(LossOf(Codec("bf16", "none", 0.5, 1)), proto::LOSS_ROUNDING);
  EXPECT_EQ(LossOf(Codec("randomk", "", 0.01, 1)), proto::LOSS_HIGH);
  EXPECT_EQ(LossOf(Codec("dgc", "dgc_momentum", 0.01, 1)), proto::LOSS_COMPENSATED);
  EXPECT_EQ(LossOf(Codec("efsignsgd", "efsignsgd", 0.04, 1)), proto::LOSS_COMPENSATED);
  EXPECT_EQ(LossOf(Codec("onebit", "none", 0.04, 1)), proto::LOSS_HIGH);
  EXPECT_EQ(LossOf(Codec("signsgd", "", 0.04, 1)), proto::LOSS_HIGH);
  EXPECT_EQ(LossOf(Codec("qsgd", "residual", 0.25, 1)), proto::LOSS_COMPENSATED);
  // threshold's default (0.01) drops small values; at 0 only zeros, however it is written.
  EXPECT_EQ(LossOf(Codec("threshold", "", 0.1, 1)), proto::LOSS_HIGH);
  EXPECT_EQ(LossOf(Codec("threshold", "residual", 0.1, 1)), proto::LOSS_COMPENSATED);
  proto::CodecCost zeros = Codec("threshold", "residual", 0.1, 1);
  (*zeros.mutable_params())["threshold"] = "0.0";
  EXPECT_EQ(LossOf(zeros), proto::LOSS_NONE);
  proto::CodecCost blocks = Codec("blocksparse", "residual", 1, 1);
  (*blocks.mutable_params())["threshold"] = "0.5";
  EXPECT_EQ(LossOf(blocks), proto::LOSS_COMPENSATED);
  // A codec the registry does not know (a cost table written by hand): by its memory.
  EXPECT_EQ(LossOf(Codec("mystery", "residual", 0.1, 1)), proto::LOSS_COMPENSATED);
  EXPECT_EQ(LossOf(Codec("mystery", "", 0.1, 1)), proto::LOSS_HIGH);
}

// Codecs of one selection (compress CodecFacts::selection: topk and artopk) stand for each other
// in an allowance; no other codec does.
TEST(LossTest, AnAllowanceTakesACodecOfTheListedOnesSelection) {
  proto::TensorAllowance allowance;
  proto::CodecConfig* listed = allowance.add_codecs();
  listed->set_name("artopk");
  (*listed->mutable_params())["ratio"] = "0.01";
  auto with_ratio = [](const std::string& name, const std::string& ratio) {
    proto::CodecCost c = Codec(name, "residual", 0.02, 1);
    (*c.mutable_params())["ratio"] = ratio;
    return c;
  };
  EXPECT_TRUE(CodecAllowedBy(with_ratio("topk", "0.02"), allowance));
  EXPECT_FALSE(CodecAllowedBy(with_ratio("topk", "0.005"), allowance));
  EXPECT_FALSE(CodecAllowedBy(with_ratio("dgc", "0.5"), allowance));
  EXPECT_FALSE(CodecAllowedBy(with_ratio("randomk", "0.5"), allowance));
  listed->set_name("mystery");
  EXPECT_TRUE(CodecAllowedBy(with_ratio("mystery", "0.01"), allowance));
  EXPECT_FALSE(CodecAllowedBy(with_ratio("enigma", "0.01"), allowance));
}

// max_loss and a tensor's allowance (options.allowed) both bound the codecs: CodecAllowed
// checks both, so neither can let in what the other refuses.
TEST(LossTest, MaxLossAndTheTensorsAllowanceBothApply) {
  proto::PlannerOptions options;
  proto::TensorAllowance* emb = options.add_allowed();
  emb->set_name_pattern("emb*");
  proto::CodecConfig* listed = emb->add_codecs();
  listed->set_name("randomk");
  (*listed->mutable_params())["ratio"] = "0.01";
  proto::TensorProfile embedding, fc;
  embedding.set_name("embedding");
  fc.set_name("fc");
  proto::CodecCost randomk = Codec("randomk", "residual", 0.01, 1);
  (*randomk.mutable_params())["ratio"] = "0.01";
  proto::CodecCost topk = Codec("topk", "residual", 0.02, 1);
  (*topk.mutable_params())["ratio"] = "0.01";
  // Listed for the tensor, but above the default max_loss.
  EXPECT_FALSE(CodecAllowed(randomk, embedding, options));
  // Within max_loss, but not what the embedding's allowance accepts; fc has no allowance.
  EXPECT_FALSE(CodecAllowed(topk, embedding, options));
  EXPECT_TRUE(CodecAllowed(topk, fc, options));
  // Lossless blocksparse is always acceptable.
  EXPECT_TRUE(CodecAllowed(Codec("blocksparse", "", 1, 1), embedding, options));
  options.set_max_loss(proto::LOSS_HIGH);
  EXPECT_TRUE(CodecAllowed(randomk, embedding, options));
  EXPECT_TRUE(CodecAllowed(randomk, fc, options));
  // Excluded from the whole table only when no tensor may use it.
  PlannerInputs in;
  in.cluster = testing::Cluster(2, 1, 1);
  *in.profile.add_tensors() = testing::Tensor(1 << 20, "embedding");
  *in.costs.add_codecs() = topk;
  *in.costs.add_codecs() = randomk;
  in.options = options;
  auto prepared = Prepare(in);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_EQ(ExcludedCodecs(*prepared),
            "topk (lossier than options.allowed accepts for every tensor)");
  *in.profile.add_tensors() = testing::Tensor(1 << 20);  // "w": no allowance
  prepared = Prepare(in);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_EQ(ExcludedCodecs(*prepared), "");
}

TEST(LossTest, MaxLossKeepsLossierCodecsOutUnlessRaised) {
  proto::PlannerOptions options;
  const proto::TensorProfile tensor;
  EXPECT_TRUE(CodecAllowed(Codec("topk", "residual", 0.02, 1), tensor, options));
  EXPECT_FALSE(CodecAllowed(Codec("randomk", "residual", 0.01, 1), tensor, options));
  options.set_max_loss(proto::LOSS_HIGH);
  EXPECT_TRUE(CodecAllowed(Codec("randomk", "residual", 0.01, 1), tensor, options));
  options.set_max_loss(proto::LOSS_ROUNDING);
  EXPECT_FALSE(CodecAllowed(Codec("topk", "residual", 0.02, 1), tensor, options));
  EXPECT_TRUE(CodecAllowed(Codec("fp16", "", 0.5, 1), tensor, options));
  options.add_codecs("bf16");
  EXPECT_FALSE(CodecAllowed(Codec("fp16", "", 0.5, 1), tensor, options));
}

// One 64 MiB tensor ready at once, 2 workers, 1 server, 1 Gbit/s.
PlannerInputs OneTensor() {
  PlannerInputs in;
  in.cluster = testing::Cluster(/*machines=*/2, /*servers=*/1, /*gbps=*/1);
  *in.profile.add_tensors() = testing::Tensor(16 << 20);
  return in;
}

TEST(LossTest, TheLossierOfTwoEquallyFastCodecsIsNotPicked) {
  // randomk (allowed here) and topk: the same size and cost; topk is less lossy.
  PlannerInputs in = OneTensor();
  in.options.set_max_loss(proto::LOSS_HIGH);
  *in.costs.add_codecs() = Codec("randomk", "residual", 0.01, 10);
  *in.costs.add_codecs() = Codec("topk", "residual", 0.01, 10);
  auto prepared = Prepare(in);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  const PlanResult plan = PlanByteComp(*prepared);
  const TensorOption& chosen = prepared->sim.tensors[0].options[plan.choice[0]].option;
  ASSERT_GE(chosen.codec, 0);
  EXPECT_EQ(in.costs.codecs(chosen.codec).name(), "topk");
  // By default randomk is not even considered, and the table says why.
  in.options.clear_max_loss();
  auto strict = Prepare(in);
  ASSERT_TRUE(strict.ok());
  EXPECT_EQ(ExcludedCodecs(*strict), "randomk (loss class high, above max_loss compensated)");
}

TEST(LossTest, CompressionThatGainsLessThanTheToleranceIsUndone) {
  // Two tensors, each alone enough to keep the link busy behind 1 s of compute: compressing
  // the second (ready last) shortens the iteration, compressing the first gains nothing.
  PlannerInputs in = OneTensor();
  in.profile.mutable_tensors(0)->set_elements(1 << 20);  // 4 MiB, ready first
  proto::TensorProfile* last = in.profile.add_tensors();
  last->set_name("last");
  last->set_elements(16 << 20);
  last->set_ready_gap_us(1e6);
  *in.costs.add_codecs() = Codec("topk", "residual", 0.01, 10);
  auto prepared = Prepare(in);
  ASSERT_TRUE(prepared.ok());
  const PlanResult plan = PlanByteComp(*prepared);
  EXPECT_EQ(prepared->sim.tensors[0].options[plan.choice[0]].option.codec, -1);
  EXPECT_EQ(prepared->sim.tensors[1].options[plan.choice[1]].option.codec, 0);
  // Compressing both is what the search alone may keep: within the tolerance of the plan.
  std::vector<int> both = plan.choice;
  for (int o = 0; o < static_cast<int>(prepared->sim.tensors[0].options.size()); ++o) {
    if (prepared->sim.tensors[0].options[o].option.codec == 0) both[0] = o;
  }
  TimelineSimulator sim(&prepared->sim);
  EXPECT_LE(plan.predicted_us, sim.Simulate(both) * 1.001);
  EXPECT_EQ(PreferLessLoss(*prepared, both), plan.choice);
}

}  // namespace
}  // namespace bytecomp::planner
