// The work of one GPU thread of the CUDA codecs (a group of 8 qsgd codes, a byte of 4 ternary
// codes, a 32-bit word of sign bits, one radix-select digit, one varint), as host-and-device
// functions. The kernels in cuda_codecs.cu loop over these; test/unit/cpu_offload runs the
// same functions on the host, thread after thread, and compares the bytes with the CPU codecs,
// so the kernels' arithmetic is tested on machines without a GPU.
//
// `update(i, compensated, decoded)` receives each element's decoded value, for the fused
// error-feedback memory; pass a no-op when there is none.
#pragma once

#include <cstddef>
#include <cstdint>

#include "bytecomp/compress/cuda_feedback.h"
#include "bytecomp/compress/elementwise.h"

#if defined(__CUDACC__)
#define BYTECOMP_HD_TEMPLATE _Pragma("nv_exec_check_disable")
#else
#define BYTECOMP_HD_TEMPLATE
#endif

namespace bytecomp::compress::cuda_threads {

// ---- sign codecs: element i is bit i % 8 of byte i / 8; a little-endian 32-bit word holds
// elements 32w..32w+31 (a warp ballot on the GPU, SignWordBit on the host).

// Stores the word of elements base..base+31 (base a multiple of 32) into the ceil(n/8) bytes at
// bits; the last word stores only the bytes that exist.
BYTECOMP_HD void StoreSignWord(uint8_t* bits, size_t n, size_t base, uint32_t word) {
  const size_t sign_bytes = (n + 7) / 8;
  const size_t byte = base / 8;
  if (byte + 4 <= sign_bytes) {
    for (int k = 0; k < 4; ++k) bits[byte + k] = static_cast<uint8_t>(word >> (8 * k));
  } else {
    for (size_t b = byte; b < sign_bytes; ++b) {
      bits[b] = static_cast<uint8_t>(word >> (8 * (b - byte)));
    }
  }
}

BYTECOMP_HD float SignDecoded(float x, float clear_value, float set_value) {
  return SignBit(x) ? set_value : clear_value;
}

// ---- qsgd: group g holds codes 8g..8g+7, exactly code_bits bytes (the last group fewer).

BYTECOMP_HD_TEMPLATE
template <typename Update>
BYTECOMP_HD void QsgdEncodeGroup(const float* x, size_t n, size_t g, size_t bucket,
                                 const float* norms, uint32_t quantum_num, uint32_t level_bits,
                                 CounterRandom random, uint8_t* packed, Update update) {
  const uint32_t code_bits = level_bits + 1;
  unsigned __int128 acc = 0;
  for (uint32_t j = 0; j < 8; ++j) {
    const size_t i = 8 * g + j;
    if (i >= n) break;
    const float norm = norms[i / bucket];
    const float c = x[i];
    const uint32_t code = QsgdCode(c, norm, quantum_num, level_bits,
                                   UniformFloat(random, static_cast<uint32_t>(i)));
    acc |= static_cast<unsigned __int128>(code) << (j * code_bits);
    update(i, c, QsgdValue(code, level_bits, quantum_num, norm));
  }
  const size_t first_byte = g * code_bits;
  const size_t total_bytes = (n * code_bits + 7) / 8;
  for (uint32_t k = 0; k < code_bits && first_byte + k < total_bytes; ++k) {
    packed[first_byte + k] = static_cast<uint8_t>(acc >> (8 * k));
  }
}

// Decodes group g; returns false when a code is invalid (a level above quantum_num, non-zero
// padding, a bad norm).
BYTECOMP_HD bool QsgdDecodeGroup(const uint8_t* payload, size_t n, size_t g, size_t bucket,
                                 uint32_t quantum_num, uint32_t level_bits, float* out) {
  const uint32_t code_bits = level_bits + 1;
  const size_t buckets = (n + bucket - 1) / bucket;
  const uint8_t* packed = payload + 4 * buckets;
  const size_t total_bytes = (n * code_bits + 7) / 8;
  unsigned __int128 acc = 0;
  const size_t first_byte = g * code_bits;
  for (uint32_t k = 0; k < code_bits && first_byte + k < total_bytes; ++k) {
    acc |= static_cast<unsigned __int128>(packed[first_byte + k]) << (8 * k);
  }
  const uint32_t mask = (1u << code_bits) - 1u;
  bool ok = true;
  for (uint32_t j = 0; j < 8; ++j) {
    const size_t i = 8 * g + j;
    const uint32_t code = static_cast<uint32_t>(acc >> (j * code_bits)) & mask;
    if (i >= n) {
      ok = ok && code == 0;
      continue;
    }
    ok = ok && (code & ((1u << level_bits) - 1u)) <= quantum_num;
    const size_t b = i / bucket;
    uint32_t nb = 0;
    for (int k = 0; k < 4; ++k) nb |= static_cast<uint32_t>(payload[4 * b + k]) << (8 * k);
    const float norm = BitsToFloat(nb);
    ok = ok && IsFiniteFloat(norm) && !(norm < 0.0f);
    out[i] = QsgdValue(code, level_bits, quantum_num, norm);
  }
  return ok;
}

// ---- terngrad: byte g holds codes 4g..4g+3.

BYTECOMP_HD_TEMPLATE
template <typename Update>
BYTECOMP_HD uint8_t TernEncodeByte(const float* x, size_t n, size_t g, float clip, float scale,
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

BYTECOMP_HD bool TernDecodeByte(uint8_t byte, size_t n, size_t g, float scale, float* out) {
  bool ok = true;
  for (uint32_t j = 0; j < 4; ++j) {
    const size_t i = 4 * g + j;
    const uint32_t c = UnpackTernary(byte, j);
    if (i >= n) {
      ok = ok && c == 0;
      continue;
    }
    ok = ok && c != 3u;
    out[i] = TernaryValue(c, scale);
  }
  return ok;
}

// ---- natural

BYTECOMP_HD bool NaturalCodeValid(uint8_t code, uint32_t exponent_low) {
  const uint32_t c = code & 0x7fu;
  return code != 0x80u && !(c > 0 && exponent_low + c - 1 > 254);
}

// ---- topk radix select: 8 bits a pass from the top of the |x| bit pattern.

// Whether |x| bits a belong to this pass (their bits above the current digit match prefix).
BYTECOMP_HD bool RadixMatches(uint32_t a, uint32_t prefix, int shift) {
  const uint32_t high_mask = shift >= 24 ? 0u : ~((1u << (shift + 8)) - 1u);
  return (a & high_mask) == (prefix & high_mask);
}

// Picks the digit of this pass from its 256-bin histogram: the highest digit where the count
// of larger elements reaches need; updates prefix and need (the elements still to take among
// those equal to the new prefix). After the pass at shift 0, prefix is the k-th largest bit
// pattern and need the number of elements equal to it to keep (the first ones in index order).
BYTECOMP_HD void RadixSelectDigit(const uint32_t* hist, int shift, uint32_t* prefix,
                                  uint32_t* need) {
  uint32_t above = 0;
  int digit = 255;
  for (; digit > 0; --digit) {
    if (above + hist[digit] >= *need) break;
    above += hist[digit];
  }
  *need -= above;
  *prefix |= static_cast<uint32_t>(digit) << shift;
}

// ---- sparse index sections (sparse_format.h)

BYTECOMP_HD uint32_t IndexDelta(const uint32_t* idx, size_t j) {
  return idx[j] - (j == 0 ? 0u : idx[j - 1] + 1u);
}

BYTECOMP_HD uint32_t VarintLength(uint32_t d) {
  uint32_t bits = 1;
  while (bits < 32 && (d >> bits) != 0) ++bits;
  return (bits + 6u) / 7u;
}

BYTECOMP_HD void WriteVarint(uint8_t* p, uint32_t d) {
  while (d >= 0x80u) {
    *p++ = static_cast<uint8_t>(d | 0x80u);
    d >>= 7;
  }
  *p = static_cast<uint8_t>(d);
}

// Delta j of a bit-packed section starts at bit j * width: the bits to OR into the 32-bit
// little-endian word bit / 32 (low) and the next one (high, non-zero when it straddles).
BYTECOMP_HD void BitPackDeltaWords(size_t j, uint32_t width, uint32_t delta, size_t* word,
                                   uint32_t* low, uint32_t* high) {
  const uint64_t bit = static_cast<uint64_t>(j) * width;
  const uint64_t shifted = static_cast<uint64_t>(delta) << (bit % 32);
  *word = static_cast<size_t>(bit / 32);
  *low = static_cast<uint32_t>(shifted);
  *high = static_cast<uint32_t>(shifted >> 32);
}

struct IndexSectionPlan {
  uint8_t encoding = 0;  // 0 raw, 1 bit-packed deltas, 2 varint deltas
  uint8_t width = 0;
  size_t bytes = 0;
};

// The smallest encoding, ties to the earlier one (sparse_format.cc's PlanIndices).
BYTECOMP_HD IndexSectionPlan ChooseIndexPlan(size_t k, uint32_t max_delta, size_t varint_bytes) {
  IndexSectionPlan plan;
  plan.bytes = 4 * k;
  uint32_t width = 0;
  while (width < 32 && (max_delta >> width) != 0) ++width;
  const size_t packed = (k * width + 7) / 8;
  if (packed < plan.bytes) {
    plan.encoding = 1;
    plan.width = static_cast<uint8_t>(width);
    plan.bytes = packed;
  }
  if (varint_bytes < plan.bytes) {
    plan.encoding = 2;
    plan.width = 0;
    plan.bytes = varint_bytes;
  }
  return plan;
}

}  // namespace bytecomp::compress::cuda_threads
