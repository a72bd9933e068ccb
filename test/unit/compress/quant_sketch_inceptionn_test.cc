// sketch and inceptionn: sizes, error bounds, malformed payloads.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
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

size_t SketchSize(size_t n, size_t q, size_t bits) { return 4 + 4 * q + (n * bits + 7) / 8; }

TEST(SketchTest, SizeSumOrderAndBucketRange) {
  for (auto [q, bits] : {std::pair<size_t, size_t>{64, 6}, {2, 1}, {5, 3}, {300, 9}}) {
    auto codec = MustCreate("sketch", {{"quantiles", std::to_string(q)}});
    for (const auto& in : AdversarialInputs()) {
      const size_t n = in.values.size();
      auto enc = EncodeToVector(*codec, in.values, TestContext());
      ASSERT_TRUE(enc.ok()) << in.name << ": " << enc.status();
      ASSERT_EQ(enc->size(), SketchSize(n, q, bits)) << in.name << " q=" << q;
      auto dec = DecodeToVector(*codec, *enc, TestContext(), n);
      ASSERT_TRUE(dec.ok()) << dec.status();
      // Bucket means keep the sum.
      double sum_in = 0, sum_out = 0, scale = 0;
      for (size_t i = 0; i < n; ++i) {
        sum_in += in.values[i];
        sum_out += (*dec)[i];
        scale += std::fabs(in.values[i]);
      }
      EXPECT_NEAR(sum_out, sum_in, 1e-6 * scale + 1e-37) << in.name;
      // Order is kept: x <= y implies decode(x) <= decode(y).
      std::vector<size_t> order(n);
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(),
                [&](size_t a, size_t b) { return in.values[a] < in.values[b]; });
      for (size_t k = 1; k < n; ++k) {
        ASSERT_LE((*dec)[order[k - 1]], (*dec)[order[k]]) << in.name << " q=" << q;
      }
      // Each decoded value lies within the range of the inputs that share it.
      for (size_t k = 0; k < n;) {
        size_t e = k;
        float lo = in.values[order[k]], hi = lo;
        while (e < n && (*dec)[order[e]] == (*dec)[order[k]]) {
          lo = std::min(lo, in.values[order[e]]);
          hi = std::max(hi, in.values[order[e]]);
          ++e;
        }
        const float v = (*dec)[order[k]];
        const float slack = 1e-6f * std::max(std::fabs(lo), std::fabs(hi));
        ASSERT_GE(v, lo - slack) << in.name;
        ASSERT_LE(v, hi + slack) << in.name;
        k = e;
      }
    }
  }
}

