#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/match.h"
#include "bytecomp/common/half.h"
#include "codec_test_util.h"

namespace bytecomp::compress {
namespace {

using testing::AdversarialInputs;
using testing::DecodeToVector;
using testing::EncodeToVector;
using testing::MustCreate;
using testing::RandomNormal;
using testing::RoundTrip;
using testing::TestContext;

TEST(NoneCodecTest, RoundTripIsExactAndSizeIs4n) {
  auto codec = MustCreate("none");
  for (const auto& in : AdversarialInputs()) {
    auto enc = EncodeToVector(*codec, in.values, TestContext());
    ASSERT_TRUE(enc.ok()) << in.name << ": " << enc.status();
    EXPECT_EQ(enc->size(), 4 * in.values.size()) << in.name;
    auto dec = DecodeToVector(*codec, *enc, TestContext(), in.values.size());
    ASSERT_TRUE(dec.ok()) << dec.status();
    EXPECT_EQ(*dec, in.values) << in.name;
  }
}

// Relative error bound of a rounding to `mantissa_bits` explicit bits, plus the smallest
// subnormal step for values below the normal range.
void ExpectHalfLikeRoundTrip(const std::string& name, int mantissa_bits, float max_finite,
                             float min_normal, float subnormal_step) {
  auto codec = MustCreate(name);
  for (const auto& in : AdversarialInputs()) {
    auto enc = EncodeToVector(*codec, in.values, TestContext());
    ASSERT_TRUE(enc.ok()) << in.name << ": " << enc.status();
    EXPECT_EQ(enc->size(), 2 * in.values.size()) << in.name;
    auto dec = DecodeToVector(*codec, *enc, TestContext(), in.values.size());
    ASSERT_TRUE(dec.ok()) << dec.status();
    for (size_t i = 0; i < in.values.size(); ++i) {
      const float x = in.values[i];
      const float y = (*dec)[i];
      ASSERT_TRUE(std::isfinite(y)) << name << " " << in.name << " element " << i;
      if (std::fabs(x) >= max_finite) {
        EXPECT_EQ(y, std::copysign(max_finite, x)) << "saturates: " << in.name;
      } else if (std::fabs(x) >= min_normal) {
        EXPECT_LE(std::fabs(y - x), std::ldexp(std::fabs(x), -(mantissa_bits + 1)) * 1.0001f)
            << name << " " << in.name << " element " << i;
      } else {
        EXPECT_LE(std::fabs(y - x), subnormal_step / 2 * 1.0001f) << name << " " << in.name;
      }
    }
  }
}

TEST(HalfCodecTest, Fp16RoundTripWithinHalfUlpAndSaturates) {
  ExpectHalfLikeRoundTrip("fp16", 10, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f);
}

TEST(HalfCodecTest, Bf16RoundTripWithinHalfUlpAndSaturates) {
  ExpectHalfLikeRoundTrip("bf16", 7, 3.38953139e38f, std::numeric_limits<float>::min(),
                          std::numeric_limits<float>::denorm_min() * 65536.0f);
}

TEST(HalfCodecTest, Fp16MatchesTheSharedScalarConversion) {
  // The vector path must agree bit for bit with half.h (which the GPU kernels share).
  auto codec = MustCreate("fp16");
  std::vector<float> in = RandomNormal(1003, 11, 100.0f);
  in.push_back(6.0e-8f);   // subnormal half
  in.push_back(-3.1e-5f);  // subnormal half
  in.push_back(65519.0f);  // rounds to 65504
  auto enc = EncodeToVector(*codec, in, TestContext());
  ASSERT_TRUE(enc.ok());
  for (size_t i = 0; i < in.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, enc->data() + 2 * i, 2);
    EXPECT_EQ(h, FloatToHalfBits(in[i])) << i << " " << in[i];
  }
}

TEST(HalfCodecTest, Bf16MatchesTheSharedScalarConversion) {
  auto codec = MustCreate("bf16");
  std::vector<float> in = RandomNormal(1003, 12, 1e10f);
  in.push_back(1.00390625f);  // exactly halfway between two bf16 values: ties to even
  in.push_back(1.01171875f);  // halfway, rounds up to even
  in.push_back(-1e-40f);      // subnormal
  auto enc = EncodeToVector(*codec, in, TestContext());
  ASSERT_TRUE(enc.ok());
  for (size_t i = 0; i < in.size(); ++i) {
    uint16_t b;
    std::memcpy(&b, enc->data() + 2 * i, 2);
    EXPECT_EQ(b, FloatToBFloat16Bits(in[i])) << i << " " << in[i];
  }
}

TEST(BasicCodecsTest, NonFiniteInputIsAnErrorNamingTheIndex) {
  for (const char* name : {"none", "fp16", "bf16"}) {
    auto codec = MustCreate(name);
    for (float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
          -std::numeric_limits<float>::infinity()}) {
      std::vector<float> in = RandomNormal(100, 3);
      in[37] = bad;
      auto enc = EncodeToVector(*codec, in, TestContext());
      ASSERT_FALSE(enc.ok()) << name;
      EXPECT_EQ(enc.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_TRUE(absl::StrContains(enc.status().message(), "element 37 of 100")) << enc.status();
    }
  }
}

TEST(BasicCodecsTest, MalformedPayloadsAreRejected) {
  for (const char* name : {"none", "fp16", "bf16"}) {
    auto codec = MustCreate(name);
    const std::vector<float> in = RandomNormal(64, 5);
    auto enc = EncodeToVector(*codec, in, TestContext());
    ASSERT_TRUE(enc.ok());
    std::vector<float> out(64);
    // Wrong sizes.
    EXPECT_FALSE(codec
                     ->Decode(absl::MakeConstSpan(enc->data(), enc->size() - 1), TestContext(),
                              absl::MakeSpan(out))
                     .ok());
    EXPECT_FALSE(codec->Decode(*enc, TestContext(), absl::MakeSpan(out).first(63)).ok());
    // A NaN smuggled into the payload.
    std::vector<uint8_t> bad = *enc;
    if (std::string(name) == "none") {
      const float nan = std::numeric_limits<float>::quiet_NaN();
      std::memcpy(bad.data() + 8, &nan, 4);
    } else {
      bad[2 * 5] = 0xff;
      bad[2 * 5 + 1] = 0x7f;
    }
    auto status = codec->Decode(bad, TestContext(), absl::MakeSpan(out));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << name;
    // DecodeAdd leaves the accumulator untouched on a bad payload.
    std::vector<float> acc(64, 1.0f);
    EXPECT_FALSE(codec->DecodeAdd(bad, TestContext(), absl::MakeSpan(acc)).ok());
    EXPECT_EQ(acc, std::vector<float>(64, 1.0f)) << name;
  }
}

TEST(BasicCodecsTest, UnalignedBuffersWork) {
  for (const char* name : {"none", "fp16", "bf16"}) {
    auto codec = MustCreate(name);
    const std::vector<float> in = RandomNormal(77, 9);
    std::vector<uint8_t> buf(codec->MaxEncodedBytes(77) + 1);
    auto bytes = codec->Encode(in, TestContext(), absl::MakeSpan(buf).subspan(1));
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    std::vector<float> out(77), out_aligned(77);
    ASSERT_TRUE(codec
                    ->Decode(absl::MakeConstSpan(buf).subspan(1, *bytes), TestContext(),
                             absl::MakeSpan(out))
                    .ok());
    auto direct = RoundTrip(*codec, in, TestContext());
    ASSERT_TRUE(direct.ok());
    EXPECT_EQ(out, *direct) << name;
  }
}

TEST(BasicCodecsTest, DecodeAddAddsAndTooSmallOutputIsAnError) {
  for (const char* name : {"none", "fp16", "bf16"}) {
    auto codec = MustCreate(name);
    const std::vector<float> in = RandomNormal(100, 13);
    auto enc = EncodeToVector(*codec, in, TestContext());
    ASSERT_TRUE(enc.ok());
    auto dec = DecodeToVector(*codec, *enc, TestContext(), 100);
    ASSERT_TRUE(dec.ok());
    std::vector<float> acc(100, 2.0f);
    ASSERT_TRUE(codec->DecodeAdd(*enc, TestContext(), absl::MakeSpan(acc)).ok());
    for (size_t i = 0; i < 100; ++i) EXPECT_FLOAT_EQ(acc[i], 2.0f + (*dec)[i]);
    std::vector<uint8_t> small(codec->MaxEncodedBytes(100) - 1);
    EXPECT_FALSE(codec->Encode(in, TestContext(), absl::MakeSpan(small)).ok()) << name;
  }
}

}  // namespace
}  // namespace bytecomp::compress
