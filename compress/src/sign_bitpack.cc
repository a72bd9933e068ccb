#include "sign_bitpack.h"
#include "exact_float_math.h"  // first: see there

#include <immintrin.h>

#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/memory_math.h"
#include "simd_kernel.h"

namespace bytecomp::compress {
namespace {

// CpuSimdLevel honours BYTECOMP_SIMD, so the tests also run the scalar paths.
bool HaveAvx2() { return CpuSimdLevel() >= SimdLevel::kAvx2; }

void PackScalar(const float* x, size_t begin, size_t n, uint8_t* out) {
  for (size_t b = begin / 8; b * 8 < n; ++b) {
    uint32_t byte = 0;
    for (size_t j = 0; j < 8 && b * 8 + j < n; ++j) byte |= SignBit(x[b * 8 + j]) << j;
    out[b] = static_cast<uint8_t>(byte);
  }
}

// Packs the signs of the values `lane(at)` yields, 32 elements a step, and tracks the largest
// |value| bit pattern (the finite check rides along with the pack). Returns how many
// elements it packed (a multiple of 32).
template <typename Lane>
__attribute__((target("avx2"))) size_t PackLanesAvx2(size_t n, const Lane& lane, uint8_t* out,
                                                     uint32_t* max_abs_bits) {
  const __m256 zero = _mm256_setzero_ps();
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  __m256i max_bits = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    uint32_t word = 0;
    for (int part = 0; part < 4; ++part) {
      const __m256 v = lane(i + 8 * part);
      max_bits = _mm256_max_epu32(max_bits, _mm256_and_si256(_mm256_castps_si256(v), abs_mask));
      word |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(v, zero, _CMP_LT_OQ)))
              << (8 * part);
    }
    __builtin_memcpy(out + i / 8, &word, 4);
  }
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), max_bits);
  uint32_t m = 0;
  for (uint32_t l : lanes) m = l > m ? l : m;
  *max_abs_bits = m;
  return i;
}

// The input's own values.
struct InputLane {
  const float* x;
  __attribute__((target("avx2"))) __m256 operator()(size_t at) const {
    return _mm256_loadu_ps(x + at);
  }
};

// signum's blend (memory_math.h SignumBlend: keep * g + beta * m, two products and a sum,
// each rounded), stored to next (non-temporal where kStream: next must then be 32-byte
// aligned, the caller's check).
template <bool kStream>
struct SignumBlendLane {
  const float* g;
  const float* m;
  float* next;
  float keep, beta;
  __attribute__((target("avx2"))) __m256 operator()(size_t at) const {
    const __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(keep), _mm256_loadu_ps(g + at)),
                                   _mm256_mul_ps(_mm256_set1_ps(beta), _mm256_loadu_ps(m + at)));
    if constexpr (kStream) {
      _mm256_stream_ps(next + at, v);
    } else {
      _mm256_storeu_ps(next + at, v);
    }
    return v;
  }
};

__attribute__((target("avx2"))) size_t BlendPackAvx2(const float* g, const float* m, size_t n,
                                                     float keep, float beta, bool stream,
                                                     float* next, uint8_t* out,
                                                     uint32_t* max_abs_bits) {
  if (!stream) {
    return PackLanesAvx2(n, SignumBlendLane<false>{g, m, next, keep, beta}, out, max_abs_bits);
  }
  const size_t done =
      PackLanesAvx2(n, SignumBlendLane<true>{g, m, next, keep, beta}, out, max_abs_bits);
  _mm_sfence();
  return done;
}

