// Per-element math of the sign, quantisation and low-rank codecs, shared by the CPU codecs
// (compress/src) and the CUDA kernels (compress/cuda) so that both produce the same bytes for
// the same input, context and seed.
//
// Bit-exactness rules, for whoever calls these from a kernel:
// - Every operation here is a single correctly rounded IEEE operation (+, -, *, /, compare),
//   but some expressions have the shape a*b+c, which compilers fuse into one FMA (one
//   rounding) when allowed. So: CUDA kernels that use this header are built with
//   --fmad=false, and CPU files with fp-contract off (the codec sources include
//   compress/src/exact_float_math.h before anything else, because the AVX2 and AVX-512
//   variants (compress/src/simd_kernel.h) would otherwise fuse where the baseline does not).
//   With GCC they use no-trapping-math too: it changes no result and lets GCC vectorise the
//   selects.
// - Reductions (norms, maxima, means) are the caller's business: the CPU codecs accumulate
//   sums of squares and magnitudes in double over 8 interleaved partial sums and round once
//   to float, so another summation order changes the float only in rare rounding ties; a
//   kernel that wants byte-identical payloads in every case reproduces that order
//   (compress/src/quant_kernels.cc SumOfSquares). Maxima are exact in any order.
// - Codecs whose headers depend on such reductions: qsgd (bucket norms), terngrad (scale),
//   dithering (norm), u8bit (max), natural (largest exponent), efsignsgd/onebit (means).
// - Random numbers come from CounterRandom: a stateless hash of (stream, element index), so
//   element i's random number does not depend on how the work is split into threads.
//
// What the CPU codecs compute, per codec, so that a kernel can produce the same payload (the
// wire layouts, and the scalars as functions both sides call, are in format/<codec>_format.h
// for the codecs with kernels, at the top of compress/src/quant_<codec>.cc for the others):
//   random stream   r = MakeCounterRandom(ctx.seed, ctx.key, ctx.round, ctx.node); element i
//                   uses UniformFloat(r, i) or RandomBits(r, i), i the index in the partition.
//   signsgd/signum  SignBit(x) (signum: of m = (1-beta)*g + beta*m_prev, m = g the first time).
//   efsignsgd       scale = (float)(sum |x| / n) in double; SignBit(x).
//   onebit          means of the non-negative and negative parts (double sums); SignBit(x).
//   qsgd            per bucket: norm = (float)min(sqrt(sum x^2 in double), FLT_MAX);
//                   QsgdCode(x, norm, s, BitsFor(s), UniformFloat(r, i)).
//   terngrad        rms = sqrt(sum x^2 / n) in double; clip = (float)min(2.5 * rms, FLT_MAX);
//                   scale = min(max |x|, clip); TernaryCode(x, clip, scale, UniformFloat(r, i)).
//   natural         low = NaturalExponentLow(max biased exponent of |x|);
//                   NaturalCode(x, low, RandomBits(r, i)).
//   u8bit           U8bitCode(x, max |x|).
//   dithering       norm = max |x| or (float)min(sqrt(sum x^2 in double), FLT_MAX);
//                   DitherCode(x, 1.0f / norm, k, BitsFor(k), natural, UniformFloat(r, i)).
//   inceptionn      InceptionnTag(x, eb); InceptionnSteps(x, eb) for tags 1 and 2.
#pragma once

#include <cstdint>

#include "bytecomp/common/half.h"
#include "bytecomp/compress/format/rng.h"  // Mix64: SplitMix64's output function

