// signsgd, efsignsgd, signum, onebit and the majority-vote aggregator.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "absl/strings/match.h"
#include "codec_test_util.h"

namespace bytecomp::compress {
namespace {

using testing::AdversarialInputs;
using testing::DecodeToVector;
using testing::EncodeToVector;
using testing::MustCreate;
using testing::RandomNormal;
using testing::TestContext;

size_t SignBytesFor(size_t n) { return (n + 7) / 8; }

float SignOf(float x) { return x < 0.0f ? -1.0f : 1.0f; }

TEST(SignSgdTest, DecodesToSignsAndSizeIsCeilNOver8) {
  auto codec = MustCreate("signsgd");
  ASSERT_TRUE(codec->properties().majority_vote);
  for (const auto& in : AdversarialInputs()) {
    auto enc = EncodeToVector(*codec, in.values, TestContext());
    ASSERT_TRUE(enc.ok()) << in.name << ": " << enc.status();
    EXPECT_EQ(enc->size(), 4 + SignBytesFor(in.values.size())) << in.name;
    EXPECT_EQ(codec->MaxEncodedBytes(in.values.size()), enc->size());
    auto dec = DecodeToVector(*codec, *enc, TestContext(), in.values.size());
    ASSERT_TRUE(dec.ok()) << dec.status();
    for (size_t i = 0; i < in.values.size(); ++i) {
      ASSERT_EQ((*dec)[i], SignOf(in.values[i])) << in.name << " element " << i;
    }
  }
}

TEST(SignSgdTest, BitLayoutIsLsbFirstAndZeroCountsAsPositive) {
  auto codec = MustCreate("signsgd");
  std::vector<float> x = {-1, 2, -0.0f, 0, -3, -4, 5, 6, -7, 1};
  auto enc = EncodeToVector(*codec, x, TestContext());
  ASSERT_TRUE(enc.ok());
  ASSERT_EQ(enc->size(), 6u);
  EXPECT_EQ((*enc)[0], 10);          // u32 n, little-endian
  EXPECT_EQ((*enc)[4], 0b00110001);  // elements 0, 4, 5 negative; -0.0 is not
  EXPECT_EQ((*enc)[5], 0b00000001);  // element 8
}

TEST(SignSgdTest, LongInputsMatchScalarReference) {
  // Exercises the vectorised pack and unpack paths (blocks of 32 and 8) and their tails.
  auto codec = MustCreate("signsgd");
  for (size_t n : {32u, 64u, 95u, 1000u, 4133u}) {
    auto x = RandomNormal(n, n);
    auto enc = EncodeToVector(*codec, x, TestContext());
    ASSERT_TRUE(enc.ok());
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(((*enc)[4 + i / 8] >> (i % 8)) & 1, x[i] < 0 ? 1 : 0) << "n=" << n << " i=" << i;
    }
    std::vector<float> acc(n, 10.0f);
    ASSERT_TRUE(codec->DecodeAdd(*enc, TestContext(), absl::MakeSpan(acc)).ok());
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(acc[i], 10.0f + SignOf(x[i]));
  }
}

TEST(EfSignSgdTest, DecodesToMeanMagnitudeTimesSign) {
  auto codec = MustCreate("efsignsgd");
  for (const auto& in : AdversarialInputs()) {
    auto enc = EncodeToVector(*codec, in.values, TestContext());
    ASSERT_TRUE(enc.ok()) << in.name << ": " << enc.status();
    EXPECT_EQ(enc->size(), 8 + SignBytesFor(in.values.size())) << in.name;
    double sum_abs = 0;
    for (float x : in.values) sum_abs += std::fabs(static_cast<double>(x));
    const double mean = sum_abs / in.values.size();
    auto dec = DecodeToVector(*codec, *enc, TestContext(), in.values.size());
    ASSERT_TRUE(dec.ok()) << dec.status();
    for (size_t i = 0; i < in.values.size(); ++i) {
      ASSERT_NEAR((*dec)[i], SignOf(in.values[i]) * mean, mean * 1e-6) << in.name << " " << i;
    }
  }
}

TEST(SignumTest, SignsOfMomentumSmoothedGradient) {
  auto codec = MustCreate("signum", {{"momentum", "0.5"}});
  ASSERT_TRUE(codec->properties().stateful);
  std::vector<float> g1 = {1, -1, 2, -2, 0.5f};
  std::vector<float> g2 = {-3, 3, -1, 1, -0.4f};
  // m1 = g1 (first round); m2 = 0.5 g2 + 0.5 m1 = {-1, 1, 0.5, -0.5, 0.05}.
  auto e1 = EncodeToVector(*codec, g1, TestContext(0));
  auto e2 = EncodeToVector(*codec, g2, TestContext(1));
  ASSERT_TRUE(e1.ok() && e2.ok());
  auto d1 = DecodeToVector(*codec, *e1, TestContext(0), 5);
  auto d2 = DecodeToVector(*codec, *e2, TestContext(1), 5);
  ASSERT_TRUE(d1.ok() && d2.ok());
  EXPECT_EQ(*d1, (std::vector<float>{1, -1, 1, -1, 1}));
  EXPECT_EQ(*d2, (std::vector<float>{-1, 1, 1, -1, 1}));
  // Another length restarts the momentum (a new partition layout).
  auto e3 = EncodeToVector(*codec, std::vector<float>{-1, 2, 3, 4, 5, 6}, TestContext(2));
  ASSERT_TRUE(e3.ok());
  auto d3 = DecodeToVector(*codec, *e3, TestContext(2), 6);
  ASSERT_TRUE(d3.ok());
  EXPECT_EQ(*d3, (std::vector<float>{-1, 1, 1, 1, 1, 1}));
}

TEST(SignumTest, RejectedInputLeavesTheMomentumUnchanged) {
  auto a = MustCreate("signum", {{"momentum", "0.5"}});
  auto b = MustCreate("signum", {{"momentum", "0.5"}});
  const auto g1 = RandomNormal(5000, 1), g2 = RandomNormal(5000, 2);
  auto bad = g2;
  bad[4321] = std::numeric_limits<float>::infinity();
  ASSERT_TRUE(EncodeToVector(*a, g1, TestContext(0)).ok());
  ASSERT_TRUE(EncodeToVector(*b, g1, TestContext(0)).ok());
  auto rejected = EncodeToVector(*a, bad, TestContext(1));
  ASSERT_FALSE(rejected.ok());
  EXPECT_TRUE(absl::StrContains(rejected.status().message(), "4321")) << rejected.status();
  auto ea = EncodeToVector(*a, g2, TestContext(1));
  auto eb = EncodeToVector(*b, g2, TestContext(1));
  ASSERT_TRUE(ea.ok() && eb.ok());
  EXPECT_EQ(*ea, *eb);
}

TEST(SignumTest, DefaultMomentumIs09AndOutOfRangeIsRejected) {
  const CodecSpec* spec = CodecRegistry::Global().Find("signum");
  ASSERT_NE(spec, nullptr);
  ASSERT_EQ(spec->params.size(), 1u);
  EXPECT_EQ(spec->params[0].default_value, "0.9");
  auto bad = CreateCodec("signum", {{"momentum", "1.5"}});
  EXPECT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "momentum")) << bad.status();
}

