// The CPU codecs' payloads equal what the per-element recipe in elementwise.h produces when
// computed one element at a time in this (non-vectorised, baseline x86-64) translation unit:
// the vectorised AVX2 loops and the scalar math agree bit for bit, and a GPU kernel that
// follows the recipe produces the same bytes.
// The reference below must not fuse a*b+c either (it would, with -march=native): see
// elementwise.h; CMakeLists.txt builds this file with -ffp-contract=off.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/memory_math.h"
#include "codec_test_util.h"

namespace bytecomp::compress {
namespace {

using testing::EncodeToVector;
using testing::MustCreate;
using testing::RandomNormal;
using testing::TestContext;

// Inputs with mixed magnitudes and a length that is not a multiple of 8 or of 128.
std::vector<float> RecipeInput() {
  auto x = RandomNormal(5003, 77);
  for (size_t i = 0; i < x.size(); i += 97) x[i] *= 1e-12f;
  for (size_t i = 0; i < x.size(); i += 211) x[i] = 0.0f;
  x[17] = 40.0f;
  return x;
}

double SumSquares(const float* x, size_t n) {  // the CPU codecs' order (quant_kernels.cc)
  double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (size_t j = 0; j < 8; ++j) lanes[j] += static_cast<double>(x[i + j]) * x[i + j];
  }
  double tail = 0;
  for (; i < n; ++i) tail += static_cast<double>(x[i]) * x[i];
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])) + tail;
}

float MaxAbsOf(const std::vector<float>& x) {
  float m = 0;
  for (float v : x) m = std::max(m, std::fabs(v));
  return m;
}

// LSB-first bit stream of fixed-width codes.
std::vector<uint8_t> PackLsb(const std::vector<uint32_t>& codes, uint32_t bits) {
  std::vector<uint8_t> out((codes.size() * bits + 7) / 8, 0);
  for (size_t i = 0; i < codes.size(); ++i) {
    for (uint32_t b = 0; b < bits; ++b) {
      if ((codes[i] >> b) & 1u)
        out[(i * bits + b) / 8] |= static_cast<uint8_t>(1u << ((i * bits + b) % 8));
    }
  }
  return out;
}

std::vector<uint8_t> Header(uint32_t n) {
  std::vector<uint8_t> h(4);
  std::memcpy(h.data(), &n, 4);
  return h;
}

void AppendFloat(std::vector<uint8_t>& v, float f) {
  uint8_t b[4];
  std::memcpy(b, &f, 4);
  v.insert(v.end(), b, b + 4);
}

TEST(ElementwiseRecipeTest, QsgdPayload) {
  const auto x = RecipeInput();
  const CodecContext ctx = TestContext(5, 2);
  const CounterRandom r = MakeCounterRandom(ctx.seed, ctx.key, ctx.round, ctx.node);
  const uint32_t s = 127, level_bits = BitsFor(s), bucket = 128;
  std::vector<uint8_t> expected = Header(static_cast<uint32_t>(x.size()));
  std::vector<uint32_t> codes(x.size());
  for (size_t b = 0; b * bucket < x.size(); ++b) {
    const size_t begin = b * bucket, len = std::min<size_t>(bucket, x.size() - begin);
    const float norm = static_cast<float>(
        std::min(std::sqrt(SumSquares(x.data() + begin, len)), static_cast<double>(FLT_MAX)));
    AppendFloat(expected, norm);
    for (size_t i = begin; i < begin + len; ++i) {
      codes[i] = QsgdCode(x[i], norm, s, level_bits, UniformFloat(r, static_cast<uint32_t>(i)));
    }
  }
  const auto packed = PackLsb(codes, level_bits + 1);
  expected.insert(expected.end(), packed.begin(), packed.end());
  auto enc = EncodeToVector(*MustCreate("qsgd"), x, ctx);
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(*enc, expected);
}

TEST(ElementwiseRecipeTest, TernGradPayload) {
  const auto x = RecipeInput();
  const CodecContext ctx = TestContext(6, 1);
  const CounterRandom r = MakeCounterRandom(ctx.seed, ctx.key, ctx.round, ctx.node);
  const double rms = std::sqrt(SumSquares(x.data(), x.size()) / x.size());
  const float clip = static_cast<float>(std::min(2.5 * rms, static_cast<double>(FLT_MAX)));
  const float scale = std::min(MaxAbsOf(x), clip);
  std::vector<uint8_t> expected = Header(static_cast<uint32_t>(x.size()));
  AppendFloat(expected, scale);
  std::vector<uint32_t> codes(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    codes[i] = TernaryCode(x[i], clip, scale, UniformFloat(r, static_cast<uint32_t>(i)));
  }
  const auto packed = PackLsb(codes, 2);
  expected.insert(expected.end(), packed.begin(), packed.end());
  auto enc = EncodeToVector(*MustCreate("terngrad"), x, ctx);
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(*enc, expected);
}

TEST(ElementwiseRecipeTest, NaturalPayload) {
  const auto x = RecipeInput();
  const CodecContext ctx = TestContext(7, 3);
  const CounterRandom r = MakeCounterRandom(ctx.seed, ctx.key, ctx.round, ctx.node);
  const uint32_t low = NaturalExponentLow(FloatBits(MaxAbsOf(x)) >> 23);
  std::vector<uint8_t> expected = {static_cast<uint8_t>(low)};
  for (size_t i = 0; i < x.size(); ++i) {
    expected.push_back(NaturalCode(x[i], low, RandomBits(r, static_cast<uint32_t>(i))));
  }
  auto enc = EncodeToVector(*MustCreate("natural"), x, ctx);
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(*enc, expected);
}

