// randomk's message and its shared indices, written and read by the CPU codec
// (compress/src/sparse_randomk.cc) and the CUDA one (compress/cuda/src/sparse_kernels.cu).
//   u32 n, u32 k = KeptCount(ratio, n), then k fp32 values; size 8 + 4k.
// The indices are not sent: every node derives them from (seed, key, round)
// (SharedSeed(ctx, kRandomkSalt)), so the value arrays of all workers add element-wise
// (summable_encoded). Index j is drawn uniformly from the j-th of k strata that tile [0, n)
// (stratum sizes floor(n/k) or ceil(n/k), spread evenly), which gives k distinct, increasing
// indices; the draws are a counter's (SplitMix64), so that each index can be found on its own.
// With scale=true each value is multiplied by its stratum size, the inverse of its inclusion
// probability, which makes the codec unbiased.
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

// The k strata that tile [0, n): q = n / k elements each, the r = n % k longer ones (q + 1)
// spread evenly by Bresenham. Made once a call (its divisions), then asked per pick.
struct Strata {
  uint64_t k = 0, q = 0, r = 0;
  double inverse_k = 0;  // 1 / k, for FloorMulDiv
};
BYTECOMP_HD Strata StrataOf(size_t n, size_t k) {
  return Strata{k, n / k, n % k, 1.0 / static_cast<double>(k)};
}

// floor(j * r / k) for j * r < 2^62 (j <= k <= 2^31 here), inverse_k = 1 / k: a double
// quotient settled in integers, since a GPU's 64-bit integer division is a long emulated
// sequence. The double is within a unit or two of the true quotient, which is below 2^32.
BYTECOMP_HD uint64_t FloorMulDiv(uint64_t j, uint64_t r, uint64_t k, double inverse_k) {
  const uint64_t p = j * r;
  uint64_t t = static_cast<uint64_t>(static_cast<double>(p) * inverse_k);
  while (t > 0 && t * k > p) --t;
  while ((t + 1) * k <= p) ++t;
  return t;
}

// Pick j's stratum: its start and size. Stratum j is longer where floor((j + 1) r / k) steps
// past floor(j r / k), the longer strata before it.
BYTECOMP_HD void StratumOf(const Strata& s, size_t j, size_t* start, uint32_t* size) {
  const uint64_t before = FloorMulDiv(j, s.r, s.k, s.inverse_k);
  const uint64_t rest = static_cast<uint64_t>(j) * s.r - before * s.k;  // (j r) mod k
  *start = static_cast<size_t>(static_cast<uint64_t>(j) * s.q + before);
  *size = static_cast<uint32_t>(s.q + (rest + s.r >= s.k ? 1u : 0u));
}

// The 64 random bits that picks 2m and 2m + 1 share: SplitMix64's output m from the seed, a
// counter rather than a sequence, so that each pick is drawn on its own (a GPU thread a pick).
BYTECOMP_HD uint64_t PairBits(uint64_t seed, size_t m) {
  return Mix64(seed + static_cast<uint64_t>(m) * 0x9e3779b97f4a7c15ull);
}

// Pick j within its stratum: the high 32 bits of its pair's draw for even j, the low 32 for odd
// j, scaled to the size (Lemire's multiply-shift).
BYTECOMP_HD size_t PickIn(uint64_t pair_bits, size_t j, size_t start, uint32_t size) {
  const uint64_t draw = (j & 1) == 0 ? pair_bits >> 32 : pair_bits & 0xffffffffull;
  return start + static_cast<size_t>((draw * size) >> 32);
}

// The shared index of pick j (j < k) and its stratum: what ForEachRandomIndex gives for j.
BYTECOMP_HD size_t RandomIndexAt(const Strata& s, uint64_t seed, size_t j, size_t* start,
                                 uint32_t* size) {
  StratumOf(s, j, start, size);
  return PickIn(PairBits(seed, j / 2), j, *start, *size);
}

// Calls f(j, index, stratum_start, stratum_size) for the k shared random indices, in
// increasing order: RandomIndexAt for j = 0 .. k-1, the strata walked (Bresenham). The pairs'
// bits are drawn 16 at a time ahead of the walk: independent of each other, they overlap.
template <typename F>
inline void ForEachRandomIndex(size_t n, size_t k, uint64_t seed, F f) {
  if (k == 0) return;
  const size_t q = n / k, r = n % k;
  size_t start = 0, err = 0;
  constexpr size_t kPairs = 16;
  uint64_t bits[kPairs];
  for (size_t j0 = 0; j0 < k; j0 += 2 * kPairs) {
    for (size_t t = 0; t < kPairs; ++t) bits[t] = PairBits(seed, j0 / 2 + t);
    const size_t end = j0 + 2 * kPairs < k ? j0 + 2 * kPairs : k;
    for (size_t j = j0; j < end; ++j) {
      err += r;
      const bool longer = err >= k;
      err -= longer ? k : 0;
      const uint32_t size = static_cast<uint32_t>(q + (longer ? 1 : 0));
      f(j, PickIn(bits[(j - j0) / 2], j, start, size), start, size);
      start += size;
    }
  }
}

}  // namespace bytecomp::compress::randomk
