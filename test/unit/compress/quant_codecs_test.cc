// qsgd, terngrad, natural, u8bit, dithering: sizes, error bounds, unbiasedness, determinism,
// non-finite input, malformed payloads.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include "absl/strings/match.h"
#include "bytecomp/compress/elementwise.h"
#include "codec_test_util.h"

namespace bytecomp::compress {
namespace {

using testing::AdversarialInputs;
using testing::DecodeToVector;
using testing::EncodeToVector;
using testing::ExpectUnbiased;
using testing::MustCreate;
using testing::RandomNormal;
using testing::RoundTrip;
using testing::TestContext;

std::vector<float> RandomUniform(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

double MaxAbsOf(absl::Span<const float> x) {
  double m = 0;
  for (float v : x) m = std::max(m, std::fabs(static_cast<double>(v)));
  return m;
}

double L2Of(absl::Span<const float> x) {
  double s = 0;
  for (float v : x) s += static_cast<double>(v) * v;
  return std::sqrt(s);
}

size_t BitsFor(uint32_t max_value) {
  size_t b = 1;
  while ((max_value >> b) != 0) ++b;
  return b;
}

// ExpectUnbiased flags an element whose samples never vary and whose mean differs from x. An
// element whose rounding fraction f is tiny (or near 1) rounds the same way in all trials with
// probability (1 - f)^trials, although the codec is unbiased. Inputs for the unbiasedness
// tests are therefore nudged until every fraction is in [0.1, 0.9] (or exactly 0): `nudge`
// returns element i's replacement for the current x (x[i] itself when its fraction is fine).
void NudgeFractions(std::vector<float>& x,
                    const std::function<float(const std::vector<float>&, size_t)>& nudge) {
  for (int iteration = 0; iteration < 200; ++iteration) {
    bool changed = false;
    for (size_t i = 0; i < x.size(); ++i) {
      const float y = nudge(x, i);
      if (y != x[i]) {
        x[i] = y;
        changed = true;
      }
    }
    if (!changed) return;
  }
  FAIL() << "nudging the input did not converge";
}

// Linear levels of unit norm/s: moves |x| to the middle of its level when the fraction is off.
float NudgeLinear(float x, double unit) {
  if (x == 0.0f || unit == 0.0) return x;
  const double level = std::fabs(x) / unit;
  const double f = level - std::floor(level);
  if (f == 0.0 || (f >= 0.1 && f <= 0.9)) return x;
  return static_cast<float>(std::copysign((std::floor(level) + 0.5) * unit, x));
}

std::function<float(const std::vector<float>&, size_t)> QsgdNudge(int s, size_t bucket) {
  return [=](const std::vector<float>& x, size_t i) {
    const size_t begin = i / bucket * bucket, len = std::min(bucket, x.size() - begin);
    const double norm = L2Of(absl::MakeConstSpan(x).subspan(begin, len));
    return NudgeLinear(x[i], norm / s);
  };
}

std::function<float(const std::vector<float>&, size_t)> DitherNudge(int k, bool natural, bool l2) {
  return [=](const std::vector<float>& x, size_t i) {
    const double norm = l2 ? L2Of(x) : MaxAbsOf(x);
    if (!natural) return NudgeLinear(x[i], norm / k);
    if (x[i] == 0.0f || norm == 0.0) return x[i];
    const double v = std::fabs(x[i]) / norm;
    const double smallest = std::ldexp(1.0, 1 - k);
    if (v < smallest) return NudgeLinear(x[i], smallest * norm);
    int e;
    const double m = 2 * std::frexp(v, &e) - 1;  // v = (1 + m) 2^(e-1)
    if (m == 0.0 || (m >= 0.1 && m <= 0.9)) return x[i];
    return static_cast<float>(std::copysign(1.5 * std::ldexp(1.0, e - 1) * norm, x[i]));
  };
}

// ---- qsgd ----

size_t QsgdSize(size_t n, size_t s, size_t bucket) {
  return 4 + 4 * ((n + bucket - 1) / bucket) + (n * (BitsFor(s) + 1) + 7) / 8;
}

TEST(QsgdTest, SizeFormulaAndErrorWithinOneLevelOfTheBucketNorm) {
  for (auto [s, bucket] : {std::pair<int, int>{127, 128}, {7, 10}, {1, 3}, {1000, 64}}) {
    auto codec = MustCreate(
        "qsgd", {{"quantum_num", std::to_string(s)}, {"bucket_size", std::to_string(bucket)}});
    ASSERT_TRUE(codec->properties().unbiased);
    for (const auto& in : AdversarialInputs()) {
      const size_t n = in.values.size();
      auto enc = EncodeToVector(*codec, in.values, TestContext());
      ASSERT_TRUE(enc.ok()) << in.name << ": " << enc.status();
      ASSERT_EQ(enc->size(), QsgdSize(n, s, bucket)) << in.name << " s=" << s;
      auto dec = DecodeToVector(*codec, *enc, TestContext(), n);
      ASSERT_TRUE(dec.ok()) << dec.status();
      for (size_t b = 0; b * bucket < n; ++b) {
        const size_t begin = b * bucket, len = std::min<size_t>(bucket, n - begin);
        const double norm = L2Of(absl::MakeConstSpan(in.values).subspan(begin, len));
        for (size_t i = begin; i < begin + len; ++i) {
          ASSERT_LE(std::fabs((*dec)[i] - in.values[i]), norm / s * (1 + 1e-5) + 1e-37)
              << in.name << " s=" << s << " element " << i;
        }
      }
    }
  }
}

TEST(QsgdTest, DefaultsAre127LevelsAndBucket128OneBytePerElement) {
  auto codec = MustCreate("qsgd");
  EXPECT_EQ(codec->MaxEncodedBytes(1000), 4 + 4 * 8 + 1000u);
}

TEST(QsgdTest, NormsNearTheFloatMaximumDecodeFinite) {
  // 25 levels: 25 * (FLT_MAX / 25) rounds to inf, (25 / 25) * FLT_MAX does not.
  for (const char* s : {"25", "127"}) {
    auto codec = MustCreate("qsgd", {{"quantum_num", s}, {"bucket_size", "4"}});
    std::vector<float> x = {3e38f, -3e38f, 1e38f, 0.0f};
    auto dec = RoundTrip(*codec, x, TestContext());
    ASSERT_TRUE(dec.ok()) << dec.status();
    for (float v : *dec) EXPECT_TRUE(std::isfinite(v)) << v;
  }
}

TEST(QsgdTest, UnbiasedOverSeeds) {
  auto codec = MustCreate("qsgd", {{"quantum_num", "4"}});
  auto x = RandomNormal(300, 11);
  NudgeFractions(x, QsgdNudge(4, 128));
  ExpectUnbiased(*codec, x, 400, [](int t) { return TestContext(t); });
}

// ---- terngrad ----

TEST(TernGradTest, SizeValuesAndScale) {
  auto codec = MustCreate("terngrad");
  for (const auto& in : AdversarialInputs()) {
    const size_t n = in.values.size();
    auto enc = EncodeToVector(*codec, in.values, TestContext());
    ASSERT_TRUE(enc.ok()) << in.name << ": " << enc.status();
    ASSERT_EQ(enc->size(), 8 + (n + 3) / 4) << in.name;
    double sum_sq = 0;
    for (float v : in.values) sum_sq += static_cast<double>(v) * v;
    const double clip = 2.5 * std::sqrt(sum_sq / n);
    const double scale = std::min(MaxAbsOf(in.values), clip);
    float header;
    std::memcpy(&header, enc->data() + 4, 4);
    EXPECT_NEAR(header, scale, scale * 1e-6) << in.name;
    auto dec = DecodeToVector(*codec, *enc, TestContext(), n);
    ASSERT_TRUE(dec.ok()) << dec.status();
    for (size_t i = 0; i < n; ++i) {
      const float y = (*dec)[i];
      ASSERT_TRUE(y == 0.0f || y == header || y == -header) << in.name << " " << i;
      if (y != 0.0f) {
        ASSERT_EQ(y < 0, in.values[i] < 0) << in.name << " " << i;
      }
      // |error| <= scale: the decoded value is 0 or +-scale on the side of x.
      ASSERT_LE(std::fabs(y - std::clamp<double>(in.values[i], -clip, clip)), scale * (1 + 1e-6))
          << in.name << " " << i;
    }
  }
}

TEST(TernGradTest, ConstantInputIsExact) {
  auto codec = MustCreate("terngrad");
  auto dec = RoundTrip(*codec, std::vector<float>(50, -0.25f), TestContext());
  ASSERT_TRUE(dec.ok());
  EXPECT_EQ(*dec, std::vector<float>(50, -0.25f));
}

TEST(TernGradTest, UnbiasedWithoutClipping) {
  // Uniform values: max |x| = 1 < 2.5 * rms (1.44), so nothing is clipped.
  auto codec = MustCreate("terngrad");
  auto x = RandomUniform(300, 12, -1.0f, 1.0f);
  ExpectUnbiased(*codec, x, 400, [](int t) { return TestContext(t); });
}

// ---- natural ----

TEST(NaturalTest, SizeAndDecodedValuesArePowersOfTwoAroundX) {
  auto codec = MustCreate("natural");
  for (const auto& in : AdversarialInputs()) {
    const size_t n = in.values.size();
    auto enc = EncodeToVector(*codec, in.values, TestContext());
    ASSERT_TRUE(enc.ok()) << in.name << ": " << enc.status();
    ASSERT_EQ(enc->size(), 1 + n) << in.name;
    const double floor_power = std::ldexp(1.0, static_cast<int>((*enc)[0]) - 127);
    auto dec = DecodeToVector(*codec, *enc, TestContext(), n);
    ASSERT_TRUE(dec.ok()) << dec.status();
    for (size_t i = 0; i < n; ++i) {
      const double x = in.values[i], y = (*dec)[i];
      if (y == 0) {
        ASSERT_LT(std::fabs(x), floor_power) << in.name << " " << i;
        continue;
      }
      ASSERT_EQ(y < 0, x < 0) << in.name << " " << i;
      int e;
      ASSERT_EQ(std::frexp(std::fabs(y), &e), 0.5) << "a power of two: " << y;
      if (std::fabs(x) >= floor_power) {
        // 2^k <= |x| <= |y| <= 2^(k+1): the relative error is below 1.
        ASSERT_LE(std::fabs(y), 2 * std::fabs(x)) << in.name << " " << i;
        ASSERT_GE(std::fabs(y), std::fabs(x) / 2 * (1 - 1e-7)) << in.name << " " << i;
      } else {
        ASSERT_EQ(std::fabs(y), floor_power) << in.name << " " << i;
      }
    }
  }
}

TEST(NaturalTest, FloorIs126BinadesBelowTheLargestValue) {
  auto codec = MustCreate("natural");
  // 1e30 sits in binade 2^99; the floor is 2^(99 + 1 - 126) = 2^-26.
  auto enc = EncodeToVector(*codec, std::vector<float>{1e30f, 1e-30f, 0.0f}, TestContext());
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ((*enc)[0], 127 + 99 + 1 - 126);
}

TEST(NaturalTest, UnbiasedOverSeedsIncludingBelowTheFloor) {
  auto codec = MustCreate("natural");
  auto x = RandomNormal(300, 13);
  x[0] = 1e30f;  // pushes the floor to 2^-26: the small values round to 0 or 2^-26
  for (size_t i = 1; i < 40; ++i) x[i] *= 1e-8f;
  ExpectUnbiased(*codec, x, 400, [](int t) { return TestContext(t); });
}

// The payload is elementwise.h's recipe byte for byte, also where the largest |x| grows along
// the tensor (the AVX-512 encoder codes chunks with the base so far and recodes the early ones)
// and with zeros, subnormals and values below the floor.
TEST(NaturalTest, PayloadIsTheRecipeWhileTheMaximumGrows) {
  auto codec = MustCreate("natural");
  for (size_t n : {size_t{15}, size_t{4096}, size_t{50013}}) {
    auto x = RandomNormal(n, 17);
    for (size_t i = 0; i < n; ++i) x[i] *= std::ldexp(1.0f, static_cast<int>(i / 3000));
    for (size_t i = 0; i < n; i += 7) x[i] *= 1e-38f;  // some subnormal, some below the floor
    for (size_t i = 3; i < n; i += 11) x[i] = (i % 2) ? 0.0f : -0.0f;
    if (n > 40000) x[40000] = 3e38f;  // the base moves late
    const CodecContext ctx = TestContext(3);
    auto enc = EncodeToVector(*codec, x, ctx);
    ASSERT_TRUE(enc.ok()) << enc.status();
    uint32_t max_exponent = 0;
    for (float v : x) max_exponent = std::max(max_exponent, (FloatBits(v) & 0x7fffffffu) >> 23);
    const uint32_t low = NaturalExponentLow(max_exponent);
    ASSERT_EQ((*enc)[0], low) << n;
    const CounterRandom random = MakeCounterRandom(ctx.seed, ctx.key, ctx.round, ctx.node);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ((*enc)[1 + i], NaturalCode(x[i], low, RandomBits(random, static_cast<uint32_t>(i))))
          << n << " " << i;
    }
  }
}

// ---- u8bit ----

TEST(U8bitTest, SizeAndNearestTableValue) {
  auto codec = MustCreate("u8bit");
  std::vector<float> table(128);
  for (uint32_t c = 0; c < 128; ++c) table[c] = U8bitMagnitude(c);
  for (uint32_t c = 1; c < 128; ++c) ASSERT_GT(table[c], table[c - 1]) << "monotonic at " << c;
  EXPECT_FLOAT_EQ(table[127], 1.0f);
  for (const auto& in : AdversarialInputs()) {
    const size_t n = in.values.size();
    auto enc = EncodeToVector(*codec, in.values, TestContext());
    ASSERT_TRUE(enc.ok()) << in.name << ": " << enc.status();
    ASSERT_EQ(enc->size(), 4 + n) << in.name;
    const float max_abs = static_cast<float>(MaxAbsOf(in.values));
    auto dec = DecodeToVector(*codec, *enc, TestContext(), n);
    ASSERT_TRUE(dec.ok()) << dec.status();
    for (size_t i = 0; i < n; ++i) {
      if (max_abs == 0) {
        ASSERT_EQ((*dec)[i], 0.0f);
        continue;
      }
      const float v = std::fabs(in.values[i]) / max_abs;
      float best = 2;
      for (float t : table) best = std::min(best, std::fabs(v - t));
      const float got = std::fabs((*dec)[i]) / max_abs;
      ASSERT_LE(std::fabs(v - got), best * (1 + 1e-5f) + 1e-7f) << in.name << " " << i;
      if ((*dec)[i] != 0) {
        ASSERT_EQ((*dec)[i] < 0, in.values[i] < 0);
      }
    }
    // The largest magnitude is exact.
    for (size_t i = 0; i < n; ++i) {
      if (std::fabs(in.values[i]) == max_abs) {
        ASSERT_EQ(std::fabs((*dec)[i]), max_abs);
      }
    }
  }
}

TEST(U8bitTest, CodecBytesEqualTheElementwiseDefinition) {
  // The codec counts midpoints with tables; elementwise.h (shared with the GPU) by a guess and
  // two comparisons. Both must give the same byte for every element.
  auto codec = MustCreate("u8bit");
  std::mt19937_64 gen(21);
  std::uniform_real_distribution<float> exponent(-9.0f, 0.0f);
  std::vector<float> x(200003);  // not a multiple of 8: the scalar tail too
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = std::pow(10.0f, exponent(gen)) * ((i % 2) ? -1.0f : 1.0f);
  }
  x[0] = 1.0f;                          // max |x| = 1: v = |x|
  for (uint32_t c = 0; c < 127; ++c) {  // the midpoints and their float neighbours
    const float m = U8bitMidpoint(c);
    x[1 + 3 * c] = m;
    x[2 + 3 * c] = std::nextafter(m, 0.0f);
    x[3 + 3 * c] = std::nextafter(m, 2.0f);
  }
  for (float max_abs : {1.0f, 3.7f, 1e-20f}) {
    std::vector<float> scaled(x);
    for (float& v : scaled) v *= max_abs;
    auto enc = EncodeToVector(*codec, scaled, TestContext());
    ASSERT_TRUE(enc.ok());
    float header;
    std::memcpy(&header, enc->data(), 4);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ((*enc)[4 + i], U8bitCode(scaled[i], header))
          << "element " << i << " = " << scaled[i];
    }
  }
}

