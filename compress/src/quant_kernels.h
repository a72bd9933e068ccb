// Reductions and helpers shared by the quantisation codecs (private to compress/src). Sums are
// accumulated in double over 8 lanes (so that they vectorise) and rounded once by the caller.
#pragma once

#include <cstddef>
#include <cstdint>

#include <immintrin.h>

#include "bytecomp/compress/codec.h"
#include "bytecomp/compress/elementwise.h"

namespace bytecomp::compress {

double SumOfSquares(const float* x, size_t n);

// SumOfSquares' body, for kernels that fuse it into their own loop (same summation order, so
// the same result).
__attribute__((always_inline)) inline double SumOfSquaresInline(const float* x, size_t n) {
  double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (size_t j = 0; j < 8; ++j) {
      const double v = static_cast<double>(x[i + j]);
      lanes[j] += v * v;
    }
  }
  double tail = 0.0;
  for (; i < n; ++i) tail += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])) + tail;
}
// Largest |x| (the caller has checked that x is finite).
float MaxAbs(const float* x, size_t n);

// Both in one pass: the sum of squares (double) and the largest |x| bit pattern (which is
// >= 0x7f800000 when a NaN or Inf is present).
struct SquaresAndMax {
  double sum_of_squares = 0.0;
  uint32_t max_abs_bits = 0;
};
SquaresAndMax SumOfSquaresAndMaxAbs(const float* x, size_t n);

// The largest (code & level_mask) of n codes.
uint32_t MaxCodeLevel(const uint16_t* codes, size_t n, uint32_t level_mask);

// Whether a decode writes its output with non-temporal stores (SSE2, baseline x86-64): from
// 16 MiB up the output does not stay in the caches, so its reader reads memory anyway, and such
// stores skip reading each line before overwriting it (u8bit's decode, a table read per
// element, went from below to above memcpy's speed). Needs 16-byte aligned output; the caller
// ends with StreamDone.
inline bool StreamOutput(const float* out, size_t n) {
  return n * sizeof(float) >= (size_t{16} << 20) && reinterpret_cast<uintptr_t>(out) % 16 == 0;
}
inline void StreamDone() { _mm_sfence(); }

// The random stream of one encode call (elementwise.h).
inline CounterRandom StreamOf(const CodecContext& ctx) {
  return MakeCounterRandom(ctx.seed, ctx.key, ctx.round, ctx.node);
}

// The counter random bits (elementwise.h RandomBits) of 16 consecutive elements at a time, for
// the hand-written AVX-512 encoders: the Weyl sequence i * golden + k0 advanced by an addition
// (16 * golden a step, modulo 2^32 as the product), not a multiply per element.
struct RandomBits16 {
  __m512i weyl, step, k1, m1, m2;
  [[gnu::target("arch=x86-64-v4"), gnu::always_inline]] RandomBits16(CounterRandom r,
                                                                     uint32_t first) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i index = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(first)), lane);
    weyl = _mm512_add_epi32(_mm512_mullo_epi32(index, _mm512_set1_epi32(0x9e3779b9)),
                            _mm512_set1_epi32(static_cast<int>(r.k0)));
    step = _mm512_set1_epi32(static_cast<int>(16u * 0x9e3779b9u));
    k1 = _mm512_set1_epi32(static_cast<int>(r.k1));
    m1 = _mm512_set1_epi32(0x7feb352d);
    m2 = _mm512_set1_epi32(static_cast<int>(0x846ca68bu));
  }
  // Mix32(weyl) ^ k1 of the next 16 elements.
  [[gnu::target("arch=x86-64-v4"), gnu::always_inline]] __m512i Next() {
    __m512i h = weyl;
    weyl = _mm512_add_epi32(weyl, step);
    h = _mm512_mullo_epi32(_mm512_xor_si512(h, _mm512_srli_epi32(h, 16)), m1);
    h = _mm512_mullo_epi32(_mm512_xor_si512(h, _mm512_srli_epi32(h, 15)), m2);
    return _mm512_ternarylogic_epi32(h, _mm512_srli_epi32(h, 16), k1, 0x96);  // a ^ b ^ c
  }
};

// UniformFromBits of 16 lanes.
[[gnu::target("arch=x86-64-v4"), gnu::always_inline]] inline __m512 UniformFromBits16(
    __m512i bits) {
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(bits, 8)),
                       _mm512_set1_ps(1.0f / 16777216.0f));
}

// StochasticLevel of 16 lanes with the sign bit: `scaled` (|v| on the level scale) clamped to
// [0, top], rounded up where `uniform` falls below its fraction, `sign` or'ed in where v < 0.
// vmaxps and vminps give StochasticLevel's selects, NaN included, so the same codes.
[[gnu::target("arch=x86-64-v4"), gnu::always_inline]] inline __m512i StochasticCode16(
    __m512 scaled, __m512 top, __m512 uniform, __m512 v, __m512i sign) {
  const __m512 zero = _mm512_setzero_ps();
  const __m512 clamped = _mm512_min_ps(_mm512_max_ps(scaled, zero), top);
  const __m512i lower = _mm512_cvttps_epi32(clamped);
  const __m512 fraction = _mm512_sub_ps(clamped, _mm512_cvtepi32_ps(lower));
  const __m512i code = _mm512_mask_add_epi32(
      lower, _mm512_cmp_ps_mask(uniform, fraction, _CMP_LT_OQ), lower, _mm512_set1_epi32(1));
  return _mm512_mask_or_epi32(code, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), code, sign);
}

// Asks for the next block's input ahead of use: the hardware prefetcher alone falls behind
// these compute-heavy loops on large tensors (measured: up to 2x at 64M floats).
// Prefetches x[begin, begin + count) clipped to n.
inline void PrefetchAhead(const float* x, size_t n, size_t begin, size_t count) {
  if (begin >= n) return;
  const size_t end = n < begin + count ? n : begin + count;
  const char* p = reinterpret_cast<const char*>(x + begin);
  for (size_t offset = 0; offset < 4 * (end - begin); offset += 64) __builtin_prefetch(p + offset);
}

}  // namespace bytecomp::compress
