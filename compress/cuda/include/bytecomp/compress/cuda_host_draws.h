// Random positions that the CPU sparse codecs draw with their sequential generator
// (codec_util.h's Rng), so the GPU codecs draw them on the host and upload them: randomk's
// shared indices and dgc's sample positions. Host code; mirrors sparse_codecs.cc, and
// test/unit/cpu_offload checks randomk's against the CPU codec.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "bytecomp/compress/codec.h"
#include "bytecomp/compress/codec_util.h"

namespace bytecomp::compress::cuda {

constexpr uint64_t kRandomkSalt = 0x72616e646f6d6bull;  // "randomk", sparse_codecs.cc
constexpr uint64_t kDgcSalt = 0x646763ull;

// randomk: index j is uniform in the j-th of k strata tiling [0, n) (Bresenham-spread sizes,
// 32 random bits a stratum, two strata a 64-bit draw);
// sizes[j] is that stratum's size (the scale of a scaled value).
inline void RandomkIndices(size_t n, size_t k, const CodecContext& ctx, uint32_t* idx,
                           uint32_t* sizes) {
  if (k == 0) return;
  Rng rng(SharedSeed(ctx, kRandomkSalt));
  const size_t q = n / k, r = n % k;
  size_t start = 0, err = 0;
  uint64_t bits = 0;
  for (size_t j = 0; j < k; ++j) {
    err += r;
    const bool longer = err >= k;
    err -= longer ? k : 0;
    const uint32_t size = static_cast<uint32_t>(q + (longer ? 1 : 0));
    // One 64-bit draw serves two strata: the high half, then the low half.
    if ((j & 1) == 0) bits = rng.Next();
    const uint64_t draw = (j & 1) == 0 ? bits >> 32 : bits & 0xffffffffull;
    idx[j] = static_cast<uint32_t>(start + ((draw * size) >> 32));
    sizes[j] = size;
    start += size;
  }
}

// dgc: s = min(n, max(1000, n / 100)) positions, every one when s == n, else one uniform pick
// in each of s equal strides.
inline std::vector<uint32_t> DgcSamplePositions(size_t n, const CodecContext& ctx) {
  const size_t s = std::min(n, std::max<size_t>(1000, n / 100));
  std::vector<uint32_t> positions(s);
  if (s == n) {
    for (size_t j = 0; j < n; ++j) positions[j] = static_cast<uint32_t>(j);
    return positions;
  }
  Rng rng(NodeSeed(ctx, kDgcSalt));
  const size_t stride = n / s;
  for (size_t j = 0; j < s; ++j) {
    positions[j] = static_cast<uint32_t>(j * stride + rng.Below(static_cast<uint32_t>(stride)));
  }
  return positions;
}

}  // namespace bytecomp::compress::cuda