TEST(U8bitTest, EveryStrideOfFloatsAndMidpointNeighbourhoodsMatchTheDefinition) {
  // The AVX-512 VBMI encoder guesses the code from v's bits and settles it with one midpoint
  // compare: floats across [0, 1] (max |x| = 1, so v = |x|) at a stride, and every float
  // within 300 ulps of each midpoint and each decade threshold; odd elements negative.
  std::vector<float> x;
  for (uint32_t bits = 0; bits <= 0x3f800000u; bits += 509) x.push_back(BitsToFloat(bits));
  std::vector<float> centres;
  for (uint32_t c = 0; c < 127; ++c) centres.push_back(U8bitMidpoint(c));
  for (uint32_t k = 1; k <= 6; ++k) centres.push_back(U8bitDecadeScale(k));
  for (float centre : centres) {
    for (int32_t d = -300; d <= 300; ++d) x.push_back(BitsToFloat(FloatBits(centre) + d));
  }
  x.push_back(1.0f);
  for (size_t i = 1; i < x.size(); i += 2) x[i] = -x[i];
  auto enc = EncodeToVector(*MustCreate("u8bit"), x, TestContext());
  ASSERT_TRUE(enc.ok());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ((*enc)[4 + i], U8bitCode(x[i], 1.0f)) << "element " << i << " = " << x[i];
  }
}