TEST(OnebitTest, MeansOfTheTwoPartsL1AndNone) {
  std::vector<float> x = {1, 3, -2, -4, 0, -6, 8};
  // non-negative: 1, 3, 0, 8 -> mean 3; negative: -2, -4, -6 -> mean -4; mean |x| = 24/7.
  struct Case {
    std::string scaling;
    float positive, negative;
  };
  for (const Case& c :
       {Case{"means", 3.0f, -4.0f}, Case{"l1", 24.0f / 7, -24.0f / 7}, Case{"none", 1.0f, -1.0f}}) {
    auto codec = MustCreate("onebit", {{"scaling", c.scaling}});
    auto enc = EncodeToVector(*codec, x, TestContext());
    ASSERT_TRUE(enc.ok());
    EXPECT_EQ(enc->size(), 12u + 1u);
    auto dec = DecodeToVector(*codec, *enc, TestContext(), x.size());
    ASSERT_TRUE(dec.ok());
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_FLOAT_EQ((*dec)[i], x[i] < 0 ? c.negative : c.positive) << c.scaling << " " << i;
    }
  }
  auto bad = CreateCodec("onebit", {{"scaling", "median"}});
  EXPECT_FALSE(bad.ok());
}

TEST(OnebitTest, AdversarialInputsKeepSumsAndSizes) {
  // With scaling=means, decoding preserves the sum of each sign's part, hence the total.
  auto codec = MustCreate("onebit");
  for (const auto& in : AdversarialInputs()) {
    auto enc = EncodeToVector(*codec, in.values, TestContext());
    ASSERT_TRUE(enc.ok()) << in.name;
    EXPECT_EQ(enc->size(), 12 + SignBytesFor(in.values.size()));
    auto dec = DecodeToVector(*codec, *enc, TestContext(), in.values.size());
    ASSERT_TRUE(dec.ok()) << dec.status();
    double sum_in = 0, sum_out = 0, scale = 0;
    for (size_t i = 0; i < in.values.size(); ++i) {
      sum_in += in.values[i];
      sum_out += (*dec)[i];
      scale += std::fabs(in.values[i]);
      ASSERT_EQ((*dec)[i] < 0, in.values[i] < 0) << in.name << " " << i;
    }
    EXPECT_NEAR(sum_out, sum_in, scale * 1e-6 + 1e-35) << in.name;
  }
}

