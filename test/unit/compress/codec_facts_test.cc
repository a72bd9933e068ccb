// The facts every codec's spec carries (codec.h CodecFacts), which the planner, calibration,
// the worker and compress/cuda ask instead of comparing names: that each codec's instances say
// the same, and the values those callers decided by name before.
#include <set>
#include <string>

#include "bytecomp/compress/gpu_codecs.h"
#include "bytecomp/compress/memory.h"
#include "bytecomp/compress/registry.h"
#include "bytecomp/compress/strategy.h"
#include "gtest/gtest.h"

namespace bytecomp::compress {
namespace {

const CodecFacts& FactsOf(const std::string& name) {
  const CodecFacts* facts = CodecFactsOf(name);
  EXPECT_NE(facts, nullptr) << name;
  static const CodecFacts kNone;
  return facts == nullptr ? kNone : *facts;
}

// What an instance with these parameters says against what its spec says.
void ExpectInstanceAgrees(const std::string& name, const CodecParams& params) {
  auto codec = CreateCodec(name, params);
  ASSERT_TRUE(codec.ok()) << name << ": " << codec.status();
  const CodecProperties p = (*codec)->properties();
  const CodecFacts& facts = FactsOf(name);
  EXPECT_EQ(p.sparse, facts.sparse) << name;
  EXPECT_EQ(p.summable_encoded, facts.summable_encoded) << name;
  EXPECT_EQ(p.two_round, facts.two_round) << name;
  EXPECT_EQ(p.lossless, CodecIsLossless(name, params)) << name;
}

TEST(CodecFactsTest, EveryCodecsInstancesSayWhatItsFactsSay) {
  for (const std::string& name : CodecRegistry::Global().Names()) {
    ExpectInstanceAgrees(name, {});
  }
  // The facts that read parameters, on both sides of their condition.
  ExpectInstanceAgrees("blocksparse", {{"threshold", "0"}});
  ExpectInstanceAgrees("blocksparse", {{"threshold", "0.5"}});
  ExpectInstanceAgrees("threshold", {{"threshold", "0"}});
  ExpectInstanceAgrees("threshold", {{"threshold", "0.25"}});
  ExpectInstanceAgrees("randomk", {{"scale", "true"}});
}

TEST(CodecFactsTest, UnknownNamesHaveNoFacts) {
  EXPECT_EQ(CodecFactsOf("tpok"), nullptr);
  EXPECT_EQ(CodecFactsOf(""), nullptr);
  EXPECT_FALSE(CodecIsLossless("tpok", {}));
}

// The planner's former LossOf by name: none lossless, fp16 and bf16 rounding, randomk high even
// with a memory, every other codec compensated with a memory and high without.
TEST(CodecFactsTest, LossClassesAreThoseThePlannerUsedByName) {
  for (const std::string& name : CodecRegistry::Global().Names()) {
    const CodecLoss expected = name == "none"                     ? CodecLoss::kNone
                               : name == "fp16" || name == "bf16" ? CodecLoss::kRounding
                               : name == "randomk"                ? CodecLoss::kHigh
                                                                  : CodecLoss::kCompensable;
    EXPECT_EQ(FactsOf(name).loss, expected) << name;
  }
}

// blocksparse and threshold drop what is at or below their threshold: lossless at 0 only.
// blocksparse's default is 0, threshold's is not.
TEST(CodecFactsTest, LosslessAtThresholdZeroWithTheDefaultsFilledIn) {
  EXPECT_TRUE(CodecIsLossless("none", {}));
  EXPECT_TRUE(CodecIsLossless("blocksparse", {}));
  EXPECT_TRUE(CodecIsLossless("blocksparse", {{"threshold", "0"}, {"block", "64"}}));
  EXPECT_FALSE(CodecIsLossless("blocksparse", {{"threshold", "0.5"}}));
  EXPECT_FALSE(CodecIsLossless("threshold", {}));
  EXPECT_TRUE(CodecIsLossless("threshold", {{"threshold", "0"}}));
  EXPECT_TRUE(CodecIsLossless("threshold", {{"threshold", "0.0"}}));
  EXPECT_FALSE(CodecIsLossless("threshold", {{"threshold", "zero"}}));  // unreadable
  EXPECT_FALSE(CodecIsLossless("threshold", {{"threshold", "1e-3"}}));
  int lossless_by_params = 0;
  for (const std::string& name : CodecRegistry::Global().Names()) {
    if (FactsOf(name).lossless_when) ++lossless_by_params;
    if (name != "none" && name != "blocksparse") {
      EXPECT_FALSE(CodecIsLossless(name, {})) << name;
    }
  }
  EXPECT_EQ(lossless_by_params, 2);
}

TEST(CodecFactsTest, ExchangesSummedIndicesForArtopkBlockSparseForBlocksparse) {
  for (const std::string& name : CodecRegistry::Global().Names()) {
    const CodecExchange expected = name == "artopk"        ? CodecExchange::kSummedIndices
                                   : name == "blocksparse" ? CodecExchange::kBlockSparse
                                                           : CodecExchange::kPushPull;
    EXPECT_EQ(FactsOf(name).exchange, expected) << name;
  }
}

// topk and artopk keep the same elements for the same ratio; no other codec shares a selection.
TEST(CodecFactsTest, OnlyTopkAndArtopkShareASelection) {
  std::set<std::string> with_selection;
  for (const std::string& name : CodecRegistry::Global().Names()) {
    if (!FactsOf(name).selection.empty()) with_selection.insert(name);
  }
  EXPECT_EQ(with_selection, (std::set<std::string>{"artopk", "topk"}));
  EXPECT_EQ(FactsOf("topk").selection, FactsOf("artopk").selection);
}

TEST(CodecFactsTest, TwoRoundAreArtopkAndPowersgd) {
  std::set<std::string> two_round;
  for (const std::string& name : CodecRegistry::Global().Names()) {
    if (FactsOf(name).two_round) two_round.insert(name);
  }
  EXPECT_EQ(two_round, (std::set<std::string>{"artopk", "powersgd"}));
}

// The table gpu_codecs.h kept by hand before, now the facts (compress/cuda's registry checks
// its registrations against them: test/unit/compress_cuda).
TEST(CodecFactsTest, GpuKernelsAndTheMemoriesTheyFuse) {
  std::set<std::string> gpu;
  for (const std::string& name : CodecRegistry::Global().Names()) {
    const CodecFacts& facts = FactsOf(name);
    if (facts.gpu_kernel) gpu.insert(name);
    if (!facts.gpu_kernel) {
      EXPECT_TRUE(facts.gpu_memories.empty()) << name;
    }
    for (MemoryKind kind : facts.gpu_memories) {
      EXPECT_NE(kind, MemoryKind::kNone) << name << ": none is always fused";
    }
  }
  EXPECT_EQ(gpu, (std::set<std::string>{
                     "fp16",     "bf16",     "signsgd",   "efsignsgd", "signum",      "onebit",
                     "topk",     "randomk",  "threshold", "adaq",      "blocksparse", "qsgd",
                     "terngrad", "natural",  "dgc",       "u8bit",     "dithering",   "inceptionn",
                     "sketch",   "powersgd", "artopk"}));
  const std::vector<std::string> names = GpuCodecNames();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), gpu);
  EXPECT_EQ(FactsOf("efsignsgd").gpu_memories,
            (std::vector<MemoryKind>{MemoryKind::kResidual, MemoryKind::kEfSignSgd}));
  EXPECT_EQ(FactsOf("dgc").gpu_memories, (std::vector<MemoryKind>{MemoryKind::kDgcMomentum}));
  EXPECT_TRUE(FactsOf("signum").gpu_memories.empty());
  EXPECT_EQ(FactsOf("powersgd").gpu_memories, (std::vector<MemoryKind>{MemoryKind::kPowerSgd}));
  EXPECT_EQ(FactsOf("artopk").gpu_memories, (std::vector<MemoryKind>{MemoryKind::kResidual}));
}