// (GCC 12 warns that intrinsics' undefined pass-through operands "may be used uninitialized",
// a false positive of its headers, as in quant_pack.cc.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// The same with AVX-512, 64 elements a step: the sign bits from compare masks (a 64-bit word
// a step), the momentum stored a cache line per instruction. Same arithmetic (two products
// and a sum, each rounded: no FMA), so the same bits.
template <bool kStream>
[[gnu::target("arch=x86-64-v4")]] size_t BlendPackAvx512(const float* g, const float* m, size_t n,
                                                         float keep, float beta, float* next,
                                                         uint8_t* out, uint32_t* max_abs_bits) {
  const __m512 keep_v = _mm512_set1_ps(keep);
  const __m512 beta_v = _mm512_set1_ps(beta);
  const __m512 zero = _mm512_setzero_ps();
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  __m512i max_bits = _mm512_setzero_si512();
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    uint64_t word = 0;
#pragma GCC unroll 4
    for (int part = 0; part < 4; ++part) {
      const size_t at = i + 16 * part;
      PrefetchLineAhead(g + at);
      PrefetchLineAhead(m + at);
      const __m512 v = _mm512_add_ps(_mm512_mul_ps(keep_v, _mm512_loadu_ps(g + at)),
                                     _mm512_mul_ps(beta_v, _mm512_loadu_ps(m + at)));
      if constexpr (kStream) {
        _mm512_stream_ps(next + at, v);
      } else {
        _mm512_storeu_ps(next + at, v);
      }
      max_bits = _mm512_max_epu32(max_bits, _mm512_and_si512(_mm512_castps_si512(v), abs_mask));
      word |= static_cast<uint64_t>(_mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ)) << (16 * part);
    }
    __builtin_memcpy(out + i / 8, &word, 8);
  }
  alignas(64) uint32_t lanes[16];
  _mm512_store_si512(lanes, max_bits);
  uint32_t most = 0;
  for (uint32_t l : lanes) most = l > most ? l : most;
  *max_abs_bits = most;
  return i;
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

void UnpackScalar(const uint8_t* bits, size_t begin, size_t n, float v0, float v1, float* out) {
  for (size_t i = begin; i < n; ++i) out[i] = ((bits[i / 8] >> (i % 8)) & 1u) ? v1 : v0;
}

void AddScalar(const uint8_t* bits, size_t begin, size_t n, float v0, float v1, float* acc) {
  for (size_t i = begin; i < n; ++i) acc[i] += ((bits[i / 8] >> (i % 8)) & 1u) ? v1 : v0;
}

template <bool kAdd>
__attribute__((target("avx2"))) size_t UnpackAvx2(const uint8_t* bits, size_t n, float v0, float v1,
                                                  float* out) {
  const __m256i lane_bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256 clear = _mm256_set1_ps(v0);
  const __m256 set = _mm256_set1_ps(v1);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i byte = _mm256_set1_epi32(bits[i / 8]);
    const __m256i mask = _mm256_cmpeq_epi32(_mm256_and_si256(byte, lane_bits), lane_bits);
    const __m256 value = _mm256_blendv_ps(clear, set, _mm256_castsi256_ps(mask));
    if constexpr (kAdd) {
      _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(out + i), value));
    } else {
      _mm256_storeu_ps(out + i, value);
    }
  }
  return i;
}

SignSums SumScalar(const float* x, size_t n) {
  SignSums s;
  for (size_t i = 0; i < n; ++i) {
    if (x[i] < 0.0f) {
      s.negative += x[i];
      ++s.negative_count;
    } else {
      s.non_negative += x[i];
    }
  }
  return s;
}

