// terngrad's payload, written and read by the CPU codec (compress/src/quant_terngrad.cc) and
// the CUDA one (compress/cuda/src/quant_kernels.cu). Little-endian:
//   u32 n (checked against the decode length), f32 scale, then n 2-bit codes, 4 a byte, element
//   j of a group in bits 2j..2j+1 (0 = 0, 1 = +scale, 2 = -scale, 3 invalid), padding bits 0.
//   Size: 8 + ceil(n/4).
// The scale and the clip come from the tensor's sum of squares and largest |x| (ClipAndScale);
// each code is drawn by elementwise.h TernaryCode.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/bit_stream.h"
#include "bytecomp/compress/format/format_error.h"
#include "bytecomp/compress/format/host_device.h"

namespace bytecomp::compress::terngrad {

BYTECOMP_HD size_t CodeBytes(size_t n) { return (n + 3) / 4; }
BYTECOMP_HD size_t PayloadBytes(size_t n) { return 8 + CodeBytes(n); }

// GRACE clips at 2.5 standard deviations about zero; we use the root mean square (the standard
// deviation about zero, equal to GRACE's for zero-mean gradients) so that a constant tensor is
// not clipped to 0. scale = min(max |x|, clip).
struct ClipScale {
  float clip = 0.0f;
  float scale = 0.0f;
};
BYTECOMP_HD ClipScale ClipAndScale(double sum_of_squares, size_t n, uint32_t max_abs_bits) {
  const double rms = n == 0 ? 0.0 : std::sqrt(sum_of_squares / n);
  const double clip = 2.5 * rms;
  const double kFloatMax = 0x1.fffffep127;  // FLT_MAX
  ClipScale r;
  r.clip = static_cast<float>(kFloatMax < clip ? kFloatMax : clip);  // std::min's choice
  const float max_abs = BitsToFloat(max_abs_bits);
  r.scale = r.clip < max_abs ? r.clip : max_abs;
  return r;
}

// Whether the padding codes after element n in the last byte are 0.
BYTECOMP_HD bool PaddingIsZero(const uint8_t* codes, size_t n) {
  return PaddingBitsZero(codes, n, 2);
}

// Whether a byte holds the invalid code 3 (in any of its four codes).
BYTECOMP_HD bool HasCode3(uint8_t byte) { return (byte & (byte >> 1) & 0x55u) != 0; }

// ---- the GPU's decomposition: one thread a byte of 4 codes. The host tests replay them
// against the CPU codec.

// Encodes byte g; update(i, x_i, decoded_i) as qsgd::EncodeGroup.
BYTECOMP_HD_TEMPLATE
template <typename Update>
BYTECOMP_HD uint8_t EncodeByte(const float* x, size_t n, size_t g, float clip, float scale,
                               CounterRandom random, Update update) {
  uint32_t c[4] = {0, 0, 0, 0};
  for (uint32_t j = 0; j < 4; ++j) {
    const size_t i = 4 * g + j;
    if (i >= n) break;
    const float v = x[i];
    c[j] = TernaryCode(v, clip, scale, UniformFloat(random, static_cast<uint32_t>(i)));
    update(i, v, TernaryValue(c[j], scale));
  }
  return PackTernary4(c[0], c[1], c[2], c[3]);
}

// Decodes byte g of the codes into out; reports code 3 and non-zero padding.
BYTECOMP_HD FormatError DecodeByte(uint8_t byte, size_t n, size_t g, float scale, float* out) {
  FormatError error;
  for (uint32_t j = 0; j < 4; ++j) {
    const size_t i = 4 * g + j;
    const uint32_t c = UnpackTernary(byte, j);
    if (i >= n) {
      if (c != 0 && error.ok()) error = MakeFormatError(FormatErrorCode::kCodePaddingNotZero);
      continue;
    }
    if (c == 3u && error.ok()) error = MakeFormatError(FormatErrorCode::kTernaryCode3);
    out[i] = TernaryValue(c, scale);
  }
  return error;
}

}  // namespace bytecomp::compress::terngrad