TEST(U8bitTest, LargeInputStreamedCodesMatchTheDefinition) {
  // From 32 MiB of input the codes are written with non-temporal stores from their first
  // 64-byte boundary on: the head before it, the streamed middle and the tail (n not a
  // multiple of 64) must all match.
  const size_t n = (size_t{8} << 20) + 37;
  std::vector<float> x = RandomNormal(n, 5);
  x[n / 2] = 0.0f;
  x[n / 2 + 1] = -0.0f;
  auto enc = EncodeToVector(*MustCreate("u8bit"), x, TestContext());
  ASSERT_TRUE(enc.ok());
  float header;
  std::memcpy(&header, enc->data(), 4);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ((*enc)[4 + i], U8bitCode(x[i], header)) << "element " << i << " = " << x[i];
  }
}

// ---- dithering ----

TEST(DitheringTest, SizesAndErrorBoundsForEveryPartitionAndNorm) {
  for (const char* partition : {"linear", "natural"}) {
    for (const char* normalize : {"max", "l2"}) {
      for (int k : {1, 3, 15, 100}) {
        auto codec = MustCreate(
            "dithering",
            {{"k", std::to_string(k)}, {"partition", partition}, {"normalize", normalize}});
        const bool natural = std::string(partition) == "natural";
        for (const auto& in : AdversarialInputs()) {
          const size_t n = in.values.size();
          auto enc = EncodeToVector(*codec, in.values, TestContext());
          ASSERT_TRUE(enc.ok()) << in.name << ": " << enc.status();
          ASSERT_EQ(enc->size(), 8 + (n * (BitsFor(k) + 1) + 7) / 8) << in.name;
          const double norm =
              std::string(normalize) == "l2" ? L2Of(in.values) : MaxAbsOf(in.values);
          auto dec = DecodeToVector(*codec, *enc, TestContext(), n);
          ASSERT_TRUE(dec.ok()) << dec.status();
          for (size_t i = 0; i < n; ++i) {
            const double x = in.values[i], y = (*dec)[i];
            // Linear: one level step, norm / k. Natural: within the binade of x (error < |x|)
            // or, below the smallest level 2^(1-k), at most that level.
            const double bound =
                natural ? std::max(std::fabs(x), norm * std::ldexp(1.0, 1 - k)) : norm / k;
            ASSERT_LE(std::fabs(y - x), bound * (1 + 1e-5) + 1e-37)
                << partition << " " << normalize << " k=" << k << " " << in.name << " " << i;
          }
        }
      }
    }
  }
}

