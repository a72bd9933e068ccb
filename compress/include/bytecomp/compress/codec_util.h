// Helpers the codecs share: the finite check, seeds, little-endian fields, bit packing.
// Internal to compress/ (the door, compress.h, does not include it), but public so that every
// codec source and the tests use the same ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "bytecomp/compress/codec.h"

namespace bytecomp::compress {

// Largest |x| bit pattern (x's bits with the sign cleared) over data; >= 0x7f800000 means a
// NaN or Inf is present. Vectorised; about memory speed.
uint32_t MaxAbsBits(const float* data, size_t n);
constexpr uint32_t kNonFiniteAbsBits = 0x7f800000u;
inline bool IsFiniteBits(uint32_t abs_bits) { return abs_bits < kNonFiniteAbsBits; }

// The hand-written vector kernels in use: the best the CPU has, capped by the environment
// variable BYTECOMP_SIMD=scalar|avx2|avx512 (read once), so that tests and benchmarks can
// exercise the fallbacks on a machine that has more. kAvx2 implies F16C here.
enum class SimdLevel { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };
SimdLevel CpuSimdLevel();

// OK, or InvalidArgument "input element 12 of 100 is NaN" naming the first bad index.
// `what` says whose input ("codec 'topk' input").
absl::Status CheckFinite(absl::Span<const float> data, absl::string_view what);
// Same message, for a caller that already knows a non-finite value is present.
absl::Status NonFiniteError(absl::Span<const float> data, absl::string_view what);

// "codec 'topk': malformed payload: <detail>" as InvalidArgument.
absl::Status MalformedError(absl::string_view codec, absl::string_view detail);

// SplitMix64 step: a good 64-bit mix, used to derive seeds.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
// A seed that every worker derives alike for (job seed, key, round) and a per-codec salt.
inline uint64_t SharedSeed(const CodecContext& ctx, uint64_t salt) {
  return Mix64(Mix64(Mix64(Mix64(ctx.seed) ^ ctx.key) ^ ctx.round) ^ salt);
}
// A seed private to this node (stochastic rounding, sampling): differs per worker.
inline uint64_t NodeSeed(const CodecContext& ctx, uint64_t salt) {
  return Mix64(SharedSeed(ctx, salt) ^ (static_cast<uint64_t>(ctx.node) + 1) * 0x2545f4914f6cdd1dull);
}

// xoshiro256** : fast, good quality, deterministic everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& s : s_) s = seed = Mix64(seed);
  }
  uint64_t Next() {
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
  uint32_t Below(uint32_t bound) {
    return static_cast<uint32_t>(((Next() >> 32) * static_cast<uint64_t>(bound)) >> 32);
  }
  // Uniform in [0, 1).
  float UniformFloat() { return static_cast<float>(Next() >> 40) * 0x1.0p-24f; }
  double UniformDouble() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

// Little-endian fixed-width fields (all ByteComp wire formats are little-endian).
inline void PutU32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
inline uint32_t GetU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline void PutF32(uint8_t* p, float v) { std::memcpy(p, &v, 4); }
inline float GetF32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "wire formats assume little-endian");

// The payload viewed as T elements; copied into scratch first when its address is not aligned
// for T (ZeroMQ's small messages may not be), so readers never do a misaligned access.
template <typename T>
const T* AlignedAs(absl::Span<const uint8_t> bytes, std::vector<T>& scratch) {
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(T) == 0) {
    return reinterpret_cast<const T*>(bytes.data());
  }
  scratch.resize(bytes.size() / sizeof(T));
  std::memcpy(scratch.data(), bytes.data(), scratch.size() * sizeof(T));
  return scratch.data();
}

// Bits needed to hold v (0 for 0).
inline int BitWidth(uint32_t v) { return v == 0 ? 0 : 32 - __builtin_clz(v); }
inline size_t PackedBytes(size_t count, int bits) { return (count * static_cast<size_t>(bits) + 7) / 8; }

// LSB-first bit stream: value i occupies bits [i*bits, (i+1)*bits) of the byte string, which
// is exactly PackedBytes(count, bits) long. Flushes 8 bytes at a time.
class BitWriter {
 public:
  explicit BitWriter(uint8_t* out) : out_(out) {}
  void Put(uint32_t value, int bits) {  // bits in [0, 32]; value < 2^bits
    acc_ |= static_cast<uint64_t>(value) << filled_;
    filled_ += bits;
    if (filled_ >= 64) {
      std::memcpy(out_, &acc_, 8);
      out_ += 8;
      filled_ -= 64;
      // The bits of value that did not fit (none when filled_ is now 0: value >> bits == 0).
      acc_ = static_cast<uint64_t>(value) >> (bits - filled_);
    }
  }
  // Writes the last partial word (the final byte zero-padded); returns the end pointer.
  uint8_t* Finish() {
    const int bytes = (filled_ + 7) / 8;
    std::memcpy(out_, &acc_, bytes);
    out_ += bytes;
    acc_ = 0;
    filled_ = 0;
    return out_;
  }

 private:
  uint8_t* out_;
  uint64_t acc_ = 0;
  int filled_ = 0;
};

// Reads what BitWriter wrote; never reads past [data, data + size): a short stream yields
// zero bits, and the caller checks the size beforehand (PackedBytes).
class BitReader {
 public:
  BitReader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  uint32_t Get(int bits) {  // bits in [0, 32]
    if (filled_ < bits) Refill();
    const uint32_t v = static_cast<uint32_t>(acc_ & ((uint64_t{1} << bits) - 1));
    acc_ >>= bits;
    filled_ -= bits;
    return v;
  }

 private:
  void Refill() {
    // Top up to at least 57 bits, a byte at a time near the end, 8 bytes at a time elsewhere.
    if (end_ - p_ >= 8 && filled_ <= 0) {
      std::memcpy(&acc_, p_, 8);
      p_ += 8;
      filled_ = 64;
      return;
    }
    while (filled_ <= 56) {
      const uint64_t byte = p_ < end_ ? *p_++ : 0;
      acc_ |= byte << filled_;
      filled_ += 8;
    }
  }

  const uint8_t* p_;
  const uint8_t* end_;
  uint64_t acc_ = 0;
  int filled_ = 0;
};

}  // namespace bytecomp::compress