TEST(SignCodecsTest, MalformedPayloadsAreErrors) {
  const size_t n = 13;  // 2 bytes of signs, 3 padding bits
  for (const char* name : {"signsgd", "efsignsgd", "signum", "onebit"}) {
    auto codec = MustCreate(name);
    auto enc = EncodeToVector(*codec, RandomNormal(n, 9), TestContext());
    ASSERT_TRUE(enc.ok());
    std::vector<float> out(n);
    // Wrong sizes.
    for (size_t size : {size_t{0}, enc->size() - 1, enc->size() + 1}) {
      std::vector<uint8_t> b(size, 0);
      EXPECT_EQ(codec->Decode(b, TestContext(), absl::MakeSpan(out)).code(),
                absl::StatusCode::kInvalidArgument)
          << name << " size " << size;
    }
    // Padding bits set.
    auto padded = *enc;
    padded.back() |= 0x80;
    auto st = codec->Decode(padded, TestContext(), absl::MakeSpan(out));
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_TRUE(absl::StrContains(st.message(), "padding")) << st;
    // DecodeAdd validates before adding: the accumulator is untouched.
    std::vector<float> acc(n, 5.0f);
    EXPECT_FALSE(codec->DecodeAdd(padded, TestContext(), absl::MakeSpan(acc)).ok());
    EXPECT_EQ(acc, std::vector<float>(n, 5.0f)) << name;
  }
  // Non-finite or negative header values.
  for (const char* name : {"efsignsgd", "onebit"}) {
    auto codec = MustCreate(name);
    auto enc = EncodeToVector(*codec, RandomNormal(n, 9), TestContext());
    ASSERT_TRUE(enc.ok());
    std::vector<float> out(n);
    for (float header :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -1.0f}) {
      auto b = *enc;
      std::memcpy(b.data() + 4, &header, 4);
      EXPECT_EQ(codec->Decode(b, TestContext(), absl::MakeSpan(out)).code(),
                absl::StatusCode::kInvalidArgument)
          << name << " header " << header;
    }
  }
  // onebit's second value must be <= 0.
  auto onebit = MustCreate("onebit");
  auto enc = EncodeToVector(*onebit, RandomNormal(n, 9), TestContext());
  ASSERT_TRUE(enc.ok());
  const float positive = 2.0f;
  std::memcpy(enc->data() + 8, &positive, 4);
  std::vector<float> out(n);
  EXPECT_FALSE(onebit->Decode(*enc, TestContext(), absl::MakeSpan(out)).ok());
}

TEST(SignCodecsTest, RandomBytesNeverCrash) {
  std::mt19937 gen(3);
  for (const char* name : {"signsgd", "efsignsgd", "signum", "onebit"}) {
    auto codec = MustCreate(name);
    for (int t = 0; t < 200; ++t) {
      const size_t n = 1 + gen() % 70;
      const size_t size = gen() % 2 ? codec->MaxEncodedBytes(n) : gen() % 20;
      std::vector<uint8_t> b(size);
      for (auto& v : b) v = static_cast<uint8_t>(gen());
      std::vector<float> out(n);
      auto st = codec->Decode(b, TestContext(), absl::MakeSpan(out));
      if (st.ok()) {
        for (float v : out) ASSERT_TRUE(std::isfinite(v)) << name;
      } else {
        EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
      }
    }
  }
}

TEST(EfSignSgdMemoryTest, ErrorFeedbackInvariant) {
  auto codec = MustCreate("efsignsgd");
  auto memory = CreateMemory("efsignsgd");
  ASSERT_TRUE(memory.ok()) << memory.status();
  std::vector<std::vector<float>> inputs;
  for (int t = 0; t < 6; ++t) inputs.push_back(RandomNormal(301, 100 + t));
  testing::ExpectErrorFeedbackInvariant(*codec, **memory, inputs);
}