TEST(ElementwiseRecipeTest, DitheringPayloads) {
  const auto x = RecipeInput();
  for (bool natural : {false, true}) {
    for (bool l2 : {false, true}) {
      const uint32_t k = natural ? 5 : 15;
      const CodecContext ctx = TestContext(8, 4);
      const CounterRandom r = MakeCounterRandom(ctx.seed, ctx.key, ctx.round, ctx.node);
      const float norm = l2 ? static_cast<float>(std::min(std::sqrt(SumSquares(x.data(), x.size())),
                                                          static_cast<double>(FLT_MAX)))
                            : MaxAbsOf(x);
      std::vector<uint8_t> expected = Header(static_cast<uint32_t>(x.size()));
      AppendFloat(expected, norm);
      std::vector<uint32_t> codes(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        codes[i] = DitherCode(x[i], 1.0f / norm, k, BitsFor(k), natural,
                              UniformFloat(r, static_cast<uint32_t>(i)));
      }
      const auto packed = PackLsb(codes, BitsFor(k) + 1);
      expected.insert(expected.end(), packed.begin(), packed.end());
      auto codec = MustCreate("dithering", {{"k", std::to_string(k)},
                                            {"partition", natural ? "natural" : "linear"},
                                            {"normalize", l2 ? "l2" : "max"}});
      auto enc = EncodeToVector(*codec, x, ctx);
      ASSERT_TRUE(enc.ok());
      EXPECT_EQ(*enc, expected) << "natural=" << natural << " l2=" << l2;
    }
  }
}

// Every packed code width dithering writes (2 to 7 bits, the vector packing's widths, and 9):
// the payload is the recipe's codes packed LSB first, and decoding gives each code's value.
TEST(ElementwiseRecipeTest, DitheringEveryCodeWidthPacksAndUnpacks) {
  const auto x = RecipeInput();
  const float norm = MaxAbsOf(x);
  for (uint32_t k : {1u, 3u, 7u, 15u, 31u, 63u, 255u}) {
    const CodecContext ctx = TestContext(9, 1);
    const CounterRandom r = MakeCounterRandom(ctx.seed, ctx.key, ctx.round, ctx.node);
    const uint32_t level_bits = BitsFor(k);
    std::vector<uint8_t> expected = Header(static_cast<uint32_t>(x.size()));
    AppendFloat(expected, norm);
    std::vector<uint32_t> codes(x.size());
    std::vector<float> values(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      codes[i] = DitherCode(x[i], 1.0f / norm, k, level_bits, false,
                            UniformFloat(r, static_cast<uint32_t>(i)));
      const float magnitude = DitherLinearValue(codes[i] & ((1u << level_bits) - 1u), k) * norm;
      values[i] = (codes[i] >> level_bits) ? -magnitude : magnitude;
    }
    const auto packed = PackLsb(codes, level_bits + 1);
    expected.insert(expected.end(), packed.begin(), packed.end());
    auto codec = MustCreate("dithering", {{"k", std::to_string(k)}});
    auto enc = EncodeToVector(*codec, x, ctx);
    ASSERT_TRUE(enc.ok());
    EXPECT_EQ(*enc, expected) << "k=" << k;
    std::vector<float> decoded(x.size());
    ASSERT_TRUE(codec->Decode(*enc, ctx, absl::MakeSpan(decoded)).ok()) << "k=" << k;
    EXPECT_EQ(decoded, values) << "k=" << k;
  }
}

TEST(ElementwiseRecipeTest, U8bitAndSignPayloads) {
  const auto x = RecipeInput();
  const float max_abs = MaxAbsOf(x);
  std::vector<uint8_t> expected;
  AppendFloat(expected, max_abs);
  for (float v : x) expected.push_back(U8bitCode(v, max_abs));
  auto enc = EncodeToVector(*MustCreate("u8bit"), x, TestContext());
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(*enc, expected);

  std::vector<uint32_t> signs(x.size());
  for (size_t i = 0; i < x.size(); ++i) signs[i] = SignBit(x[i]);
  expected = Header(static_cast<uint32_t>(x.size()));
  const auto packed = PackLsb(signs, 1);
  expected.insert(expected.end(), packed.begin(), packed.end());
  auto sign_enc = EncodeToVector(*MustCreate("signsgd"), x, TestContext());
  ASSERT_TRUE(sign_enc.ok());
  EXPECT_EQ(*sign_enc, expected);
}

TEST(ElementwiseRecipeTest, SignumPayloadsOverRounds) {
  // signum's one-pass blend and packing (AVX-512: 64 elements a step; from 16 MiB the momentum
  // is streamed) against memory_math.h's SignumBlend and SignBit: sizes not a multiple of 64,
  // one above the streaming size.
  for (size_t n : {size_t{1000} + 13, (size_t{4} << 20) + 45}) {
    auto codec = MustCreate("signum", {{"momentum", "0.9"}});
    std::vector<float> momentum;
    const float beta = 0.9f, keep = 1.0f - beta;  // as the codec computes them
    for (uint32_t round = 0; round < 3; ++round) {
      const auto g = RandomNormal(n, 100 + round);
      if (round == 0) {
        momentum = g;
      } else {
        for (size_t i = 0; i < n; ++i) momentum[i] = SignumBlend(g[i], momentum[i], keep, beta);
      }
      std::vector<uint32_t> signs(n);
      for (size_t i = 0; i < n; ++i) signs[i] = SignBit(momentum[i]);
      std::vector<uint8_t> expected = Header(static_cast<uint32_t>(n));
      const auto packed = PackLsb(signs, 1);
      expected.insert(expected.end(), packed.begin(), packed.end());
      auto enc = EncodeToVector(*codec, g, TestContext(round));
      ASSERT_TRUE(enc.ok());
      ASSERT_EQ(*enc, expected) << "n " << n << " round " << round;
    }
  }
}

}  // namespace
}  // namespace bytecomp::compress