TEST(SketchTest, UniformDataErrorIsAboutABucketWidth) {
  std::mt19937_64 gen(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(20000);
  for (auto& v : x) v = dist(gen);
  auto codec = MustCreate("sketch");
  auto enc = EncodeToVector(*codec, x, TestContext());
  ASSERT_TRUE(enc.ok());
  auto dec = DecodeToVector(*codec, *enc, TestContext(), x.size());
  ASSERT_TRUE(dec.ok());
  double max_error = 0;
  for (size_t i = 0; i < x.size(); ++i)
    max_error = std::max<double>(max_error, std::fabs((*dec)[i] - x[i]));
  // 64 buckets over a width of 2: about 1/32 each, half of that from the mean; the sampled
  // boundaries add noise, so allow a factor 2.
  EXPECT_LT(max_error, 2.0 / 64 * 2);
}

TEST(SketchTest, MalformedPayloads) {
  auto codec = MustCreate("sketch", {{"quantiles", "5"}});  // 3-bit ids: 5..7 invalid
  const size_t n = 13;
  auto enc = EncodeToVector(*codec, RandomNormal(n, 2), TestContext());
  ASSERT_TRUE(enc.ok());
  std::vector<float> out(n);
  auto bad_id = *enc;
  bad_id[4 + 20] |= 0x07;  // first id = 7
  EXPECT_EQ(codec->Decode(bad_id, TestContext(), absl::MakeSpan(out)).code(),
            absl::StatusCode::kInvalidArgument);
  auto bad_mean = *enc;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(bad_mean.data() + 8, &nan, 4);
  EXPECT_FALSE(codec->Decode(bad_mean, TestContext(), absl::MakeSpan(out)).ok());
  auto padding = *enc;
  padding.back() |= 0x80;  // 13 * 3 = 39 bits: bit 39 is padding
  EXPECT_FALSE(codec->Decode(padding, TestContext(), absl::MakeSpan(out)).ok());
  EXPECT_FALSE(CreateCodec("sketch", {{"quantiles", "1"}}).ok());
}

size_t InceptionnSize(absl::Span<const float> x, double eb) {
  size_t size = 4 + (x.size() + 3) / 4;
  for (float v : x) {
    const double steps = std::fabs(v) / (2 * eb);
    if (std::fabs(v) <= eb) continue;
    size += steps < 127 ? 1 : (steps < 32767 ? 2 : 4);
  }
  return size;
}

TEST(InceptionnTest, ErrorWithinTheBoundAndSizeByTheTags) {
  for (double eb : {0.0009765625, 0.1, 1e-20, 1e25}) {
    auto codec = MustCreate("inceptionn", {{"error_bound", absl::StrCat(eb)}});
    for (const auto& in : AdversarialInputs()) {
      auto enc = EncodeToVector(*codec, in.values, TestContext());
      ASSERT_TRUE(enc.ok()) << in.name << ": " << enc.status();
      EXPECT_EQ(enc->size(), InceptionnSize(in.values, static_cast<float>(eb)))
          << in.name << " eb=" << eb;
      auto dec = DecodeToVector(*codec, *enc, TestContext(), in.values.size());
      ASSERT_TRUE(dec.ok()) << dec.status();
      for (size_t i = 0; i < in.values.size(); ++i) {
        ASSERT_LE(std::fabs((*dec)[i] - static_cast<double>(in.values[i])),
                  eb * (1 + 1e-6) + std::fabs(in.values[i]) * 1e-7)
            << in.name << " eb=" << eb << " element " << i;
      }
    }
  }
}

TEST(InceptionnTest, TagsFollowTheMagnitudes) {
  // eb = 0.5: 0.4 dropped, 10 -> int8 (10 steps of 1), 1000 -> int16, 1e6 -> fp32.
  auto codec = MustCreate("inceptionn", {{"error_bound", "0.5"}});
  std::vector<float> x = {0.4f, 10.0f, -1000.0f, 1e6f, -0.2f};
  auto enc = EncodeToVector(*codec, x, TestContext());
  ASSERT_TRUE(enc.ok());
  // u32 n, 2 tag bytes, 1 int8, 1 int16, 1 fp32.
  ASSERT_EQ(enc->size(), 4u + 2 + 1 + 2 + 4);
  EXPECT_EQ((*enc)[4], 0 | (1 << 2) | (2 << 4) | (3 << 6));
  EXPECT_EQ((*enc)[5], 0);
  EXPECT_EQ(static_cast<int8_t>((*enc)[6]), 10);
  auto dec = DecodeToVector(*codec, *enc, TestContext(), x.size());
  ASSERT_TRUE(dec.ok());
  EXPECT_EQ(*dec, (std::vector<float>{0, 10, -1000, 1e6f, 0}));
}

TEST(InceptionnTest, MalformedPayloads) {
  auto codec = MustCreate("inceptionn", {{"error_bound", "0.5"}});
  std::vector<float> x = {0.4f, 10.0f, -1000.0f, 1e6f, -0.2f};
  auto enc = EncodeToVector(*codec, x, TestContext());
  ASSERT_TRUE(enc.ok());
  std::vector<float> out(x.size());
  auto more_tags = *enc;
  more_tags[4] |= 0x03;  // element 0 claims an fp32 that is not there
  EXPECT_FALSE(codec->Decode(more_tags, TestContext(), absl::MakeSpan(out)).ok());
  auto padding = *enc;
  padding[5] |= 0x40;
  EXPECT_FALSE(codec->Decode(padding, TestContext(), absl::MakeSpan(out)).ok());
  auto inf = *enc;
  const float v = std::numeric_limits<float>::infinity();
  std::memcpy(inf.data() + inf.size() - 4, &v, 4);
  EXPECT_FALSE(codec->Decode(inf, TestContext(), absl::MakeSpan(out)).ok());
  EXPECT_FALSE(CreateCodec("inceptionn", {{"error_bound", "0"}}).ok());
  EXPECT_FALSE(CreateCodec("inceptionn", {{"error_bound", "-1"}}).ok());
}

TEST(SketchInceptionnTest, NonFiniteInputIsAnErrorNamingTheIndex) {
  for (const char* name : {"sketch", "inceptionn"}) {
    auto codec = MustCreate(name);
    std::vector<float> x(50, 1.0f);
    x[42] = -std::numeric_limits<float>::infinity();
    auto enc = EncodeToVector(*codec, x, TestContext());
    ASSERT_FALSE(enc.ok());
    EXPECT_TRUE(absl::StrContains(enc.status().message(), "42")) << enc.status();
  }
}

}  // namespace
}  // namespace bytecomp::compress