TEST(DitheringTest, UnbiasedOverSeeds) {
  for (const char* partition : {"linear", "natural"}) {
    for (const char* normalize : {"max", "l2"}) {
      auto codec =
          MustCreate("dithering", {{"k", "3"}, {"partition", partition}, {"normalize", normalize}});
      // With the L2 norm, most of 300 elements would sit below the smallest natural level
      // (2^-2 of the norm) and no nudged input exists; 20 elements leave room.
      auto x = RandomNormal(std::string(normalize) == "l2" ? 20 : 300, 14);
      NudgeFractions(
          x, DitherNudge(3, std::string(partition) == "natural", std::string(normalize) == "l2"));
      ExpectUnbiased(*codec, x, 400, [](int t) { return TestContext(t); });
    }
  }
}

TEST(DitheringTest, NaturalPartitionNeedsKAtMost127) {
  auto bad = CreateCodec("dithering", {{"k", "200"}, {"partition", "natural"}});
  EXPECT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "k")) << bad.status();
  EXPECT_TRUE(CreateCodec("dithering", {{"k", "200"}}).ok());
  EXPECT_FALSE(CreateCodec("dithering", {{"normalize", "l1"}}).ok());
}

// ---- all of them ----

const std::vector<std::pair<std::string, CodecParams>>& AllQuantCodecs() {
  static const auto* all = new std::vector<std::pair<std::string, CodecParams>>{
      {"qsgd", {}},
      {"qsgd", {{"quantum_num", "100"}, {"bucket_size", "7"}}},
      {"qsgd", {{"quantum_num", "1000"}}},   // 11-bit codes: the bit-stream path
      {"qsgd", {{"quantum_num", "32767"}}},  // 16-bit codes
      {"terngrad", {}},
      {"natural", {}},
      {"u8bit", {}},
      {"dithering", {}},
      {"dithering", {{"k", "5"}, {"partition", "natural"}, {"normalize", "l2"}}}};
  return *all;
}

