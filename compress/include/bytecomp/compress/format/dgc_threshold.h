// How dgc picks its threshold (GRACE's DGC), and the sample that dgc's and adaq's thresholds
// come from. The CPU codec (compress/src/sparse_dgc.cc) and the CUDA one
// (compress/cuda/src/sparse_kernels.cu) run the same steps through these functions, so they
// send the same elements:
//   1. s = SampleSize(n) positions (ForEachSamplePosition, seeded with NodeSeed(ctx, kDgcSalt));
//   2. threshold = SampleThreshold(the sampled |x| bit patterns, ratio): the KeptCount(ratio, s)
//      -th largest, at least the smallest positive float (zeros are never worth sending);
//   3. count the |x| >= threshold; while AdjustThreshold(count, Target(ratio, n), &threshold)
//      and fewer than kMaxSteps steps were taken, count again;
//   4. send every |x| >= threshold (the sparse message, sparse_format.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "bytecomp/compress/format/host_device.h"
#include "bytecomp/compress/format/rng.h"
#include "bytecomp/compress/format/sparse_format.h"
#include "bytecomp/compress/format/topk_select.h"

namespace bytecomp::compress::dgc {

constexpr uint64_t kDgcSalt = 0x646763ull;  // "dgc", for NodeSeed
constexpr int kMaxSteps = 10;
constexpr float kMinThreshold = 0x1p-149f;  // the smallest positive (subnormal) float

// Elements sampled for a threshold estimate: 1% of n, at least min(n, 1000).
BYTECOMP_HD size_t SampleSize(size_t n) {
  const size_t s = n / 100 > 1000 ? n / 100 : 1000;
  return s < n ? s : n;
}

// Calls f(j, position) for the SampleSize(n) sampled positions: every position when the sample
// is the whole tensor, else one uniform pick in each of s equal strides (cheaper than scattered
// reads, same expectation). Host code: the draws are sequential.
template <typename F>
void ForEachSamplePosition(size_t n, uint64_t seed, F f) {
  const size_t s = SampleSize(n);
  if (s == n) {
    for (size_t j = 0; j < n; ++j) f(j, j);
    return;
  }
  Rng rng(seed);
  const size_t stride = n / s;
  for (size_t j = 0; j < s; ++j) f(j, j * stride + rng.Below(static_cast<uint32_t>(stride)));
}

// Step 2: the starting threshold from the sampled |x| bit patterns (reordered).
inline float SampleThreshold(std::vector<uint32_t>& sample_abs_bits, double ratio) {
  const size_t m = sparse::KeptCount(ratio, sample_abs_bits.size());
  const float sampled = BitsToFloat(topk::NthLargest(sample_abs_bits, m));
  return sampled > kMinThreshold ? sampled : kMinThreshold;
}

// The kept count aimed at: ratio * n.
BYTECOMP_HD double Target(double ratio, size_t n) { return ratio * static_cast<double>(n); }

// Step 3: with `count` elements at or above *threshold, scales it by 1.3 when the count is
// above 1.3 target, by 0.7 (not below kMinThreshold) when below 0.7 target, and returns true;
// returns false when the count is within those bounds (the search is done).
BYTECOMP_HD bool AdjustThreshold(size_t count, double target, float* threshold) {
  if (count > 1.3 * target) {
    *threshold *= 1.3f;
    return true;
  }
  if (count < 0.7 * target) {
    const float lower = *threshold * 0.7f;
    *threshold = lower > kMinThreshold ? lower : kMinThreshold;
    return true;
  }
  return false;
}

// The comparand of step 3 and 4: |x| >= threshold is (bits of x & 0x7fffffff) >= this.
BYTECOMP_HD uint32_t ThresholdBits(float threshold) { return FloatBits(threshold) & 0x7fffffffu; }

}  // namespace bytecomp::compress::dgc
