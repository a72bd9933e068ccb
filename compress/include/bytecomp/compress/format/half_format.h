// The payloads of fp16 and bf16 (no header: the element count n travels in the data-plane
// header and the payload size must match it): n IEEE binary16 values, round to nearest even,
// saturated to +-65504; or n bfloat16 values (fp32's top 16 bits, round to nearest even),
// saturated to +-3.3895e38. A finite input never becomes Inf; decoders reject a payload holding
// NaN or Inf. Written by the CPU codecs (compress/src/basic_codecs.cc: these functions in the
// scalar paths, F16C and AVX2 otherwise) and the CUDA ones (compress/cuda/src/basic_kernels.cu).
#pragma once

#include <cstddef>
#include <cstdint>

#include "bytecomp/compress/format/host_device.h"

namespace bytecomp::compress::half {

constexpr float kHalfMax = 65504.0f;
// (bits & 0x7fff) at or above these is Inf or NaN.
constexpr uint32_t kHalfNonFinite = 0x7c00u;
constexpr uint32_t kBFloat16NonFinite = 0x7f80u;

BYTECOMP_HD size_t PayloadBytes(size_t n) { return 2 * n; }

BYTECOMP_HD uint16_t SaturatingHalfBits(float x) {
  const float clamped = x < -kHalfMax ? -kHalfMax : (x > kHalfMax ? kHalfMax : x);
  return FloatToHalfBits(clamped);
}

// Rounds the magnitude to nearest even, then saturates below Inf (0x7f80).
BYTECOMP_HD uint16_t SaturatingBFloat16Bits(float x) {
  const uint32_t bits = FloatBits(x);
  const uint32_t a = bits & 0x7fffffffu;
  uint32_t r = (a + 0x7fffu + ((a >> 16) & 1u)) >> 16;
  r = r < 0x7f7fu ? r : 0x7f7fu;
  return static_cast<uint16_t>(r | ((bits >> 16) & 0x8000u));
}

BYTECOMP_HD bool IsFiniteHalfBits(uint16_t h, bool bfloat) {
  return (h & 0x7fffu) < (bfloat ? kBFloat16NonFinite : kHalfNonFinite);
}

}  // namespace bytecomp::compress::half
