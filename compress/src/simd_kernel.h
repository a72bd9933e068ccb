// One loop, compiled for three CPU levels, and the variant CpuSimdLevel chooses at run time
// (private to compress/src). BYTECOMP_SIMD caps the level, so unit.compress.avx2 and
// unit.compress.scalar run the AVX2 and baseline variants on an AVX-512 machine too (GCC's
// target_clones would pick by the CPU alone). The loops are plain C++ that the compiler
// vectorises: AVX-512 (x86-64-v4) runs them 16 floats wide with 32 registers, which the
// stochastic quantisers' encoders, bound by their arithmetic, need to reach memory speed.
//
//   BYTECOMP_SIMD_KERNEL(double, SumOfSquares, (const float* x, size_t n), (x, n)) {
//     return SumOfSquaresInline(x, n);
//   }
//
// defines SumOfSquares(x, n) with the block as its body (inlined into each variant). The file
// includes exact_float_math.h first, so that every variant rounds alike (no FMA contraction):
// the variants give the same results, bit for bit.
#pragma once

#include "bytecomp/compress/codec_util.h"  // CpuSimdLevel

#define BYTECOMP_SIMD_KERNEL(ret, name, params, args)                                             \
  [[gnu::always_inline]] static inline ret name##Body params;                                     \
  [[gnu::target("arch=x86-64-v4"), gnu::noinline]] static ret name##Avx512 params {               \
    return name##Body args;                                                                       \
  }                                                                                               \
  [[gnu::target("avx2"), gnu::noinline]] static ret name##Avx2 params { return name##Body args; } \
  [[gnu::noinline]] static ret name##Baseline params { return name##Body args; }                  \
  ret name params {                                                                               \
    switch (::bytecomp::compress::CpuSimdLevel()) {                                               \
      case ::bytecomp::compress::SimdLevel::kAvx512:                                              \
        return name##Avx512 args;                                                                 \
      case ::bytecomp::compress::SimdLevel::kAvx2:                                                \
        return name##Avx2 args;                                                                   \
      case ::bytecomp::compress::SimdLevel::kScalar:                                              \
        break;                                                                                    \
    }                                                                                             \
    return name##Baseline args;                                                                   \
  }                                                                                               \
  static inline ret name##Body params

// The target of hand-written AVX-512 loops that also use BMI2 (the sparse codecs' byte steps
// and deltas); run only where CpuSimdLevel() is kAvx512 and the CPU has BMI2.
#define BYTECOMP_TARGET_AVX512_BMI2 __attribute__((target("avx512f,avx512bw,avx512vl,bmi,bmi2")))

namespace bytecomp::compress {

// A loop that streams through a tensor asks, once per 64-byte line it reads, for the line
// kPrefetchBytes ahead: the hardware prefetcher alone falls behind loops that compute between
// their loads, and a large tensor's pass then waits on memory (on 64 MiB, one thread: qsgd's
// encode from 50% to about 80% of memcpy, terngrad's from 41% to about 70%; 8 KiB ahead beat
// 4 KiB and matched 16 KiB). A prefetch past the end of the array is harmless (no fault).
inline constexpr size_t kPrefetchBytes = 8192;
[[gnu::always_inline]] inline void PrefetchLineAhead(const void* line) {
  __builtin_prefetch(static_cast<const char*>(line) + kPrefetchBytes);
}

}  // namespace bytecomp::compress
