// randomk's message and its shared indices, written and read by the CPU codec
// (compress/src/sparse_randomk.cc) and the CUDA one (compress/cuda/src/sparse_kernels.cu).
//   u32 n, u32 k = KeptCount(ratio, n), then k fp32 values; size 8 + 4k.
// The indices are not sent: every node derives them from (seed, key, round)
// (SharedSeed(ctx, kRandomkSalt)), so the value arrays of all workers add element-wise
// (summable_encoded). Index j is drawn uniformly from the j-th of k strata that tile [0, n)
// (stratum sizes floor(n/k) or ceil(n/k), spread evenly), which gives k distinct, increasing
// indices in one pass; with scale=true each value is multiplied by its stratum size, the inverse
// of its inclusion probability, which makes the codec unbiased.
#pragma once

#include <cstddef>
#include <cstdint>

#include "bytecomp/compress/format/format_error.h"
#include "bytecomp/compress/format/host_device.h"
#include "bytecomp/compress/format/little_endian.h"
#include "bytecomp/compress/format/rng.h"

namespace bytecomp::compress::randomk {

constexpr size_t kHeaderBytes = 8;
constexpr uint64_t kRandomkSalt = 0x72616e646f6d6bull;  // "randomk", for SharedSeed

BYTECOMP_HD size_t PayloadBytes(size_t k) { return kHeaderBytes + 4 * k; }

BYTECOMP_HD void WriteHeader(uint8_t* out, uint32_t n, uint32_t k) {
  PutU32(out, n);
  PutU32(out + 4, k);
}

// Checks a payload of `bytes` bytes whose first min(bytes, 8) bytes are at p against the
// decode length n and its k. The values are checked by their reader (sparse::ValuesFinite).
BYTECOMP_HD FormatError CheckHeader(const uint8_t* p, size_t bytes, size_t n, size_t k) {
  if (bytes < kHeaderBytes) return MakeFormatError(FormatErrorCode::kShorterThanHeader, bytes);
  const uint32_t msg_n = GetU32(p), msg_k = GetU32(p + 4);
  if (msg_n != n || msg_k != k) {
    return MakeFormatError(FormatErrorCode::kRandomkHeader, msg_n, msg_k, n, k);
  }
  if (bytes != PayloadBytes(k)) {
    return MakeFormatError(FormatErrorCode::kSizeVsExpected, bytes, PayloadBytes(k));
  }
  return FormatError();
}

// Calls f(j, index, stratum_start, stratum_size) for the k shared random indices, in
// increasing order. Strata tile [0, n) contiguously; Bresenham spreads the r = n % k longer
// ones evenly. One 64-bit draw serves two strata (32 random bits each, Lemire's
// multiply-shift). Host code: the draws are sequential.
template <typename F>
inline void ForEachRandomIndex(size_t n, size_t k, uint64_t seed, F f) {
  if (k == 0) return;
  Rng rng(seed);
  const size_t q = n / k, r = n % k;
  size_t start = 0, err = 0;
  uint64_t bits = 0;
  for (size_t j = 0; j < k; ++j) {
    err += r;
    const bool longer = err >= k;
    err -= longer ? k : 0;
    const uint32_t size = static_cast<uint32_t>(q + (longer ? 1 : 0));
    if ((j & 1) == 0) bits = rng.Next();
    const uint64_t draw = (j & 1) == 0 ? bits >> 32 : bits & 0xffffffffull;
    f(j, start + static_cast<size_t>((draw * size) >> 32), start, size);
    start += size;
  }
}

}  // namespace bytecomp::compress::randomk
