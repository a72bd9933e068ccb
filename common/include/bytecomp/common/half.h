// IEEE fp16 and bfloat16 conversions. __host__ __device__ so the CUDA kernels share this math
// with the CPU code that the unit tests exercise.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define BYTECOMP_HD __host__ __device__ __forceinline__
#else
#define BYTECOMP_HD inline
#endif

namespace bytecomp {

BYTECOMP_HD uint32_t FloatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

BYTECOMP_HD float BitsToFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// Round to nearest even; overflow to inf; NaN stays NaN.
BYTECOMP_HD uint16_t FloatToHalfBits(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520
  if (abs < 0x38800000u) {                                               // subnormal half or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);           // < 2^-25 rounds to 0
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(abs >> 23);  // 14 + (113 - exp)
    const uint32_t half_mant = mant >> (shift);
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1);
    uint32_t r = half_mant + ((rem > halfway || (rem == halfway && (half_mant & 1u))) ? 1u : 0u);
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15
  const uint32_t rem = r & 0x1fffu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return static_cast<uint16_t>(sign | r);
}

BYTECOMP_HD float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return BitsToFloat(sign);
    // Subnormal: normalise.
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    mant &= 0x3ffu;
    return BitsToFloat(sign | static_cast<uint32_t>(112 - e) << 23 | mant << 13);
  }
  if (exp == 31) return BitsToFloat(sign | 0x7f800000u | mant << 13);
  return BitsToFloat(sign | (exp + 112u) << 23 | mant << 13);
}

// bfloat16: the top 16 bits of the float, round to nearest even; NaN stays NaN.
BYTECOMP_HD uint16_t FloatToBFloat16Bits(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

BYTECOMP_HD float BFloat16BitsToFloat(uint16_t b) {
  return BitsToFloat(static_cast<uint32_t>(b) << 16);
}

}  // namespace bytecomp
