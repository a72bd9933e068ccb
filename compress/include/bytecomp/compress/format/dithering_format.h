// dithering's payload, written and read by the CPU codec (compress/src/quant_dithering.cc) and
// the CUDA one (compress/cuda/src/quant_more_kernels.cu). Little-endian:
//   u32 n (checked against the decode length), f32 norm (max |x|, or the L2 norm:
//   qsgd::NormFromSumOfSquares of the sum of squares in double), then n codes of
//   b = BitsFor(k) + 1 bits (the level below a sign bit, 1 = negative), an LSB-first bit stream
//   (bit_stream.h), padding bits 0. Level j stands for j/k (linear) or 2^(j-k) (natural; 0 for
//   j = 0) of the norm; the level of |x| * (1 / norm) is drawn with UniformFloat(r, i)
//   (elementwise.h DitherCode). Size: 8 + ceil(n * b / 8).
// Decoders reject a wrong size or count, a non-finite or negative norm, a level above k and
// non-zero padding bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/bit_stream.h"
#include "bytecomp/compress/format/format_error.h"
#include "bytecomp/compress/format/host_device.h"
#include "bytecomp/compress/format/little_endian.h"
#include "bytecomp/compress/format/qsgd_format.h"  // NormFromSumOfSquares

namespace bytecomp::compress::dithering {

constexpr size_t kHeaderBytes = 8;

// The parameters beyond their own ranges (host only; both codecs' factories): the natural
// partition's levels 2^(j-k) need k <= 127.
inline absl::Status CheckParams(int64_t k, bool natural) {
  if (!natural || k <= 127) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("codec 'dithering': k = ", k,
                   " is out of range for partition=natural (levels 2^(j-k) need k in [1, 127])"));
}

BYTECOMP_HD size_t PayloadBytes(size_t n, uint32_t level_bits) {
  return kHeaderBytes + PackedBytes(n, static_cast<int>(level_bits + 1));
}

// The norm from the input's reductions: the L2 norm from its sum of squares (in double), or
// max |x| from its largest |x| bit pattern.
BYTECOMP_HD float Norm(bool l2, double sum_of_squares, uint32_t max_abs_bits) {
  return l2 ? qsgd::NormFromSumOfSquares(sum_of_squares) : BitsToFloat(max_abs_bits);
}

// What a code decodes to: sign * (level value * norm).
BYTECOMP_HD float Value(uint32_t code, uint32_t level_bits, uint32_t k, bool natural, float norm) {
  const uint32_t level = code & ((1u << level_bits) - 1u);
  const float magnitude =
      (natural ? DitherNaturalValue(level, k) : DitherLinearValue(level, k)) * norm;
  return (code >> level_bits) ? -magnitude : magnitude;
}

BYTECOMP_HD FormatError CheckLevel(uint32_t level, uint32_t k) {
  if (level <= k) return FormatError();
  return MakeFormatError(FormatErrorCode::kLevelAboveK, level, k);
}

// ---- the GPU's decomposition: one thread a group of 8 codes (bit_stream.h PutCodeGroup). The
// host tests replay them against the CPU codec.

// Encodes group g into the codes at packed; update(i, x_i, decoded_i) as qsgd::EncodeGroup.
BYTECOMP_HD_TEMPLATE
template <typename Update>
BYTECOMP_HD void EncodeGroup(const float* x, size_t n, size_t g, float norm, uint32_t k,
                             uint32_t level_bits, bool natural, CounterRandom random,
                             uint8_t* packed, Update update) {
  const float inverse_norm = 1.0f / norm;
  PutCodeGroup(n, g, level_bits + 1, packed, [&](size_t i) {
    const float c = x[i];
    const uint32_t code = DitherCode(c, inverse_norm, k, level_bits, natural,
                                     UniformFloat(random, static_cast<uint32_t>(i)));
    update(i, c, Value(code, level_bits, k, natural, norm));
    return code;
  });
}

// Decodes group g of the codes at packed into out; checks its levels and padding bits.
BYTECOMP_HD FormatError DecodeGroup(const uint8_t* packed, size_t n, size_t g, float norm,
                                    uint32_t k, uint32_t level_bits, bool natural, float* out) {
  uint32_t codes[8];
  GetCodeGroup(packed, n, g, level_bits + 1, codes);
  FormatError error;
  for (uint32_t j = 0; j < 8; ++j) {
    const size_t i = 8 * g + j;
    if (i >= n) {
      if (codes[j] != 0 && error.ok()) {
        error = MakeFormatError(FormatErrorCode::kCodePaddingNotZero);
      }
      continue;
    }
    if (error.ok()) error = CheckLevel(codes[j] & ((1u << level_bits) - 1u), k);
    out[i] = Value(codes[j], level_bits, k, natural, norm);
  }
  return error;
}

}  // namespace bytecomp::compress::dithering
