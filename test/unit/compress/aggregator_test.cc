#include "bytecomp/compress/aggregator.h"

#include "absl/strings/match.h"
#include "codec_test_util.h"

namespace bytecomp::compress {
namespace {

using testing::EncodeToVector;
using testing::MustCreate;
using testing::RandomNormal;
using testing::TestContext;

constexpr int kWorkers = 4;

struct Pushes {
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<CodecContext> contexts;
  std::vector<float> reference;  // the sum of the locally decoded payloads
};

Pushes MakePushes(const std::string& name, size_t n, uint64_t round) {
  Pushes p;
  p.reference.assign(n, 0.0f);
  auto codec = MustCreate(name);
  for (uint32_t w = 0; w < kWorkers; ++w) {
    const CodecContext ctx = TestContext(round, w);
    auto enc = EncodeToVector(*codec, RandomNormal(n, 1000 * round + w), ctx);
    EXPECT_TRUE(enc.ok()) << name << ": " << enc.status();
    auto dec = testing::DecodeToVector(*codec, *enc, ctx, n);
    EXPECT_TRUE(dec.ok());
    for (size_t i = 0; i < n; ++i) p.reference[i] += (*dec)[i];
    p.payloads.push_back(*enc);
    p.contexts.push_back(ctx);
  }
  return p;
}

TEST(AggregatorTest, FactoryPicksTheCheapestCorrectKind) {
  auto kind = [](const std::string& name, const CodecParams& params = {}) {
    auto agg = CreateAggregator(name, params);
    EXPECT_TRUE(agg.ok()) << agg.status();
    return agg.ok() ? std::string((*agg)->name()) : std::string();
  };
  EXPECT_EQ(kind("randomk"), "summed_values");
  EXPECT_EQ(kind("fp16"), "summed_values");
  EXPECT_EQ(kind("bf16"), "summed_values");
  EXPECT_EQ(kind("none"), "summed_values");
  EXPECT_EQ(kind("topk"), "sparse_add");
  EXPECT_EQ(kind("threshold"), "sparse_add");
  EXPECT_EQ(kind("dgc"), "sparse_add");
  EXPECT_EQ(kind("adaq"), "sparse_add");
  EXPECT_EQ(kind("blocksparse"), "block_sparse");
  EXPECT_FALSE(CreateAggregator("nope").ok());
}

// Every registered codec whose aggregate is a sum: the aggregator equals the local sum of the
// decoded payloads, over two rounds with the same aggregator.
TEST(AggregatorTest, EveryCodecEqualsTheLocallyDecodedSum) {
  for (const auto& name : CodecRegistry::Global().Names()) {
    auto probe = MustCreate(name);
    if (probe->properties().majority_vote || probe->properties().two_round) continue;  // own tests
    auto agg = CreateAggregator(name);
    ASSERT_TRUE(agg.ok()) << name << ": " << agg.status();
    for (uint64_t round : {1, 2}) {
      const size_t n = 3001;
      const Pushes p = MakePushes(name, n, round);
      (*agg)->Reset(n);
      for (int w = 0; w < kWorkers; ++w) {
        ASSERT_TRUE((*agg)->Add(p.payloads[w], p.contexts[w]).ok()) << name;
      }
      EXPECT_EQ((*agg)->count(), static_cast<size_t>(kWorkers));
      auto sum = (*agg)->Finish();
      ASSERT_TRUE(sum.ok()) << sum.status();
      ASSERT_EQ(sum->size(), n);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_NEAR((*sum)[i], p.reference[i], 1e-5f * (1 + std::fabs(p.reference[i])))
            << name << " round " << round << " element " << i;
      }
    }
  }
}

TEST(AggregatorTest, BadPayloadLeavesTheSumAndWrongRoundIsRejected) {
  for (const char* name : {"randomk", "topk", "fp16", "adaq"}) {
    auto agg = CreateAggregator(name);
    ASSERT_TRUE(agg.ok());
    const size_t n = 500;
    const Pushes p = MakePushes(name, n, 5);
    (*agg)->Reset(n);
    ASSERT_TRUE((*agg)->Add(p.payloads[0], p.contexts[0]).ok());
    auto truncated = p.payloads[1];
    truncated.pop_back();
    EXPECT_EQ((*agg)->Add(truncated, p.contexts[1]).code(), absl::StatusCode::kInvalidArgument);
    CodecContext other_round = p.contexts[1];
    other_round.round = 6;
    auto s = (*agg)->Add(p.payloads[1], other_round);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_TRUE(absl::StrContains(s.message(), "round 6")) << s;
    for (int w = 1; w < kWorkers; ++w) ASSERT_TRUE((*agg)->Add(p.payloads[w], p.contexts[w]).ok());
    auto sum = (*agg)->Finish();
    ASSERT_TRUE(sum.ok());
    for (size_t i = 0; i < n; ++i) {
      ASSERT_NEAR((*sum)[i], p.reference[i], 1e-5f * (1 + std::fabs(p.reference[i]))) << name;
    }
  }
}

TEST(AggregatorTest, NoPushesGivesZerosAndFinishBeforeResetFails) {
  auto agg = CreateAggregator("randomk");
  ASSERT_TRUE(agg.ok());
  EXPECT_EQ((*agg)->Finish().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE((*agg)->Add({}, TestContext()).ok());
  (*agg)->Reset(10);
  auto sum = (*agg)->Finish();
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(std::vector<float>(sum->begin(), sum->end()), std::vector<float>(10, 0.0f));
}

}  // namespace
}  // namespace bytecomp::compress
