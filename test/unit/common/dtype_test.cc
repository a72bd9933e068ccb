#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "bytecomp/common.h"

namespace bytecomp {
namespace {

TEST(HalfTest, ExactValuesRoundTrip) {
  for (float v : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 0.000061035156f, 5.9604645e-08f}) {
    EXPECT_EQ(HalfBitsToFloat(FloatToHalfBits(v)), v) << v;
  }
}

TEST(HalfTest, AllHalfBitPatternsRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = HalfBitsToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfBitsToFloat(FloatToHalfBits(f))));
      continue;
    }
    EXPECT_EQ(FloatToHalfBits(f), h) << h;
  }
}

TEST(HalfTest, RoundsToNearestEvenAndOverflows) {
  EXPECT_EQ(HalfBitsToFloat(FloatToHalfBits(1.0f + 1.0f / 2048)), 1.0f);  // tie -> even
  EXPECT_EQ(HalfBitsToFloat(FloatToHalfBits(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);
  EXPECT_TRUE(std::isinf(HalfBitsToFloat(FloatToHalfBits(70000.0f))));
  EXPECT_TRUE(std::isnan(HalfBitsToFloat(FloatToHalfBits(std::nanf("")))));
}

TEST(BFloat16Test, RoundTripAndRounding) {
  EXPECT_EQ(BFloat16BitsToFloat(FloatToBFloat16Bits(1.5f)), 1.5f);
  EXPECT_EQ(BFloat16BitsToFloat(FloatToBFloat16Bits(-3.0f)), -3.0f);
  EXPECT_TRUE(std::isnan(BFloat16BitsToFloat(FloatToBFloat16Bits(std::nanf("")))));
  EXPECT_EQ(BFloat16BitsToFloat(FloatToBFloat16Bits(1.0f + 1.0f / 256)), 1.0f);  // tie -> even
}

TEST(DTypeTest, AddToFloat32EveryType) {
  const size_t n = 1001;  // not a multiple of the vector width
  for (DType t : {proto::DTYPE_FLOAT32, proto::DTYPE_FLOAT16, proto::DTYPE_BFLOAT16}) {
    std::vector<float> values(n), acc(n, 1.0f);
    for (size_t i = 0; i < n; ++i) values[i] = static_cast<float>(i % 50) - 25.0f;
    std::vector<uint8_t> encoded(n * DTypeSize(t));
    FromFloat32(t, values.data(), encoded.data(), n);
    AddToFloat32(t, encoded.data(), acc.data(), n);
    std::vector<float> back(n);
    ToFloat32(t, encoded.data(), back.data(), n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(acc[i], values[i] + 1.0f) << DTypeName(t) << " " << i;
      ASSERT_EQ(back[i], values[i]);
    }
  }
}

// A payload from the network may start at an odd address (ZeroMQ's small messages): the
// widening reads it through an aligned copy, over more than one chunk of it here.
TEST(DTypeTest, MisalignedSourceWidensAndAddsTheSame) {
  const size_t n = 700;
  for (DType t : {proto::DTYPE_FLOAT32, proto::DTYPE_FLOAT16, proto::DTYPE_BFLOAT16}) {
    std::vector<float> values(n);
    for (size_t i = 0; i < n; ++i) values[i] = static_cast<float>(i % 40) - 20.0f;
    std::vector<uint8_t> encoded(n * DTypeSize(t)), buffer(encoded.size() + 1);
    FromFloat32(t, values.data(), encoded.data(), n);
    std::memcpy(buffer.data() + 1, encoded.data(), encoded.size());
    std::vector<float> back(n), acc(n, 0.5f);
    ToFloat32(t, buffer.data() + 1, back.data(), n);
    AddToFloat32(t, buffer.data() + 1, acc.data(), n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(back[i], values[i]) << DTypeName(t) << " " << i;
      ASSERT_EQ(acc[i], values[i] + 0.5f) << DTypeName(t) << " " << i;
    }
  }
}

TEST(DTypeTest, ParseNamesAndRejectsUnknown) {
  EXPECT_EQ(*ParseDType("fp16"), proto::DTYPE_FLOAT16);
  absl::StatusOr<DType> bad = ParseDType("int8");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("fp32, fp16, bf16"), std::string::npos);
  EXPECT_EQ(DTypeSize(static_cast<DType>(7)), 0u);
}

}  // namespace
}  // namespace bytecomp
