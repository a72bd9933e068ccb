#include "bytecomp/compress/memory.h"

#include <cmath>

#include "absl/strings/match.h"
#include "codec_test_util.h"

namespace bytecomp::compress {
namespace {

using testing::MustCreate;
using testing::RandomNormal;
using testing::TestContext;

std::unique_ptr<Memory> MustCreateMemory(const std::string& name, const CodecParams& params = {}) {
  auto memory = CreateMemory(name, params);
  EXPECT_TRUE(memory.ok()) << memory.status();
  return memory.ok() ? std::move(*memory) : nullptr;
}

std::vector<std::vector<float>> Rounds(size_t n, int rounds, uint64_t seed) {
  std::vector<std::vector<float>> inputs;
  for (int t = 0; t < rounds; ++t) inputs.push_back(RandomNormal(n, seed + t));
  return inputs;
}

TEST(MemoryRegistryTest, NamesAndValidation) {
  for (const char* name : {"none", "residual", "dgc_momentum"}) {
    EXPECT_NE(MemoryRegistry::Global().Find(name), nullptr) << name;
  }
  auto bad = CreateMemory("resdual");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "residual, dgc_momentum")) << bad.status();
  bad = CreateMemory("dgc_momentum", {{"momentum", "1.0"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(
      absl::StrContains(bad.status().message(), "momentum (double, default 0.9, in [0, 1))"))
      << bad.status();
  bad = CreateMemory("residual", {{"lr", "0.1"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "beta (double, default 1.0"))
      << bad.status();
}

TEST(ResidualMemoryTest, ErrorFeedbackInvariantForEveryLossyCodec) {
  for (const char* codec_name : {"topk", "randomk", "threshold", "dgc", "adaq", "fp16", "bf16"}) {
    SCOPED_TRACE(codec_name);
    auto codec = MustCreate(codec_name);
    auto memory = MustCreateMemory("residual");
    testing::ExpectErrorFeedbackInvariant(*codec, *memory, Rounds(1000, 5, 40));
  }
}

TEST(ResidualMemoryTest, BetaAndGammaWeighTheTerms) {
  auto codec = MustCreate("topk", {{"ratio", "0.1"}});
  auto memory = MustCreateMemory("residual", {{"beta", "0.5"}, {"gamma", "2"}});
  const auto x0 = RandomNormal(100, 1), x1 = RandomNormal(100, 2);
  std::vector<float> comp, dec;
  std::vector<uint8_t> out(codec->MaxEncodedBytes(100));
  ASSERT_TRUE(
      EncodeWithMemory(*codec, memory.get(), x0, TestContext(0), absl::MakeSpan(out), comp, dec)
          .ok());
  const auto comp0 = comp, dec0 = dec;
  for (size_t i = 0; i < 100; ++i) EXPECT_FLOAT_EQ(comp0[i], 2 * x0[i]);
  ASSERT_TRUE(
      EncodeWithMemory(*codec, memory.get(), x1, TestContext(1), absl::MakeSpan(out), comp, dec)
          .ok());
  for (size_t i = 0; i < 100; ++i) {
    EXPECT_FLOAT_EQ(comp[i], 0.5f * (comp0[i] - dec0[i]) + 2 * x1[i]) << i;
  }
}

TEST(ResidualMemoryTest, SizeChangeIsAnErrorAndResetClears) {
  auto memory = MustCreateMemory("residual");
  std::vector<float> x(10, 1.0f), c(10), d(10, 0.0f);
  ASSERT_TRUE(memory->Compensate(x, TestContext(), absl::MakeSpan(c)).ok());
  ASSERT_TRUE(memory->Update(c, d, TestContext()).ok());
  std::vector<float> x2(11, 1.0f), c2(11);
  EXPECT_EQ(memory->Compensate(x2, TestContext(), absl::MakeSpan(c2)).code(),
            absl::StatusCode::kInvalidArgument);
  memory->Reset();
  ASSERT_TRUE(memory->Compensate(x2, TestContext(), absl::MakeSpan(c2)).ok());
  EXPECT_EQ(c2, x2);
}

// Reference DGC momentum correction, straight from the definition.
TEST(DgcMomentumMemoryTest, MatchesTheReferenceAndMasksSentCoordinates) {
  const size_t n = 2000;
  auto codec = MustCreate("dgc", {{"ratio", "0.05"}});
  auto memory = MustCreateMemory("dgc_momentum", {{"momentum", "0.9"}});
  std::vector<double> u(n, 0.0), v(n, 0.0);
  std::vector<float> comp, dec;
  std::vector<uint8_t> out(codec->MaxEncodedBytes(n));
  for (int t = 0; t < 6; ++t) {
    const auto x = RandomNormal(n, 60 + t);
    auto bytes =
        EncodeWithMemory(*codec, memory.get(), x, TestContext(t), absl::MakeSpan(out), comp, dec);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    size_t sent = 0;
    for (size_t i = 0; i < n; ++i) {
      u[i] = 0.9 * u[i] + x[i];
      v[i] += u[i];
      ASSERT_NEAR(comp[i], v[i], 1e-4 * (1 + std::fabs(v[i]))) << "round " << t << " element " << i;
      if (dec[i] != 0.0f) {
        EXPECT_EQ(dec[i], comp[i]);  // dgc sends the compensated value itself
        u[i] = v[i] = 0.0;
        ++sent;
      }
    }
    EXPECT_GT(sent, 0u);
    EXPECT_LT(sent, n / 5);
  }
  // Sent coordinates start from zero: compensating a zero input gives exactly 0 there.
  const std::vector<float> zeros(n, 0.0f);
  std::vector<float> c(n);
  ASSERT_TRUE(memory->Compensate(zeros, TestContext(), absl::MakeSpan(c)).ok());
  for (size_t i = 0; i < n; ++i) {
    if (dec[i] != 0.0f) {
      EXPECT_EQ(c[i], 0.0f) << i;
    }
  }
}

TEST(DgcMomentumMemoryTest, FailedEncodeLeavesTheStateAsItWas) {
  auto codec = MustCreate("topk");
  auto memory = MustCreateMemory("dgc_momentum");
  std::vector<float> comp, dec;
  std::vector<uint8_t> out(codec->MaxEncodedBytes(50));
  const auto x = RandomNormal(50, 3);
  ASSERT_TRUE(
      EncodeWithMemory(*codec, memory.get(), x, TestContext(0), absl::MakeSpan(out), comp, dec)
          .ok());
  std::vector<float> probe_before(50), zeros(50, 0.0f);
  ASSERT_TRUE(memory->Compensate(zeros, TestContext(), absl::MakeSpan(probe_before)).ok());
  auto bad = x;
  bad[7] = NAN;
  EXPECT_FALSE(
      EncodeWithMemory(*codec, memory.get(), bad, TestContext(1), absl::MakeSpan(out), comp, dec)
          .ok());
  std::vector<float> probe_after(50);
  ASSERT_TRUE(memory->Compensate(zeros, TestContext(), absl::MakeSpan(probe_after)).ok());
  EXPECT_EQ(probe_before, probe_after);
}

TEST(NoMemoryTest, PassesInputThroughWithoutDecoding) {
  auto memory = MustCreateMemory("none");
  EXPECT_FALSE(memory->needs_decoded());
  auto codec = MustCreate("fp16");
  const auto x = RandomNormal(33, 1);
  std::vector<float> comp, dec;
  std::vector<uint8_t> out(codec->MaxEncodedBytes(33));
  ASSERT_TRUE(
      EncodeWithMemory(*codec, memory.get(), x, TestContext(), absl::MakeSpan(out), comp, dec)
          .ok());
  EXPECT_EQ(comp, x);
  EXPECT_TRUE(dec.empty());
}

}  // namespace
}  // namespace bytecomp::compress
