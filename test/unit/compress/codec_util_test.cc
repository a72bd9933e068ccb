#include "bytecomp/compress/codec_util.h"

#include <cmath>
#include <cstring>
#include <random>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace bytecomp::compress {
namespace {

TEST(BitStreamTest, RoundTripsEveryWidthAndIsExactlyPackedBytesLong) {
  std::mt19937_64 gen(5);
  for (int bits = 0; bits <= 32; ++bits) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{63}, size_t{1000}}) {
      std::vector<uint32_t> values(count);
      for (auto& v : values) v = bits == 0 ? 0 : static_cast<uint32_t>(gen() >> (64 - bits));
      std::vector<uint8_t> buf(PackedBytes(count, bits) + 16, 0xee);
      BitWriter w(buf.data());
      for (uint32_t v : values) w.Put(v, bits);
      const uint8_t* end = w.Finish();
      ASSERT_EQ(static_cast<size_t>(end - buf.data()), PackedBytes(count, bits))
          << bits << " " << count;
      for (size_t g = PackedBytes(count, bits); g < buf.size(); ++g) ASSERT_EQ(buf[g], 0xee);
      BitReader r(buf.data(), PackedBytes(count, bits));
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(r.Get(bits), values[i]) << bits << " " << i;
    }
  }
}

TEST(BitStreamTest, LsbFirstLayout) {
  uint8_t buf[2] = {};
  BitWriter w(buf);
  w.Put(1, 1);    // bit 0
  w.Put(0, 1);    // bit 1
  w.Put(5, 3);    // bits 2..4 = 101
  w.Put(0x7, 3);  // bits 5..7
  w.Put(1, 2);    // bits 8..9
  w.Finish();
  EXPECT_EQ(buf[0], 0b11110101);
  EXPECT_EQ(buf[1], 0b01);
}

TEST(BitStreamTest, ReaderNeverReadsPastItsEnd) {
  const uint8_t data[3] = {0xff, 0xff, 0xff};
  BitReader r(data, 2);
  EXPECT_EQ(r.Get(16), 0xffffu);
  EXPECT_EQ(r.Get(8), 0u);  // past the end: zeros, not the third byte
}

TEST(FiniteCheckTest, FindsTheFirstBadIndex) {
  std::vector<float> x(1000, 1.0f);
  EXPECT_TRUE(CheckFinite(x, "test").ok());
  x[999] = -INFINITY;
  x[517] = NAN;
  auto s = CheckFinite(x, "codec 'x' input");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "codec 'x' input: element 517 of 1000 is NaN")) << s;
  EXPECT_FALSE(IsFiniteBits(MaxAbsBits(x.data() + 518, 482)));
  EXPECT_TRUE(IsFiniteBits(MaxAbsBits(x.data(), 517)));
  EXPECT_EQ(MaxAbsBits(x.data(), 0), 0u);
}

TEST(SeedTest, SharedSeedIgnoresTheNodeAndNodeSeedDoesNot) {
  CodecContext a{.key = 1, .round = 2, .node = 0, .seed = 3};
  CodecContext b = a;
  b.node = 1;
  EXPECT_EQ(SharedSeed(a, 9), SharedSeed(b, 9));
  EXPECT_NE(NodeSeed(a, 9), NodeSeed(b, 9));
  CodecContext c = a;
  c.round = 3;
  EXPECT_NE(SharedSeed(a, 9), SharedSeed(c, 9));
  EXPECT_NE(SharedSeed(a, 9), SharedSeed(a, 10));
}

TEST(RngTest, BelowAndUniformStayInRange) {
  Rng rng(1);
  double sum = 0;
  for (int i = 0; i < 100000; ++i) {
    ASSERT_LT(rng.Below(7), 7u);
    const float u = rng.UniformFloat();
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
  }
  EXPECT_NEAR(sum / 100000, 0.5, 0.01);
}

// An unaligned view is copied into the scratch; an empty one (a "none" payload for n = 0) must
// not hand memcpy the empty scratch's null pointer (UBSan, in BYTECOMP_SANITIZE builds).
TEST(AlignedAsTest, CopiesUnalignedViewsAndAcceptsEmptyOnes) {
  alignas(4) uint8_t bytes[13] = {};
  const float value = 1.5f;
  std::memcpy(bytes + 1, &value, 4);
  std::vector<float> scratch;
  const float* unaligned = AlignedAs<float>(absl::MakeConstSpan(bytes + 1, 12), scratch);
  ASSERT_EQ(scratch.size(), 3u);
  EXPECT_EQ(unaligned, scratch.data());
  EXPECT_EQ(unaligned[0], 1.5f);
  std::vector<float> empty_scratch;
  AlignedAs<float>(absl::MakeConstSpan(bytes + 1, 0), empty_scratch);
  EXPECT_TRUE(empty_scratch.empty());
  EXPECT_EQ(AlignedAs<float>(absl::MakeConstSpan(bytes, 4), scratch),
            reinterpret_cast<const float*>(bytes));
}

}  // namespace
}  // namespace bytecomp::compress