TEST(EfSignSgdMemoryTest, ResidualIsKeptInLearningRateUnits) {
  auto codec = MustCreate("efsignsgd");
  auto memory = CreateMemory("efsignsgd", {{"lr", "0.5"}});
  ASSERT_TRUE(memory.ok()) << memory.status();
  std::vector<float> x = {1.0f, -3.0f, 0.5f};
  std::vector<float> compensated, decoded;
  CodecContext ctx = TestContext(0);
  ctx.learning_rate = 0;  // use the lr parameter, 0.5
  std::vector<uint8_t> out(codec->MaxEncodedBytes(3));
  ASSERT_TRUE(
      EncodeWithMemory(*codec, memory->get(), x, ctx, absl::MakeSpan(out), compensated, decoded)
          .ok());
  EXPECT_EQ(compensated, x);  // no residual yet
  // decoded = mean |x| * sign = 1.5 * {1, -1, 1}; e = 0.5 * (x - decoded) = {-0.25, -0.75, -0.5}.
  ctx.round = 1;
  ctx.learning_rate = 0.25f;  // the context's lr overrides: compensated = g + e / 0.25
  std::vector<float> zeros(3, 0.0f);
  ASSERT_TRUE(
      EncodeWithMemory(*codec, memory->get(), zeros, ctx, absl::MakeSpan(out), compensated, decoded)
          .ok());
  EXPECT_EQ(compensated, (std::vector<float>{-1.0f, -3.0f, -2.0f}));
  // Another length is an error; Reset drops the state.
  std::vector<float> four(4, 1.0f);
  EXPECT_FALSE(
      EncodeWithMemory(*codec, memory->get(), four, ctx, absl::MakeSpan(out), compensated, decoded)
          .ok());
  (*memory)->Reset();
  out.resize(codec->MaxEncodedBytes(4));
  ASSERT_TRUE(
      EncodeWithMemory(*codec, memory->get(), four, ctx, absl::MakeSpan(out), compensated, decoded)
          .ok());
  EXPECT_EQ(compensated, four);
  EXPECT_FALSE(CreateMemory("efsignsgd", {{"lr", "0"}}).ok());
}

std::unique_ptr<Aggregator> MajorityAggregator(const std::string& name) {
  const CodecSpec* spec = CodecRegistry::Global().Find(name);
  EXPECT_NE(spec, nullptr);
  EXPECT_TRUE(spec->aggregator_factory != nullptr) << name;
  auto agg = spec->aggregator_factory(MustCreate(name));
  EXPECT_TRUE(agg.ok()) << agg.status();
  return std::move(*agg);
}

TEST(MajorityVoteTest, SignOfTheVoteTimesCountTiesPositive) {
  for (const char* name : {"signsgd", "signum"}) {
    auto agg = MajorityAggregator(name);
    EXPECT_EQ(agg->name(), "majority_vote");
    const size_t n = 11;
    agg->Reset(n);
    // Element i: worker w votes negative when bit (i >> w) is set.
    for (uint32_t w = 0; w < 3; ++w) {
      std::vector<float> x(n);
      for (size_t i = 0; i < n; ++i) x[i] = ((i >> w) & 1) ? -1.0f : 1.0f;
      auto codec = MustCreate(name);
      auto enc = EncodeToVector(*codec, x, TestContext(7, w));
      ASSERT_TRUE(enc.ok());
      ASSERT_TRUE(agg->Add(*enc, TestContext(7, w)).ok());
    }
    EXPECT_EQ(agg->count(), 3u);
    auto sum = agg->Finish();
    ASSERT_TRUE(sum.ok());
    for (size_t i = 0; i < n; ++i) {
      const int negatives = ((i >> 0) & 1) + ((i >> 1) & 1) + ((i >> 2) & 1);
      EXPECT_EQ((*sum)[i], negatives >= 2 ? -3.0f : 3.0f) << name << " " << i;
    }
    // Two workers, a tie: +1 (GRACE's sum >= 0).
    agg->Reset(1);
    auto codec = MustCreate(name);
    ASSERT_TRUE(
        agg->Add(*EncodeToVector(*codec, std::vector<float>{-1}, TestContext()), TestContext())
            .ok());
    auto codec2 = MustCreate(name);
    ASSERT_TRUE(
        agg->Add(*EncodeToVector(*codec2, std::vector<float>{1}, TestContext()), TestContext(7, 1))
            .ok());
    EXPECT_EQ((*agg->Finish())[0], 2.0f);
  }
}

TEST(MajorityVoteTest, BadPayloadOrOtherRoundChangesNothing) {
  auto agg = MajorityAggregator("signsgd");
  const size_t n = 9;
  agg->Reset(n);
  auto codec = MustCreate("signsgd");
  std::vector<float> x(n, -1.0f);
  auto enc = EncodeToVector(*codec, x, TestContext());
  ASSERT_TRUE(agg->Add(*enc, TestContext()).ok());
  EXPECT_FALSE(agg->Add(std::vector<uint8_t>(5, 0), TestContext()).ok());  // wrong size
  EXPECT_FALSE(agg->Add(*enc, TestContext(/*round=*/8)).ok());             // other round
  EXPECT_EQ(agg->count(), 1u);
  auto sum = agg->Finish();
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(std::vector<float>(sum->begin(), sum->end()), std::vector<float>(n, -1.0f));
  agg->Reset(n);
  EXPECT_EQ(std::vector<float>(agg->Finish()->begin(), agg->Finish()->end()),
            std::vector<float>(n, 0.0f));
}

}  // namespace
}  // namespace bytecomp::compress