__attribute__((target("avx2"))) SignSums PackWithSumsAvx2(const float* x, size_t n, uint8_t* out,
                                                          size_t* done) {
  __m256d pos0 = _mm256_setzero_pd(), pos1 = _mm256_setzero_pd();
  __m256d neg0 = _mm256_setzero_pd(), neg1 = _mm256_setzero_pd();
  const __m256 zero = _mm256_setzero_ps();
  size_t count = 0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    uint32_t word = 0;
    for (int part = 0; part < 4; ++part) {
      const __m256 v = _mm256_loadu_ps(x + i + 8 * part);
      const __m256 is_neg = _mm256_cmp_ps(v, zero, _CMP_LT_OQ);
      const uint32_t mask = static_cast<uint32_t>(_mm256_movemask_ps(is_neg));
      word |= mask << (8 * part);
      count += static_cast<size_t>(__builtin_popcount(mask));
      const __m256 neg = _mm256_and_ps(v, is_neg);
      const __m256 pos = _mm256_andnot_ps(is_neg, v);
      pos0 = _mm256_add_pd(pos0, _mm256_cvtps_pd(_mm256_castps256_ps128(pos)));
      pos1 = _mm256_add_pd(pos1, _mm256_cvtps_pd(_mm256_extractf128_ps(pos, 1)));
      neg0 = _mm256_add_pd(neg0, _mm256_cvtps_pd(_mm256_castps256_ps128(neg)));
      neg1 = _mm256_add_pd(neg1, _mm256_cvtps_pd(_mm256_extractf128_ps(neg, 1)));
    }
    __builtin_memcpy(out + i / 8, &word, 4);
  }
  alignas(32) double p[4], q[4];
  _mm256_store_pd(p, _mm256_add_pd(pos0, pos1));
  _mm256_store_pd(q, _mm256_add_pd(neg0, neg1));
  SignSums s;
  s.non_negative = (p[0] + p[1]) + (p[2] + p[3]);
  s.negative = (q[0] + q[1]) + (q[2] + q[3]);
  s.negative_count = count;
  *done = i;
  return s;
}

}  // namespace

SignSums PackSignBitsWithSums(const float* x, size_t n, uint8_t* out) {
  size_t done = 0;
  SignSums sums;
  if (HaveAvx2()) sums = PackWithSumsAvx2(x, n, out, &done);
  PackScalar(x, done, n, out);
  const SignSums tail = SumScalar(x + done, n - done);
  sums.non_negative += tail.non_negative;
  sums.negative += tail.negative;
  sums.negative_count += tail.negative_count;
  return sums;
}

bool PackSignBits(const float* x, size_t n, uint8_t* out) {
  uint32_t max_bits = 0;
  const size_t done = HaveAvx2() ? PackLanesAvx2(n, InputLane{x}, out, &max_bits) : 0;
  PackScalar(x, done, n, out);
  for (size_t i = done; i < n; ++i) {
    const uint32_t bits = FloatBits(x[i]) & 0x7fffffffu;
    max_bits = bits > max_bits ? bits : max_bits;
  }
  return max_bits < 0x7f800000u;
}

bool BlendAndPackSignBits(const float* g, const float* m, size_t n, float keep, float beta,
                          bool stream, float* next, uint8_t* out) {
  size_t done = 0;
  uint32_t max_bits = 0;
  if (CpuSimdLevel() == SimdLevel::kAvx512) {
    if (stream && reinterpret_cast<uintptr_t>(next) % 64 == 0) {
      done = BlendPackAvx512<true>(g, m, n, keep, beta, next, out, &max_bits);
      _mm_sfence();
    } else {
      done = BlendPackAvx512<false>(g, m, n, keep, beta, next, out, &max_bits);
    }
  } else if (HaveAvx2()) {
    done = BlendPackAvx2(g, m, n, keep, beta, stream && reinterpret_cast<uintptr_t>(next) % 32 == 0,
                         next, out, &max_bits);
  }
  for (size_t i = done; i < n; ++i) {
    next[i] = SignumBlend(g[i], m[i], keep, beta);
    const uint32_t bits = FloatBits(next[i]) & 0x7fffffffu;
    max_bits = bits > max_bits ? bits : max_bits;
  }
  PackScalar(next, done, n, out);
  return max_bits < 0x7f800000u;
}

void UnpackSignBits(const uint8_t* bits, size_t n, float value_if_clear, float value_if_set,
                    float* out) {
  const size_t done =
      HaveAvx2() ? UnpackAvx2<false>(bits, n, value_if_clear, value_if_set, out) : 0;
  UnpackScalar(bits, done, n, value_if_clear, value_if_set, out);
}

void AddUnpackedSignBits(const uint8_t* bits, size_t n, float value_if_clear, float value_if_set,
                         float* acc) {
  const size_t done = HaveAvx2() ? UnpackAvx2<true>(bits, n, value_if_clear, value_if_set, acc) : 0;
  AddScalar(bits, done, n, value_if_clear, value_if_set, acc);
}

}  // namespace bytecomp::compress
