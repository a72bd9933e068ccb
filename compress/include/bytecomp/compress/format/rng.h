// The sequential generator behind the positions dgc and adaq sample: xoshiro256** seeded
// through SplitMix64 (Mix64, which randomk_format.h also draws from as a counter). Deterministic
// everywhere; __host__ __device__, though the GPU codecs draw the samples on the host (the draws
// are sequential) with exactly the CPU codecs' calls (dgc_threshold.h).
#pragma once

#include <cstdint>

#include "bytecomp/compress/format/host_device.h"

namespace bytecomp::compress {

// SplitMix64 step: a good 64-bit mix, used to derive seeds.
BYTECOMP_HD uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// xoshiro256** : fast, good quality, deterministic everywhere.
class Rng {
 public:
  BYTECOMP_HD explicit Rng(uint64_t seed) {
    for (auto& s : s_) s = seed = Mix64(seed);
  }
  BYTECOMP_HD uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, bound) for bound < 2^32 (Lemire's multiply-shift; bias < 2^-32 * bound).
  BYTECOMP_HD uint32_t Below(uint32_t bound) {
    return static_cast<uint32_t>(((Next() >> 32) * static_cast<uint64_t>(bound)) >> 32);
  }
  // Uniform in [0, 1).
  BYTECOMP_HD float UniformFloat() { return static_cast<float>(Next() >> 40) * 0x1.0p-24f; }
  BYTECOMP_HD double UniformDouble() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  BYTECOMP_HD static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace bytecomp::compress