TEST(QuantCodecsTest, SameContextSameBytesOtherNodeOtherBytes) {
  auto x = RandomNormal(1000, 15);
  for (const auto& [name, params] : AllQuantCodecs()) {
    auto codec = MustCreate(name, params);
    auto a = EncodeToVector(*codec, x, TestContext(3, 0));
    auto b = EncodeToVector(*codec, x, TestContext(3, 0));
    auto c = EncodeToVector(*codec, x, TestContext(3, 1));
    ASSERT_TRUE(a.ok() && b.ok() && c.ok());
    EXPECT_EQ(*a, *b) << name;
    if (codec->properties().unbiased) {
      EXPECT_NE(*a, *c) << name << ": node feeds the random stream";
    }
  }
}

TEST(QuantCodecsTest, NonFiniteInputIsAnErrorNamingTheIndex) {
  for (const auto& [name, params] : AllQuantCodecs()) {
    for (float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
          -std::numeric_limits<float>::infinity()}) {
      auto codec = MustCreate(name, params);
      std::vector<float> x(300, 1.0f);
      x[211] = bad;
      auto enc = EncodeToVector(*codec, x, TestContext());
      ASSERT_FALSE(enc.ok()) << name;
      EXPECT_EQ(enc.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_TRUE(absl::StrContains(enc.status().message(), "211")) << enc.status();
    }
  }
}

