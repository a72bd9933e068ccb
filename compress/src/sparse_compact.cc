// The compaction kernels of the sparse codecs (sparse_codecs.h CompactRange): scalar, AVX2
// (a permutation table) and AVX-512 (the compress instruction), chosen by CpuSimdLevel.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/format/sparse_format.h"
#include "simd_kernel.h"
#include "sparse_codecs.h"

namespace bytecomp::compress {
namespace {

// kAbs: compare |x|'s bit pattern (sign cleared); otherwise the raw bit pattern (positive
// values in [0, 0x7f800000), negative ones from 0x80000000 up, ordered by magnitude).
// values may be null (indices only).
// above_hi (may be null) is set when some element lies above hi (left as it is otherwise).
template <bool kAbs>
size_t CompactRangeScalar(const float* x, size_t begin, size_t end, uint32_t lo, uint32_t hi,
                          uint8_t* values, uint32_t* indices, uint32_t base, bool* above_hi) {
  size_t j = 0;
  bool above = false;
  for (size_t i = begin; i < end; ++i) {
    uint32_t a;
    std::memcpy(&a, x + i, 4);
    if constexpr (kAbs) a &= 0x7fffffffu;
    if (values != nullptr) std::memcpy(values + 4 * j, x + i, 4);
    if (indices != nullptr) indices[j] = base + static_cast<uint32_t>(i);
    j += (a >= lo && a <= hi) ? 1 : 0;
    above |= a > hi;
  }
  if (above && above_hi != nullptr) *above_hi = true;
  return j;
}

template <bool kAbs>
__attribute__((target("avx512f"))) size_t CompactRangeAvx512(const float* x, size_t n, uint32_t lo,
                                                             uint32_t hi, uint8_t* values,
                                                             uint32_t* indices, uint32_t base,
                                                             bool* above_hi) {
  const __m512i abs_mask = _mm512_set1_epi32(kAbs ? 0x7fffffff : -1);
  const __m512i vlo = _mm512_set1_epi32(static_cast<int>(lo));
  const __m512i vhi = _mm512_set1_epi32(static_cast<int>(hi));
  __m512i iota =
      _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(base)),
                       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  const __m512i sixteen = _mm512_set1_epi32(16);
  size_t j = 0, i = 0;
  __mmask16 above = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512i a = _mm512_and_si512(_mm512_castps_si512(v), abs_mask);
    const __mmask16 at_most_hi = _mm512_cmple_epu32_mask(a, vhi);
    above |= static_cast<__mmask16>(~at_most_hi);
    const __mmask16 keep = _mm512_cmpge_epu32_mask(a, vlo) & at_most_hi;
    if (values != nullptr) _mm512_storeu_ps(values + 4 * j, _mm512_maskz_compress_ps(keep, v));
    if (indices != nullptr)
      _mm512_storeu_si512(indices + j, _mm512_maskz_compress_epi32(keep, iota));
    iota = _mm512_add_epi32(iota, sixteen);
    j += static_cast<size_t>(__builtin_popcount(keep));
  }
  if (above != 0 && above_hi != nullptr) *above_hi = true;
  return j + CompactRangeScalar<kAbs>(x, i, n, lo, hi, values != nullptr ? values + 4 * j : nullptr,
                                      indices != nullptr ? indices + j : nullptr, base, above_hi);
}

// AVX2 has no compress instruction: a table gives, for each 8-lane mask, the kept lanes
// positions packed to the front, and a lane permute applies it.
struct CompressTable {
  alignas(32) uint32_t perm[256][8];
};

const CompressTable& CompressLanes() {
  static const CompressTable table = [] {
    CompressTable t{};
    for (int m = 0; m < 256; ++m) {
      int c = 0;
      for (int b = 0; b < 8; ++b) {
        if ((m >> b) & 1) t.perm[m][c++] = static_cast<uint32_t>(b);
      }
    }
    return t;
  }();
  return table;
}