TEST(CodecFactsTest, EveryMemoryHasItsOwnKind) {
  const MemoryRegistry& memories = MemoryRegistry::Global();
  EXPECT_EQ(memories.Find("none")->kind, MemoryKind::kNone);
  EXPECT_EQ(memories.Find("residual")->kind, MemoryKind::kResidual);
  EXPECT_EQ(memories.Find("dgc_momentum")->kind, MemoryKind::kDgcMomentum);
  EXPECT_EQ(memories.Find("efsignsgd")->kind, MemoryKind::kEfSignSgd);
  EXPECT_EQ(memories.Find("powersgd")->kind, MemoryKind::kPowerSgd);
  std::set<MemoryKind> kinds;
  for (const std::string& name : memories.Names()) kinds.insert(memories.Find(name)->kind);
  EXPECT_EQ(kinds.size(), memories.Names().size()) << "two memories of one kind";
}

// bytecomp-codec-bench's targets, as it kept them by name before.
TEST(CodecFactsTest, EncodeSpeedTargets) {
  const std::set<std::string> elementwise = {
      "fp16", "bf16",    "onebit", "signsgd",   "efsignsgd", "signum", "terngrad",
      "qsgd", "natural", "u8bit",  "dithering", "randomk",   "none"};
  const std::set<std::string> selection = {"topk", "dgc", "threshold"};
  for (const std::string& name : CodecRegistry::Global().Names()) {
    const EncodeSpeedTarget expected = elementwise.count(name) ? EncodeSpeedTarget::kElementwise
                                       : selection.count(name) ? EncodeSpeedTarget::kSelection
                                                               : EncodeSpeedTarget::kNone;
    EXPECT_EQ(FactsOf(name).encode_target, expected) << name;
  }
}

// The planner's union pull: what it writes it recognises, and it is a lossless sparse codec.
TEST(CodecFactsTest, TheSparseUnionPullIsALosslessSparseCodec) {
  const proto::CodecConfig pull = SparseUnionPullCodec();
  EXPECT_TRUE(IsSparseUnionPull(pull));
  EXPECT_TRUE(CodecIsLossless(pull.name(), ParamsOf(pull)));
  EXPECT_TRUE(FactsOf(pull.name()).sparse);
  EXPECT_TRUE(ValidateStrategy([&] {
                proto::Strategy s;
                proto::TensorStrategy* t = s.add_tensors();
                t->set_name_pattern("*");
                t->mutable_push_codec()->set_name("topk");
                *t->mutable_pull_codec() = pull;
                return s;
              }())
                  .ok());
  proto::CodecConfig other = pull;
  (*other.mutable_params())["threshold"] = "0.0";
  EXPECT_TRUE(IsSparseUnionPull(other));
  (*other.mutable_params())["threshold"] = "0.01";
  EXPECT_FALSE(IsSparseUnionPull(other));
  other.clear_params();  // threshold's default drops small values
  EXPECT_FALSE(IsSparseUnionPull(other));
  proto::CodecConfig blocks;
  blocks.set_name("blocksparse");
  (*blocks.mutable_params())["threshold"] = "0";
  EXPECT_FALSE(IsSparseUnionPull(blocks));  // lossless too, but answered in its own format
}

}  // namespace
}  // namespace bytecomp::compress