TEST(QuantCodecsTest, OutputBufferTooSmallIsAnError) {
  for (const auto& [name, params] : AllQuantCodecs()) {
    auto codec = MustCreate(name, params);
    std::vector<float> x(100, 1.0f);
    std::vector<uint8_t> out(codec->MaxEncodedBytes(100) - 1);
    EXPECT_FALSE(codec->Encode(x, TestContext(), absl::MakeSpan(out)).ok()) << name;
  }
}

TEST(QuantCodecsTest, EmptyInputRoundTrips) {
  for (const auto& [name, params] : AllQuantCodecs()) {
    auto codec = MustCreate(name, params);
    auto dec = RoundTrip(*codec, std::vector<float>{}, TestContext());
    ASSERT_TRUE(dec.ok()) << name << ": " << dec.status();
    EXPECT_TRUE(dec->empty());
  }
}

void ExpectMalformed(Codec& codec, std::vector<uint8_t> bytes, size_t n, const std::string& why) {
  std::vector<float> out(n);
  auto st = codec.Decode(bytes, TestContext(), absl::MakeSpan(out));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << codec.name() << ": " << why;
}

TEST(QuantCodecsTest, MalformedPayloadsAreErrors) {
  const size_t n = 13;
  auto x = RandomNormal(n, 16);
  for (const auto& [name, params] : AllQuantCodecs()) {
    auto codec = MustCreate(name, params);
    auto enc = EncodeToVector(*codec, x, TestContext());
    ASSERT_TRUE(enc.ok());
    ExpectMalformed(*codec, {}, n, "empty");
    ExpectMalformed(*codec, std::vector<uint8_t>(enc->begin(), enc->end() - 1), n, "short");
    auto longer = *enc;
    longer.push_back(0);
    ExpectMalformed(*codec, longer, n, "long");
    if (name != "natural") {
      // The header float: after the u32 count, except u8bit's (no count: its size is exact).
      const size_t at = name == "u8bit" ? 0 : 4;
      for (float header : {std::numeric_limits<float>::quiet_NaN(), -1.0f,
                           std::numeric_limits<float>::infinity()}) {
        auto b = *enc;
        std::memcpy(b.data() + at, &header, 4);
        ExpectMalformed(*codec, b, n, "bad header float");
      }
    }
  }
  {  // qsgd: a level above quantum_num (100 < 127 = 7 bits all set).
    auto codec = MustCreate("qsgd", {{"quantum_num", "100"}, {"bucket_size", "7"}});
    auto enc = EncodeToVector(*codec, x, TestContext());
    ASSERT_TRUE(enc.ok());
    (*enc)[12] |= 0x7f;  // first code after the count and 2 norms: level bits 0-6
    ExpectMalformed(*codec, *enc, n, "level > quantum_num");
  }
  {  // terngrad: code 3, and padding.
    auto codec = MustCreate("terngrad");
    auto enc = EncodeToVector(*codec, x, TestContext());
    auto b = *enc;
    b[8] |= 0x03;
    ExpectMalformed(*codec, b, n, "code 3");
    b = *enc;
    b.back() |= 0x80;  // n = 13: last byte holds one code, padding bits 2..7
    ExpectMalformed(*codec, b, n, "padding");
  }
  {  // natural: exponent_low out of range, code beyond the float range, 0x80.
    auto codec = MustCreate("natural");
    auto enc = EncodeToVector(*codec, x, TestContext());
    auto b = *enc;
    b[0] = 0;
    ExpectMalformed(*codec, b, n, "exponent_low 0");
    b[0] = 255;
    ExpectMalformed(*codec, b, n, "exponent_low 255");
    b = *enc;
    b[0] = 250;
    b[1] = 0x7f;
    ExpectMalformed(*codec, b, n, "exponent overflow");
    b = *enc;
    b[1] = 0x80;
    ExpectMalformed(*codec, b, n, "negative zero");
  }
  {  // dithering: padding bits (k = 15: 5-bit codes, 13 * 5 = 65 bits).
    auto codec = MustCreate("dithering");
    auto enc = EncodeToVector(*codec, x, TestContext());
    auto b = *enc;
    b.back() |= 0x80;
    ExpectMalformed(*codec, b, n, "padding");
  }
}

TEST(QuantCodecsTest, RandomBytesNeverCrash) {
  std::mt19937 gen(5);
  for (const auto& [name, params] : AllQuantCodecs()) {
    auto codec = MustCreate(name, params);
    for (int t = 0; t < 300; ++t) {
      const size_t n = 1 + gen() % 90;
      const size_t size = gen() % 2 ? codec->MaxEncodedBytes(n) : gen() % 40;
      std::vector<uint8_t> b(size);
      for (auto& v : b) v = static_cast<uint8_t>(gen() % 4 == 0 ? 0 : gen());
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

}  // namespace
}  // namespace bytecomp::compress