template <bool kAbs>
__attribute__((target("avx2"))) size_t CompactRangeAvx2(const float* x, size_t n, uint32_t lo,
                                                        uint32_t hi, uint8_t* values,
                                                        uint32_t* indices, uint32_t base,
                                                        bool* above_hi) {
  const CompressTable& table = CompressLanes();
  const __m256i abs_mask = _mm256_set1_epi32(kAbs ? 0x7fffffff : -1);
  // lo <= a <= hi (unsigned) is (a - lo) <= (hi - lo) unsigned, a signed compare after
  // flipping the top bit of both sides.
  const __m256i bias = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256i vlo = _mm256_set1_epi32(static_cast<int>(lo));
  const __m256i span = _mm256_set1_epi32(static_cast<int>((hi - lo) ^ 0x80000000u));
  __m256i iota = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(base)),
                                  _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256i eight = _mm256_set1_epi32(8);
  // a > hi: a - lo > hi - lo unsigned, or a < lo with (a - lo) wrapped; the first only.
  const __m256i above_span = _mm256_set1_epi32(static_cast<int>(hi ^ 0x80000000u));
  __m256i above = _mm256_setzero_si256();
  size_t j = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256i a = _mm256_and_si256(_mm256_castps_si256(v), abs_mask);
    const __m256i outside =
        _mm256_cmpgt_epi32(_mm256_xor_si256(_mm256_sub_epi32(a, vlo), bias), span);
    above = _mm256_or_si256(above, _mm256_cmpgt_epi32(_mm256_xor_si256(a, bias), above_span));
    const int keep = ~_mm256_movemask_ps(_mm256_castsi256_ps(outside)) & 0xff;
    const __m256i perm = _mm256_load_si256(reinterpret_cast<const __m256i*>(table.perm[keep]));
    if (values != nullptr)
      _mm256_storeu_ps(reinterpret_cast<float*>(values + 4 * j), _mm256_permutevar8x32_ps(v, perm));
    if (indices != nullptr) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(indices + j),
                          _mm256_permutevar8x32_epi32(iota, perm));
    }
    iota = _mm256_add_epi32(iota, eight);
    j += static_cast<size_t>(__builtin_popcount(static_cast<unsigned>(keep)));
  }
  if (!_mm256_testz_si256(above, above) && above_hi != nullptr) *above_hi = true;
  return j + CompactRangeScalar<kAbs>(x, i, n, lo, hi, values != nullptr ? values + 4 * j : nullptr,
                                      indices != nullptr ? indices + j : nullptr, base, above_hi);
}

// (GCC 12 warns that intrinsics' undefined pass-through operands "may be used uninitialized"
// or "are used uninitialized", a false positive of its headers.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
// CompactByteSteps's state between its steps of 16 elements.
struct StepState {
  __m512i iota1;     // the step's positions + 1
  __m512i max_step;  // the largest step so far (signed; the lanes past the kept ones are <= 0)
  uint32_t next;     // the last kept position + 1 (0 before the first)
  __mmask16 finite = 0xffff;
  size_t j = 0;  // kept so far
};

// One step: the kept values compressed into values; the kept positions + 1 compressed (the
// lanes past them filled with `next`) and less the same shifted up a lane (lane 0: `next`),
// which gives each kept element's step, and <= 0 in the lanes past them. The tail's lanes past
// n load as zeros, which are never kept (lo >= 1).
template <bool kTail>
[[gnu::always_inline]] BYTECOMP_TARGET_AVX512_BMI2 inline void CompactStep(
    const float* x, __mmask16 in, uint32_t i, __m512i lo, uint8_t* values, uint8_t* steps,
    StepState& s) {
  const __m512 v = kTail ? _mm512_maskz_loadu_ps(in, x) : _mm512_loadu_ps(x);
  const __m512i a = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff));
  const __mmask16 finite =
      _mm512_cmple_epu32_mask(a, _mm512_set1_epi32(static_cast<int>(kNonFiniteAbsBits - 1)));
  const __mmask16 keep = _mm512_mask_cmpge_epu32_mask(finite, a, lo);
  s.finite &= finite;
  const __m512i next = _mm512_set1_epi32(static_cast<int>(s.next));
  const __m512i q = _mm512_mask_compress_epi32(next, keep, s.iota1);
  const __m512i step = _mm512_sub_epi32(q, _mm512_alignr_epi32(q, next, 15));
  s.max_step = _mm512_max_epi32(s.max_step, step);
  _mm512_storeu_ps(values + 4 * s.j, _mm512_maskz_compress_ps(keep, v));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(steps + s.j), _mm512_cvtepi32_epi8(step));
  s.j += static_cast<size_t>(__builtin_popcount(keep));
  if (keep != 0) s.next = i + 32u - static_cast<uint32_t>(__builtin_clz(keep));
  s.iota1 = _mm512_add_epi32(s.iota1, _mm512_set1_epi32(16));
}

