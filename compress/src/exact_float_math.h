// Included first (before any other include) by the codec sources whose loops use elementwise.h
// or the format headers: every function defined after it, inline ones from headers included
// later too, rounds as the CUDA kernels do.
// - fp-contract off: elementwise.h's a*b+c must round twice on every side (the kernels are
//   built with --fmad=false), also in simd_kernel.h's AVX2 and AVX-512 variants (FMA is
//   part of both targets).
// - GCC: -O2 keeps GCC 12 to its "very cheap" vectoriser cost model, which refuses the codec
//   loops (vect-cost-model=dynamic); no-trapping-math (results unchanged) lets it if-convert
//   selects around divisions. Clang vectorises these loops at -O2 as they are.
#pragma once

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off", "vect-cost-model=dynamic", "no-trapping-math")
#endif
