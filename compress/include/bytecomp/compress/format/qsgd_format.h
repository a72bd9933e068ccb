// qsgd's payload, written and read by the CPU codec (compress/src/quant_qsgd.cc) and the CUDA
// one (compress/cuda/src/quant_kernels.cu). Little-endian:
//   u32 n (checked against the decode length), Buckets(n, bucket) f32 bucket L2 norms, then
//   n codes of b = level_bits + 1 bits (level_bits = BitsFor(quantum_num) level bits below a
//   sign bit, 1 = negative), an LSB-first bit stream (bit_stream.h), padding bits 0.
//   Decoded: sign * (level / quantum_num) * norm (elementwise.h QsgdCode, QsgdValue).
//   Size: 4 + 4 * ceil(n / bucket) + ceil(n * b / 8); with the defaults (127, 128):
//   4 + 4 * ceil(n / 128) + n.
// A bucket's norm is NormFromSumOfSquares of its sum of squares in double; decoders reject a
// wrong size or count, a non-finite or negative norm, a level above quantum_num and non-zero
// padding bits.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/bit_stream.h"
#include "bytecomp/compress/format/format_error.h"
#include "bytecomp/compress/format/host_device.h"
#include "bytecomp/compress/format/little_endian.h"

namespace bytecomp::compress::qsgd {

BYTECOMP_HD size_t Buckets(size_t n, size_t bucket) { return (n + bucket - 1) / bucket; }

BYTECOMP_HD size_t PayloadBytes(size_t n, size_t bucket, uint32_t level_bits) {
  return 4 + 4 * Buckets(n, bucket) + PackedBytes(n, static_cast<int>(level_bits + 1));
}

// A norm as a float: sqrt of the sum of squares (double); a norm beyond the float range
// (values near FLT_MAX) is clamped, which keeps |x| / norm <= 1 and the decoded values finite.
// (dithering's l2 norm is the same.)
BYTECOMP_HD float NormFromSumOfSquares(double sum_of_squares) {
  const double root = std::sqrt(sum_of_squares);
  const double kFloatMax = 0x1.fffffep127;                         // FLT_MAX
  return static_cast<float>(kFloatMax < root ? kFloatMax : root);  // std::min's choice
}

BYTECOMP_HD FormatError CheckNorm(float norm, size_t bucket_index) {
  if ((FloatBits(norm) & 0x7fffffffu) >= 0x7f800000u) {
    return MakeFormatError(FormatErrorCode::kBucketNormNotFinite, bucket_index);
  }
  if (norm < 0.0f) {
    return MakeFormatError(FormatErrorCode::kBucketNormNegative, bucket_index, FloatBits(norm));
  }
  return FormatError();
}

BYTECOMP_HD FormatError CheckLevel(uint32_t level, uint32_t quantum_num) {
  if (level <= quantum_num) return FormatError();
  return MakeFormatError(FormatErrorCode::kLevelAboveQuantum, level, quantum_num);
}

// ---- the GPU's decomposition: one thread a group of 8 codes (bit_stream.h PutCodeGroup), which
// fill exactly b bytes (the last group fewer). The host tests replay them against the CPU codec.

// Encodes group g; update(i, x_i, decoded_i) receives each element's decoded value, for a fused
// memory (a no-op when there is none).
BYTECOMP_HD_TEMPLATE
template <typename Update>
BYTECOMP_HD void EncodeGroup(const float* x, size_t n, size_t g, size_t bucket, const float* norms,
                             uint32_t quantum_num, uint32_t level_bits, CounterRandom random,
                             uint8_t* packed, Update update) {
  PutCodeGroup(n, g, level_bits + 1, packed, [&](size_t i) {
    const float norm = norms[i / bucket];
    const float c = x[i];
    const uint32_t code =
        QsgdCode(c, norm, quantum_num, level_bits, UniformFloat(random, static_cast<uint32_t>(i)));
    update(i, c, QsgdValue(code, level_bits, quantum_num, norm));
    return code;
  });
}

// Decodes group g of the payload after its u32 n (the norms, then the codes) into out. Checks
// the group's norms, levels and padding bits.
BYTECOMP_HD FormatError DecodeGroup(const uint8_t* payload, size_t n, size_t g, size_t bucket,
                                    uint32_t quantum_num, uint32_t level_bits, float* out) {
  uint32_t codes[8];
  GetCodeGroup(payload + 4 * Buckets(n, bucket), n, g, level_bits + 1, codes);
  FormatError error;
  for (uint32_t j = 0; j < 8; ++j) {
    const size_t i = 8 * g + j;
    const uint32_t code = codes[j];
    if (i >= n) {
      if (code != 0 && error.ok()) error = MakeFormatError(FormatErrorCode::kCodePaddingNotZero);
      continue;
    }
    const float norm = GetF32(payload + 4 * (i / bucket));
    if (error.ok()) error = CheckNorm(norm, i / bucket);
    if (error.ok()) error = CheckLevel(code & ((1u << level_bits) - 1u), quantum_num);
    out[i] = QsgdValue(code, level_bits, quantum_num, norm);
  }
  return error;
}

// ---- 8-bit codes (level_bits == 7: quantum_num 64..127, the default 127 among them): byte i is
// element i's code, the bytes the groups write too, so that a GPU thread takes an element.

BYTECOMP_HD bool CodesAreBytes(uint32_t level_bits) { return level_bits == 7; }

// Element i's code byte; update(i, x_i, decoded_i) as EncodeGroup's.
BYTECOMP_HD_TEMPLATE
template <typename Update>
BYTECOMP_HD uint8_t EncodeByte(const float* x, size_t i, size_t bucket, const float* norms,
                               uint32_t quantum_num, CounterRandom random, Update update) {
  const float norm = norms[i / bucket];
  const float c = x[i];
  const uint32_t code =
      QsgdCode(c, norm, quantum_num, 7, UniformFloat(random, static_cast<uint32_t>(i)));
  update(i, c, QsgdValue(code, 7, quantum_num, norm));
  return static_cast<uint8_t>(code);
}

// Decodes element i of the payload after its u32 n into out[i], with DecodeGroup's checks.
BYTECOMP_HD FormatError DecodeByte(const uint8_t* payload, size_t n, size_t i, size_t bucket,
                                   uint32_t quantum_num, float* out) {
  const uint32_t code = payload[4 * Buckets(n, bucket) + i];
  const float norm = GetF32(payload + 4 * (i / bucket));
  FormatError error = CheckNorm(norm, i / bucket);
  if (error.ok()) error = CheckLevel(code & 0x7fu, quantum_num);
  out[i] = QsgdValue(code, 7, quantum_num, norm);
  return error;
}

}  // namespace bytecomp::compress::qsgd