// CompactByteSteps with AVX-512: blocks of 64 steps, each checked for a step above 256 at its
// end (then the block does not count: the result stops at its start).
BYTECOMP_TARGET_AVX512_BMI2 ByteStepCompaction CompactByteStepsAvx512(const float* x, size_t n,
                                                                      uint32_t lo, uint8_t* values,
                                                                      uint8_t* steps) {
  constexpr size_t kBlock = 64 * 16;
  const __m512i vlo = _mm512_set1_epi32(static_cast<int>(lo));
  const __m512i limit = _mm512_set1_epi32(256);
  StepState s;
  s.iota1 = _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16);
  s.max_step = _mm512_setzero_si512();
  s.next = 0;
  ByteStepCompaction r;
  size_t i = 0;
  const size_t full = n / 16 * 16;
  while (i < n) {
    const StepState before = s;
    const size_t begin = i;
    if (i < full) {
      const size_t end = std::min(full, i + kBlock);
      for (; i < end; i += 16) {
        PrefetchLineAhead(x + i);
        CompactStep<false>(x + i, 0xffff, static_cast<uint32_t>(i), vlo, values, steps, s);
      }
    } else {
      const __mmask16 in = static_cast<__mmask16>(_bzhi_u32(0xffff, static_cast<uint32_t>(n - i)));
      CompactStep<true>(x + i, in, static_cast<uint32_t>(i), vlo, values, steps, s);
      i = n;
    }
    if (_mm512_cmpgt_epi32_mask(s.max_step, limit) != 0) {
      s = before;
      r.stopped = true;
      i = begin;
      break;
    }
  }
  r.k = s.j;
  r.done = i;
  const int max_step = _mm512_reduce_max_epi32(s.max_step);
  r.max_delta = r.k == 0 ? 0 : static_cast<uint32_t>(max_step - 1);
  r.non_finite = s.finite != 0xffff;
  return r;
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace

bool ByteDeltaPaths() {
  static const bool available =
      CpuSimdLevel() == SimdLevel::kAvx512 && __builtin_cpu_supports("bmi2");
  return available;
}

ByteStepCompaction CompactByteSteps(const float* x, size_t n, uint32_t lo, uint8_t* out,
                                    uint8_t* steps) {
  return CompactByteStepsAvx512(x, n, lo, out + sparse::kHeaderBytes, steps);
}

template <bool kAbs>
size_t CompactRange(const float* x, size_t n, uint32_t lo, uint32_t hi, uint8_t* values,
                    uint32_t* indices, uint32_t base, bool* above_hi) {
  if (lo > hi) {
    if (above_hi != nullptr && n > 0) *above_hi = MaxAbsBits(x, n) > hi;  // kAbs only (Compact)
    return 0;
  }
  switch (CpuSimdLevel()) {
    case SimdLevel::kAvx512:
      return CompactRangeAvx512<kAbs>(x, n, lo, hi, values, indices, base, above_hi);
    case SimdLevel::kAvx2:
      return CompactRangeAvx2<kAbs>(x, n, lo, hi, values, indices, base, above_hi);
    case SimdLevel::kScalar:
      break;
  }
  return CompactRangeScalar<kAbs>(x, 0, n, lo, hi, values, indices, base, above_hi);
}

template size_t CompactRange<true>(const float*, size_t, uint32_t, uint32_t, uint8_t*, uint32_t*,
                                   uint32_t, bool*);
template size_t CompactRange<false>(const float*, size_t, uint32_t, uint32_t, uint8_t*, uint32_t*,
                                    uint32_t, bool*);

size_t Compact(const float* x, size_t n, uint32_t lo, uint8_t* out, uint32_t* indices,
               bool* non_finite) {
  uint8_t* values = out + sparse::kHeaderBytes;
  if (non_finite != nullptr) *non_finite = false;
  if (n < kCompactSlack) {
    return CompactRangeScalar<true>(x, 0, n, lo, kNonFiniteAbsBits - 1, values, indices, 0,
                                    non_finite);
  }
  return CompactRange(x, n, lo, kNonFiniteAbsBits - 1, values, indices, 0, non_finite);
}

}  // namespace bytecomp::compress
