// Codec's default methods and the helpers of codec_util.h.
#include "bytecomp/compress/codec.h"

#include <cpuid.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/dtype.h"
#include "bytecomp/compress/codec_util.h"
#include "simd_kernel.h"

namespace bytecomp::compress {

absl::Status Codec::DecodeAdd(absl::Span<const uint8_t> encoded, const CodecContext& ctx,
                              absl::Span<float> accumulator) {
  decode_add_scratch_.resize(accumulator.size());
  absl::Span<float> scratch = absl::MakeSpan(decode_add_scratch_);
  if (absl::Status s = Decode(encoded, ctx, scratch); !s.ok()) return s;
  AddFloat32(accumulator.data(), scratch.data(), accumulator.size());
  return absl::OkStatus();
}

absl::Status Codec::AddEncodedValues(absl::Span<const uint8_t>, const CodecContext&, size_t,
                                     absl::Span<float>) {
  return absl::UnimplementedError(
      absl::StrCat("codec '", name(), "' cannot sum encoded payloads without decoding"));
}

absl::Status Codec::ExpandSum(absl::Span<const float>, const CodecContext&, absl::Span<float>) {
  return absl::UnimplementedError(
      absl::StrCat("codec '", name(), "' cannot sum encoded payloads without decoding"));
}

// Eight independent lanes so that the compiler keeps a vector of maxima.
BYTECOMP_SIMD_KERNEL(uint32_t, MaxAbsBits, (const float* data, size_t n), (data, n)) {
  uint32_t lanes[16] = {};
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    PrefetchLineAhead(data + i);
    for (int j = 0; j < 16; ++j) {
      uint32_t bits;
      std::memcpy(&bits, data + i + j, 4);
      lanes[j] = std::max(lanes[j], bits & 0x7fffffffu);
    }
  }
  uint32_t m = 0;
  for (; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, data + i, 4);
    m = std::max(m, bits & 0x7fffffffu);
  }
  for (uint32_t l : lanes) m = std::max(m, l);
  return m;
}

absl::Status NonFiniteError(absl::Span<const float> data, absl::string_view what) {
  for (size_t i = 0; i < data.size(); ++i) {
    if (!std::isfinite(data[i])) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": element ", i, " of ", data.size(),
                                                     " is ", std::isnan(data[i]) ? "NaN" : "Inf",
                                                     " (only finite values can be encoded)"));
    }
  }
  return absl::InternalError(absl::StrCat(what, ": non-finite value reported but not found"));
}

absl::Status CheckFinite(absl::Span<const float> data, absl::string_view what) {
  if (IsFiniteBits(MaxAbsBits(data.data(), data.size()))) return absl::OkStatus();
  return NonFiniteError(data, what);
}

namespace {

// F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know "f16c".
// Asked only where AVX2 is usable, so the OS saves the YMM state that F16C needs.
bool CpuHasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ecx & bit_F16C) != 0;
}

}  // namespace

SimdLevel CpuSimdLevel() {
  static const SimdLevel level = [] {
    SimdLevel best = SimdLevel::kScalar;
    if (__builtin_cpu_supports("avx2") && CpuHasF16c()) best = SimdLevel::kAvx2;
    // kAvx512: what x86-64-v4 (simd_kernel.h's variant) requires.
    if (best == SimdLevel::kAvx2 && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512cd")) {
      best = SimdLevel::kAvx512;
    }
    const char* cap = std::getenv("BYTECOMP_SIMD");
    if (cap != nullptr) {
      const std::string c(cap);
      const SimdLevel limit = c == "scalar" ? SimdLevel::kScalar
                              : c == "avx2" ? SimdLevel::kAvx2
                                            : SimdLevel::kAvx512;
      best = std::min(best, limit);
    }
    return best;
  }();
  return level;
}

bool CpuHasAvx512Vbmi() {
  static const bool has =
      CpuSimdLevel() == SimdLevel::kAvx512 && __builtin_cpu_supports("avx512vbmi");
  return has;
}

absl::Status MalformedError(absl::string_view codec, absl::string_view detail) {
  return absl::InvalidArgumentError(
      absl::StrCat("codec '", codec, "': malformed payload: ", detail));
}

}  // namespace bytecomp::compress
