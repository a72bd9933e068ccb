// Helpers the codecs share: the finite check, seeds, and (from format/) little-endian fields,
// the generator and bit packing.
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
#include "bytecomp/compress/format/bit_stream.h"     // BitWriter, BitReader, PackedBytes
#include "bytecomp/compress/format/little_endian.h"  // PutU32, GetU32, PutF32, GetF32
#include "bytecomp/compress/format/rng.h"            // Mix64, Rng

namespace bytecomp::compress {

// Largest |x| bit pattern (x's bits with the sign cleared) over data; >= 0x7f800000 means a
// NaN or Inf is present. Vectorised; about memory speed.
uint32_t MaxAbsBits(const float* data, size_t n);
constexpr uint32_t kNonFiniteAbsBits = 0x7f800000u;
inline bool IsFiniteBits(uint32_t abs_bits) { return abs_bits < kNonFiniteAbsBits; }

// The vector kernels in use (hand-written ones and compress/src/simd_kernel.h's variants): the
// best the CPU has, capped by the environment variable BYTECOMP_SIMD=scalar|avx2|avx512 (read
// once), so that tests and benchmarks can exercise the fallbacks on a machine that has more.
// kAvx2 implies F16C here; kAvx512 is x86-64-v4 (AVX-512 F, BW, VL, DQ and CD).
enum class SimdLevel { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };
SimdLevel CpuSimdLevel();
// kAvx512 and AVX-512 VBMI (byte permutes across the register: Ice Lake, Zen 4 and later), for
// the kernels written for it (the code packing of compress/src/quant_pack.cc).
bool CpuHasAvx512Vbmi();

// OK, or InvalidArgument "input element 12 of 100 is NaN" naming the first bad index.
// `what` says whose input ("codec 'topk' input").
absl::Status CheckFinite(absl::Span<const float> data, absl::string_view what);
// Same message, for a caller that already knows a non-finite value is present.
absl::Status NonFiniteError(absl::Span<const float> data, absl::string_view what);

// "codec 'topk': malformed payload: <detail>" as InvalidArgument.
absl::Status MalformedError(absl::string_view codec, absl::string_view detail);

// A seed that every worker derives alike for (job seed, key, round) and a per-codec salt.
inline uint64_t SharedSeed(const CodecContext& ctx, uint64_t salt) {
  return Mix64(Mix64(Mix64(Mix64(ctx.seed) ^ ctx.key) ^ ctx.round) ^ salt);
}
// A seed private to this node (stochastic rounding, sampling): differs per worker.
inline uint64_t NodeSeed(const CodecContext& ctx, uint64_t salt) {
  return Mix64(SharedSeed(ctx, salt) ^
               (static_cast<uint64_t>(ctx.node) + 1) * 0x2545f4914f6cdd1dull);
}

// The payload viewed as T elements; copied into scratch first when its address is not aligned
// for T (ZeroMQ's small messages may not be), so readers never do a misaligned access.
template <typename T>
const T* AlignedAs(absl::Span<const uint8_t> bytes, std::vector<T>& scratch) {
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(T) == 0) {
    return reinterpret_cast<const T*>(bytes.data());
  }
  scratch.resize(bytes.size() / sizeof(T));
  // An empty scratch may have a null data(), which memcpy must not see even for 0 bytes.
  if (!scratch.empty()) std::memcpy(scratch.data(), bytes.data(), scratch.size() * sizeof(T));
  return scratch.data();
}

}  // namespace bytecomp::compress
