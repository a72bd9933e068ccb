// Bit-packed signs (format/sign_format.h) and the reductions the sign codecs need, with AVX2
// paths chosen at run time (intrinsics: the compiler does not turn compare-and-pack loops into
// movemask). Bit convention (elementwise.h): bit 1 = x < 0; element i is bit i % 8 of byte i / 8.
#pragma once

#include <cstddef>
#include <cstdint>

#include "bytecomp/compress/format/sign_format.h"

namespace bytecomp::compress {

using sign::SignSums;

// Writes sign::SignBytes(n) bytes; the unused high bits of the last byte are 0. Returns whether
// every element was finite (the caller's finite check, in the same pass).
bool PackSignBits(const float* x, size_t n, uint8_t* out);

// out[i] = bit i ? value_if_set : value_if_clear.
void UnpackSignBits(const uint8_t* bits, size_t n, float value_if_clear, float value_if_set,
                    float* out);
// acc[i] += bit i ? value_if_set : value_if_clear.
void AddUnpackedSignBits(const uint8_t* bits, size_t n, float value_if_clear, float value_if_set,
                         float* acc);

// signum's step in one pass: next[i] = memory_math.h SignumBlend(g[i], m[i], keep, beta), its
// sign bits packed into out (sign::SignBytes(n) bytes). With `stream`, next is written with
// non-temporal stores (for vectors larger than the caches, which the next round reads from
// memory anyway): the momentum's lines are not read before they are overwritten. Returns
// whether every next[i] was finite (equivalently every g[i], m being finite).
bool BlendAndPackSignBits(const float* g, const float* m, size_t n, float keep, float beta,
                          bool stream, float* next, uint8_t* out);

// PackSignBits plus the sums, in one pass over x (the sign bits do not depend on the sums, so
// efsignsgd and onebit read their input once). A NaN or Inf element makes a sum non-finite,
// which is the caller's finite check.
SignSums PackSignBitsWithSums(const float* x, size_t n, uint8_t* out);

}  // namespace bytecomp::compress