namespace bytecomp::compress {

// ---------------------------------------------------------------------------------------------
// Counter-based random numbers.

// A bijective 32-bit mixer ("lowbias32", C. Wellons): 32-bit multiplies only, so the CPU loop
// vectorises with AVX2 and the GPU runs it at full rate.
BYTECOMP_HD uint32_t Mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// One random stream: 64 key bits. RandomBits(i) = Mix32(i * golden + k0) ^ k1: one bijective
// mixing round over a Weyl sequence (two 32-bit multiplies per element, which is what the
// encode loops can afford at memory speed). Distinct streams are the same sequence at a
// pseudo-random offset in 2^32 (and xor-ed with k1), so streams of partitions up to 2^24
// elements overlap with a probability below 1%, and an overlap only pairs the random numbers
// of different elements: each stream is still uniform, and rounding stays unbiased.
struct CounterRandom {
  uint32_t k0 = 0;
  uint32_t k1 = 0;
};

// The stream of one encode call: job seed, partition key, round and node (worker rank). Pass
// node = 0 for randomness that every worker must share (randomk indices, PowerSGD's first Q).
BYTECOMP_HD CounterRandom MakeCounterRandom(uint64_t seed, uint64_t key, uint64_t round,
                                            uint64_t node) {
  uint64_t h = Mix64(seed);
  h = Mix64(h ^ key);
  h = Mix64(h ^ round);
  h = Mix64(h ^ (node * 0xd6e8feb86659fd93ull));
  CounterRandom r;
  r.k0 = static_cast<uint32_t>(h);
  r.k1 = static_cast<uint32_t>(h >> 32);
  return r;
}

BYTECOMP_HD uint32_t RandomBits(CounterRandom r, uint32_t index) {
  return Mix32(index * 0x9e3779b9u + r.k0) ^ r.k1;
}

// Uniform in [0, 1) with 24 random bits (every value exactly representable).
// (int32 conversion: vectorises with AVX2, which has no unsigned one.)
BYTECOMP_HD float UniformFromBits(uint32_t bits) {
  return static_cast<float>(static_cast<int32_t>(bits >> 8)) * (1.0f / 16777216.0f);
}

BYTECOMP_HD float UniformFloat(CounterRandom r, uint32_t index) {
  return UniformFromBits(RandomBits(r, index));
}

// ---------------------------------------------------------------------------------------------
// Float inspection.

BYTECOMP_HD bool IsFiniteFloat(float x) { return (FloatBits(x) & 0x7f800000u) != 0x7f800000u; }

BYTECOMP_HD float AbsFloat(float x) { return BitsToFloat(FloatBits(x) & 0x7fffffffu); }

// ---------------------------------------------------------------------------------------------
// Signs. Wire convention of every sign codec: bit 1 = negative (x < 0), bit 0 = non-negative
// (zeros and -0.0 count as non-negative, as GRACE's `tensor >= 0`). Bits are packed LSB first:
// element i is bit (i % 8) of byte i / 8.

BYTECOMP_HD uint32_t SignBit(float x) { return x < 0.0f ? 1u : 0u; }

// +1 for bit 0, -1 for bit 1.
BYTECOMP_HD float SignFromBit(uint32_t bit) { return bit ? -1.0f : 1.0f; }

// Majority vote over summed +-1 votes: ties go to +1, as GRACE's `sum >= 0`.
BYTECOMP_HD float MajoritySign(float vote_sum) { return vote_sum >= 0.0f ? 1.0f : -1.0f; }

// ---------------------------------------------------------------------------------------------
// Stochastic rounding of a non-negative scaled value to an integer level in [0, max_level]:
// floor(v) + 1 with probability v - floor(v). E[level] == v for v in [0, max_level].
// Written without branches (selects only) so that CPU loops vectorise; max_level < 2^24.
BYTECOMP_HD uint32_t StochasticLevel(float scaled, float uniform, uint32_t max_level) {
  const float top = static_cast<float>(static_cast<int32_t>(max_level));
  float v = scaled > 0.0f ? scaled : 0.0f;  // also maps NaN to 0; callers reject NaN before
  v = v < top ? v : top;
  const int32_t lower = static_cast<int32_t>(v);         // truncation == floor for v >= 0
  const float fraction = v - static_cast<float>(lower);  // exact
  return static_cast<uint32_t>(lower + (uniform < fraction ? 1 : 0));
}

// Bits needed for values 0..max_value (at least 1).
BYTECOMP_HD uint32_t BitsFor(uint32_t max_value) {
  uint32_t bits = 1;
  while (bits < 32 && (max_value >> bits) != 0) ++bits;
  return bits;
}

// ---------------------------------------------------------------------------------------------
// QSGD (Alistarh et al.): level = stochastic round of |x| / norm * s, s = quantum_num; code =
// sign bit above level_bits level bits. |x| / norm is computed by division (not |x| * (s/norm))
// so that norms near the float minimum do not overflow s/norm to inf.
BYTECOMP_HD uint32_t QsgdCode(float x, float norm, uint32_t quantum_num, uint32_t level_bits,
                              float uniform) {
  // norm == 0 only for an all-zero bucket: 0/0 is NaN, which StochasticLevel maps to 0.
  const float ratio = AbsFloat(x) / norm;  // in [0, 1] up to rounding
  const uint32_t level = StochasticLevel(
      ratio * static_cast<float>(static_cast<int32_t>(quantum_num)), uniform, quantum_num);
  return (SignBit(x) << level_bits) | level;
}

// (level / s) * norm: the ratio is at most 1, so a norm near FLT_MAX cannot overflow to inf
// (level * (norm / s) can, for some s).
BYTECOMP_HD float QsgdValue(uint32_t code, uint32_t level_bits, uint32_t quantum_num, float norm) {
  const uint32_t level = code & ((1u << level_bits) - 1u);
  const float ratio = static_cast<float>(static_cast<int32_t>(level)) /
                      static_cast<float>(static_cast<int32_t>(quantum_num));
  const float magnitude = ratio * norm;
  return (code >> level_bits) ? -magnitude : magnitude;
}

// ---------------------------------------------------------------------------------------------
// TernGrad (Wen et al.): after clipping |x| to clip, t = sign(x) with probability
// min(|x|, clip) / scale, else 0, where scale = max over the tensor of min(|x|, clip).
// 2-bit codes: 0 = zero, 1 = +scale, 2 = -scale; 3 is invalid on the wire.
// scale == 0 (an all-zero tensor after clipping) gives 0/0 = NaN, and NaN compares false.
BYTECOMP_HD uint32_t TernaryCode(float x, float clip, float scale, float uniform) {
  float magnitude = AbsFloat(x);
  magnitude = magnitude > clip ? clip : magnitude;
  const float probability = magnitude / scale;
  const uint32_t code = x < 0.0f ? 2u : 1u;  // 1 = +scale, 2 = -scale
  return uniform < probability ? code : 0u;
}

BYTECOMP_HD float TernaryValue(uint32_t code, float scale) {
  return code == 1u ? scale : (code == 2u ? -scale : 0.0f);
}

// Four 2-bit codes per byte, element j of the group in bits 2j..2j+1.
BYTECOMP_HD uint8_t PackTernary4(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3) {
  return static_cast<uint8_t>(c0 | (c1 << 2) | (c2 << 4) | (c3 << 6));
}

BYTECOMP_HD uint32_t UnpackTernary(uint8_t byte, uint32_t j) { return (byte >> (2u * j)) & 3u; }

// ---------------------------------------------------------------------------------------------
// Natural compression (Horvath et al.): stochastic rounding of |x| to one of the two powers of
// two around it, unbiased. Byte code: bit 7 = sign (1 negative), bits 0-6: 0 = zero, c in
// 1..127 = 2^(exponent_low + c - 1 - 127) where exponent_low is a per-tensor biased float
// exponent (1..254) chosen by the encoder so that the largest magnitude fits (see
// NaturalExponentLow). Magnitudes below 2^(exponent_low-127) round to 0 or to that power,
// unbiased; the only bias is at |x| >= 2^127, which never rounds up (2^128 is inf).

// The per-tensor base: max_biased_exponent is the largest biased exponent of |x| in the tensor.
BYTECOMP_HD uint32_t NaturalExponentLow(uint32_t max_biased_exponent) {
  uint32_t top = max_biased_exponent + 1u;
  if (top > 254u) top = 254u;
  return top > 127u ? top - 126u : 1u;
}

// Both cases are computed and one selected, so that CPU loops vectorise.
BYTECOMP_HD uint8_t NaturalCode(float x, uint32_t exponent_low, uint32_t random_bits) {
  const uint32_t bits = FloatBits(x);
  const uint32_t sign = (bits >> 31) << 7;
  const uint32_t abs_bits = bits & 0x7fffffffu;
  const uint32_t exponent = abs_bits >> 23;
  // At or above the smallest power: round up with probability mantissa / 2^23 ==
  // (|x| - 2^e) / 2^e, comparing 23 random bits.
  const uint32_t mantissa = abs_bits & 0x7fffffu;
  uint32_t e = exponent + (((random_bits >> 9) < mantissa) ? 1u : 0u);
  e = e > 254u ? 254u : e;
  const uint32_t code_above = e - exponent_low + 1u;  // used only when exponent >= low
  // Below it: 0 or 2^(exponent_low-127) with probability |x| / that power, computed as
  // |x| * 2^(127-exponent_low): the same exact quotient, so the same rounding, without a
  // division (2^-127, for exponent_low 254, is the subnormal 0x00400000).
  const float inverse_smallest =
      BitsToFloat(exponent_low < 254u ? (254u - exponent_low) << 23 : 0x00400000u);
  const float probability = BitsToFloat(abs_bits) * inverse_smallest;
  const uint32_t code_below = UniformFromBits(random_bits) < probability ? 1u : 0u;
  const uint32_t code = exponent >= exponent_low ? code_above : code_below;
  return static_cast<uint8_t>(code == 0u ? 0u : (sign | code));  // one zero code: +0
}

BYTECOMP_HD float NaturalValue(uint8_t code, uint32_t exponent_low) {
  const uint32_t c = code & 0x7fu;
  if (c == 0u) return 0.0f;
  return BitsToFloat((static_cast<uint32_t>(code >> 7) << 31) | ((exponent_low + c - 1u) << 23));
}

// ---------------------------------------------------------------------------------------------
// Dithering (BytePS): v = |x| / norm in [0, 1] is rounded stochastically to one of s + 1
// levels; code = sign bit above BitsFor(s) level bits.
// Linear partition: level j means j / s.
// Natural partition: level 0 means 0, level j >= 1 means 2^(j - s) (so level s means 1).

BYTECOMP_HD uint32_t DitherLinearLevel(float normalised, uint32_t s, float uniform) {
  return StochasticLevel(normalised * static_cast<float>(s), uniform, s);
}

BYTECOMP_HD uint32_t DitherNaturalLevel(float normalised, uint32_t s, float uniform) {
  if (!(normalised > 0.0f)) return 0u;
  if (normalised >= 1.0f) return s;
  const uint32_t bits = FloatBits(normalised);
  const int32_t exponent = static_cast<int32_t>(bits >> 23) - 127;  // -149..-1 region
  const int32_t j = exponent + static_cast<int32_t>(s);             // 2^(j-s) <= v < 2^(j+1-s)
  if (j < 1) {
    // Between level 0 (0) and level 1 (2^(1-s)).
    const float smallest = BitsToFloat(static_cast<uint32_t>(128 - static_cast<int32_t>(s)) << 23);
    return uniform < normalised / smallest ? 1u : 0u;
  }
  // Between 2^(j-s) and 2^(j+1-s): up with probability (v - 2^(j-s)) / 2^(j-s) = mantissa.
  const float fraction = static_cast<float>(bits & 0x7fffffu) * (1.0f / 8388608.0f);
  return static_cast<uint32_t>(j) + (uniform < fraction ? 1u : 0u);
}

// The code of one element: sign bit (1 = negative) above level_bits level bits, for
// v = |x| * inverse_norm, inverse_norm = 1 / norm rounded once by the caller (a multiplication
// per element; norm 0 gives 0 * inf = NaN, level 0). For norms below 2^-126 the reciprocal
// overflows and nonzero elements take the top level.
BYTECOMP_HD uint32_t DitherCode(float x, float inverse_norm, uint32_t s, uint32_t level_bits,
                                bool natural_partition, float uniform) {
  const float v = AbsFloat(x) * inverse_norm;
  const uint32_t level =
      natural_partition ? DitherNaturalLevel(v, s, uniform) : DitherLinearLevel(v, s, uniform);
  return (SignBit(x) << level_bits) | level;
}

// Level value in [0, 1] (natural partition needs s <= 126, checked by the codec).
BYTECOMP_HD float DitherLinearValue(uint32_t level, uint32_t s) {
  return static_cast<float>(static_cast<int32_t>(level)) /
         static_cast<float>(static_cast<int32_t>(s));
}

BYTECOMP_HD float DitherNaturalValue(uint32_t level, uint32_t s) {
  const float value = BitsToFloat((127u + level - s) << 23);  // garbage for level 0
  return level == 0u ? 0.0f : value;
}

// ---------------------------------------------------------------------------------------------
// u8bit: Dettmers' 8-bit dynamic tree code for v = x / max|x| in [-1, 1]. Bit 7 = sign;
// the 7-bit magnitude code c: 0 means 0; otherwise e = leading zeros of c in 7 bits (0..6)
// is a decimal exponent, the highest set bit an indicator, the f = 6 - e bits below it a
// linear fraction m: value = 10^-e * (0.1 + 0.9 * (m + 1) / 2^f). The values increase with c,
// from 1e-6 (c = 1) to 1 (c = 127); the encoder picks the nearest.

// 10^-e for e in 0..6 from its binary digits: three two-way selects and two products, which
// CPU loops vectorise (a seven-way choice becomes a table lookup that does not). The products
// are rounded (1e-1f * 1e-2f is not 1e-3f to the last bit); encoder and decoder share them.
BYTECOMP_HD float U8bitDecadeScale(uint32_t e) {
  const float a = (e & 1u) ? 1e-1f : 1.0f;
  const float b = (e & 2u) ? 1e-2f : 1.0f;
  const float c = (e & 4u) ? 1e-4f : 1.0f;
  return (a * b) * c;
}

BYTECOMP_HD float U8bitMagnitude(uint32_t c) {
  c &= 0x7fu;
  // f = position of the highest set bit (the indicator), by comparisons.
  const uint32_t f = (c >= 2u ? 1u : 0u) + (c >= 4u ? 1u : 0u) + (c >= 8u ? 1u : 0u) +
                     (c >= 16u ? 1u : 0u) + (c >= 32u ? 1u : 0u) + (c >= 64u ? 1u : 0u);
  const uint32_t e = 6u - f;
  const uint32_t m = c & ((1u << f) - 1u);
  // (m + 1) / 2^f, exactly, as a product with 2^-f.
  const float fraction =
      0.9f * (static_cast<float>(static_cast<int32_t>(m + 1u)) * BitsToFloat((127u - f) << 23));
  const float value = U8bitDecadeScale(e) * (0.1f + fraction);
  return c == 0u ? 0.0f : value;
}

// The midpoint between the magnitudes of codes c and c + 1 (c in 0..126).
BYTECOMP_HD float U8bitMidpoint(uint32_t c) {
  return 0.5f * (U8bitMagnitude(c) + U8bitMagnitude(c + 1u));
}

// The code of v = |x| / max in [0, 1]: by definition the number of midpoints
// U8bitMidpoint(0..126) at or below v (so the nearest magnitude, ties to the larger), 0 for
// v <= 0 or NaN, 127 for v >= 1. Any implementation that counts the same midpoints (the CPU
// codec uses a table) yields the same codes.
BYTECOMP_HD uint32_t U8bitNearestMagnitudeCode(float v) {
  // Decade: e = number of thresholds 10^-k, k = 1..6, that v is at or below (written out:
  // a loop here would keep CPU loops over elements from vectorising).
  const uint32_t e = (v <= U8bitDecadeScale(1) ? 1u : 0u) + (v <= U8bitDecadeScale(2) ? 1u : 0u) +
                     (v <= U8bitDecadeScale(3) ? 1u : 0u) + (v <= U8bitDecadeScale(4) ? 1u : 0u) +
                     (v <= U8bitDecadeScale(5) ? 1u : 0u) + (v <= U8bitDecadeScale(6) ? 1u : 0u);
  const uint32_t f = 6u - e;
  const float grid = static_cast<float>(static_cast<int32_t>(1u << f));
  // A first guess, within one code of the count (multiplications will do: v * 10^e, 10^e
  // exact in float, and 1/0.9); the midpoint comparisons below settle it.
  const float ten_to_e =
      ((e & 1u) ? 10.0f : 1.0f) * ((e & 2u) ? 100.0f : 1.0f) * ((e & 4u) ? 10000.0f : 1.0f);
  const float position = (v * ten_to_e - 0.1f) * (grid * (1.0f / 0.9f));
  int32_t m = static_cast<int32_t>(position + 0.5f) - 1;  // nearest of the (m + 1) grid points
  const int32_t top = static_cast<int32_t>(1u << f) - 1;
  m = m < 0 ? 0 : m;
  m = m > top ? top : m;
  uint32_t c = (1u << f) | static_cast<uint32_t>(m);  // 1..127
  // Arithmetic on the comparison results rather than selects: GCC's jump threading turns
  // chains of selects here into branches that keep the element loop from vectorising.
  c -= static_cast<uint32_t>(v < U8bitMidpoint(c - 1u));
  c += static_cast<uint32_t>(c < 127u) * static_cast<uint32_t>(v >= U8bitMidpoint(c));
  c |= 127u * static_cast<uint32_t>(v >= 1.0f);
  return c * static_cast<uint32_t>(v > 0.0f);
}

// v = |x| * (1 / max_abs), the reciprocal rounded once (a multiplication per element, not a
// division). max_abs == 0 (an all-zero tensor) gives 0 * inf = NaN, which codes as 0.
BYTECOMP_HD uint8_t U8bitCode(float x, float max_abs) {
  const uint32_t c = U8bitNearestMagnitudeCode(AbsFloat(x) * (1.0f / max_abs));
  const uint32_t negative = static_cast<uint32_t>(x < 0.0f) * static_cast<uint32_t>(c != 0u);
  return static_cast<uint8_t>((negative << 7) | c);
}

BYTECOMP_HD float U8bitValue(uint8_t code, float max_abs) {
  const float magnitude = U8bitMagnitude(code) * max_abs;
  return (code & 0x80u) ? -magnitude : magnitude;
}

// ---------------------------------------------------------------------------------------------
// INCEPTIONN (Li et al.): each value keeps the narrowest of four forms whose error is within
// the error bound eb: tag 0 = dropped (|x| <= eb, decoded 0), tag 1 = int8 multiple of 2*eb,
// tag 2 = int16 multiple of 2*eb, tag 3 = the fp32 value itself. (The multiple's width is what
// the exponent of x / (2 eb) allows.) The error of tags 0-2 is at most eb (plus one float
// rounding); tag 3 is exact.

BYTECOMP_HD uint32_t InceptionnTag(float x, float error_bound) {
  const float magnitude = AbsFloat(x);
  if (magnitude <= error_bound) return 0u;
  const float steps = magnitude / (error_bound + error_bound);
  if (steps < 127.0f) return 1u;  // round(steps) <= 127
  if (steps < 32767.0f) return 2u;
  return 3u;
}

// The rounded multiple of 2*eb for tags 1 and 2 (round half away from zero).
BYTECOMP_HD int32_t InceptionnSteps(float x, float error_bound) {
  const float steps = AbsFloat(x) / (error_bound + error_bound);
  const int32_t rounded = static_cast<int32_t>(steps + 0.5f);
  return x < 0.0f ? -rounded : rounded;
}

BYTECOMP_HD float InceptionnStepsValue(int32_t steps, float error_bound) {
  return static_cast<float>(steps) * (error_bound + error_bound);
}

}  // namespace bytecomp::compress
