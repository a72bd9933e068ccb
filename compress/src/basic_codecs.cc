// The basic codecs: none, fp16, bf16.
//
// Wire formats (little-endian, no header: the element count n travels in the data-plane
// header and the payload size must match it exactly):
//   none  n fp32 values: 4n bytes.
//   fp16, bf16: format/half_format.h (shared with the CUDA codecs): 2n bytes.
// All three are summable_encoded: the server adds payloads element-wise in fp32 without a
// separate decode step. Decode rejects a payload of the wrong size or holding NaN/Inf.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/dtype.h"
#include "bytecomp/common/half.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/format/half_format.h"
#include "bytecomp/compress/registry.h"
#include "codec_checks.h"
#include "simd_kernel.h"

namespace bytecomp::compress {
namespace {

using half::kHalfMax;

bool HaveF16C() { return CpuSimdLevel() >= SimdLevel::kAvx2; }

// ---- fp16 kernels: F16C where the CPU has it, the shared scalar math otherwise. ----

// Converts to fp16 (kBFloat: bf16) with saturation; returns the largest |x| bit pattern seen
// (the finite check).
template <bool kBFloat>
uint32_t FloatToHalfScalar(const float* src, uint16_t* dst, size_t n) {
  uint32_t m = 0;
  for (size_t i = 0; i < n; ++i) {
    m = std::max(m, FloatBits(src[i]) & 0x7fffffffu);
    dst[i] = kBFloat ? half::SaturatingBFloat16Bits(src[i]) : half::SaturatingHalfBits(src[i]);
  }
  return m;
}

// The same with F16C, 8 at a time.
__attribute__((target("avx2,f16c"))) uint32_t FloatToHalfF16C(const float* src, uint16_t* dst,
                                                              size_t n) {
  const __m256 hi = _mm256_set1_ps(kHalfMax), lo = _mm256_set1_ps(-kHalfMax);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  __m256i maxbits = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    maxbits = _mm256_max_epu32(maxbits, _mm256_and_si256(_mm256_castps_si256(x), abs_mask));
    const __m256 c = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), maxbits);
  uint32_t m = *std::max_element(lanes, lanes + 8);
  return std::max(m, FloatToHalfScalar<false>(src + i, dst + i, n - i));
}

// Largest (h & 0x7fff): >= 0x7c00 means a NaN or Inf half.
BYTECOMP_SIMD_KERNEL(uint16_t, MaxAbsHalfBits, (const uint16_t* src, size_t n), (src, n)) {
  uint16_t lanes[32] = {};
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int j = 0; j < 32; ++j) lanes[j] = std::max<uint16_t>(lanes[j], src[i + j] & 0x7fffu);
  }
  uint16_t m = 0;
  for (; i < n; ++i) m = std::max<uint16_t>(m, src[i] & 0x7fffu);
  for (uint16_t l : lanes) m = std::max(m, l);
  return m;
}

// add == false: dst = widen(src); add == true: dst += widen(src).
template <bool kAdd>
__attribute__((target("avx2,f16c"))) void HalfToFloatF16C(const uint16_t* src, float* dst,
                                                          size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    if constexpr (kAdd) v = _mm256_add_ps(v, _mm256_loadu_ps(dst + i));
    _mm256_storeu_ps(dst + i, v);
  }
  for (; i < n; ++i) {
    if constexpr (kAdd) {
      dst[i] += HalfBitsToFloat(src[i]);
    } else {
      dst[i] = HalfBitsToFloat(src[i]);
    }
  }
}

template <bool kAdd>
void HalfToFloat(const uint16_t* src, float* dst, size_t n) {
  if (HaveF16C()) {
    HalfToFloatF16C<kAdd>(src, dst, n);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    if constexpr (kAdd) {
      dst[i] += HalfBitsToFloat(src[i]);
    } else {
      dst[i] = HalfBitsToFloat(src[i]);
    }
  }
}

// ---- bf16 kernels: integer bit operations, which vectorise everywhere. ----

// SaturatingBFloat16Bits' arithmetic, 8 elements; maxbits collects |x| bit patterns.
__attribute__((target("avx2"), always_inline)) inline __m256i ConvertBF16x8(__m256i x,
                                                                            __m256i& maxbits) {
  const __m256i a = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
  maxbits = _mm256_max_epu32(maxbits, a);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(a, 16), _mm256_set1_epi32(1));
  __m256i r =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(a, _mm256_set1_epi32(0x7fff)), lsb), 16);
  r = _mm256_min_epu32(r, _mm256_set1_epi32(0x7f7f));
  return _mm256_or_si256(r, _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x8000)));
}

__attribute__((target("avx2"))) uint32_t FloatToBF16Avx2(const float* src, uint16_t* dst,
                                                         size_t n) {
  __m256i maxbits = _mm256_setzero_si256();
  auto convert = [&](__m256i x) __attribute__((target("avx2"))) {
    return ConvertBF16x8(x, maxbits);
  };
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i lo = convert(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    const __m256i hi = convert(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 8)));
    // packus works within 128-bit lanes: reorder the quarters afterwards.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), packed);
  }
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), maxbits);
  const uint32_t m = *std::max_element(lanes, lanes + 8);
  return std::max(m, FloatToHalfScalar<true>(src + i, dst + i, n - i));
}

uint32_t FloatToBF16(const float* src, uint16_t* dst, size_t n) {
  return HaveF16C() ? FloatToBF16Avx2(src, dst, n) : FloatToHalfScalar<true>(src, dst, n);
}

template <bool kAdd>
__attribute__((always_inline)) inline void BF16ToFloatBody(const uint16_t* src, float* dst,
                                                           size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(src[i]) << 16;
    float v;
    std::memcpy(&v, &bits, 4);
    if constexpr (kAdd) {
      dst[i] += v;
    } else {
      dst[i] = v;
    }
  }
}

// Two functions rather than one template: clang does not multiversion templates.
BYTECOMP_SIMD_KERNEL(void, BF16WidenTo, (const uint16_t* src, float* dst, size_t n),
                     (src, dst, n)) {
  BF16ToFloatBody<false>(src, dst, n);
}
BYTECOMP_SIMD_KERNEL(void, BF16WidenAdd, (const uint16_t* src, float* dst, size_t n),
                     (src, dst, n)) {
  BF16ToFloatBody<true>(src, dst, n);
}

template <bool kAdd>
void BF16ToFloat(const uint16_t* src, float* dst, size_t n) {
  if constexpr (kAdd) {
    BF16WidenAdd(src, dst, n);
  } else {
    BF16WidenTo(src, dst, n);
  }
}

absl::Status CheckPayloadSize(absl::string_view codec, size_t have, size_t n, size_t per) {
  return codec_checks::PayloadSizeIs(codec, have, n * per, n);
}

// The summable codecs whose summed values are the n decoded elements (none, fp16, bf16): the
// server's sum is a DecodeAdd, expanding it a copy.
class DenseSummableCodec : public Codec {
 public:
  absl::Status AddEncodedValues(absl::Span<const uint8_t> encoded, const CodecContext& ctx,
                                size_t n, absl::Span<float> sum) override {
    if (sum.size() != n) {
      return absl::InvalidArgumentError(absl::StrCat("codec '", name(), "': sum length != n"));
    }
    return DecodeAdd(encoded, ctx, sum);
  }
  absl::Status ExpandSum(absl::Span<const float> sum, const CodecContext&,
                         absl::Span<float> output) override {
    if (sum.size() != output.size()) {
      return absl::InvalidArgumentError(absl::StrCat("codec '", name(), "': sum length"));
    }
    if (!sum.empty()) std::memcpy(output.data(), sum.data(), 4 * sum.size());
    return absl::OkStatus();
  }
};

// ---- none ----

class NoneCodec final : public DenseSummableCodec {
 public:
  absl::string_view name() const override { return "none"; }
  CodecProperties properties() const override {
    CodecProperties p;
    p.summable_encoded = true;
    p.unbiased = true;
    p.lossless = true;
    return p;
  }
  size_t MaxEncodedBytes(size_t n) const override { return 4 * n; }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext&,
                                absl::Span<uint8_t> out) override {
    if (auto s = codec_checks::OutputFits(name(), out.size(), 4 * input.size()); !s.ok()) return s;
    if (auto s = CheckFinite(input, "codec 'none' input"); !s.ok()) return s;
    if (!input.empty()) std::memcpy(out.data(), input.data(), 4 * input.size());
    return 4 * input.size();
  }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                      absl::Span<float> output) override {
    if (auto s = Validate(encoded, output.size()); !s.ok()) return s;
    if (!output.empty()) std::memcpy(output.data(), encoded.data(), encoded.size());
    return absl::OkStatus();
  }

  absl::Status DecodeAdd(absl::Span<const uint8_t> encoded, const CodecContext&,
                         absl::Span<float> accumulator) override {
    if (auto s = Validate(encoded, accumulator.size()); !s.ok()) return s;
    AddFloat32(accumulator.data(), AlignedAs<float>(encoded, scratch_), accumulator.size());
    return absl::OkStatus();
  }

 private:
  absl::Status Validate(absl::Span<const uint8_t> encoded, size_t n) {
    if (auto s = CheckPayloadSize(name(), encoded.size(), n, 4); !s.ok()) return s;
    if (!IsFiniteBits(MaxAbsBits(AlignedAs<float>(encoded, scratch_), n))) {
      return FormatErrorStatus(name(), MakeFormatError(FormatErrorCode::kPayloadNotFinite));
    }
    return absl::OkStatus();
  }

  std::vector<float> scratch_;  // unaligned payloads only
};

// ---- fp16 and bf16: one class, two element formats ----

class HalfCodec final : public DenseSummableCodec {
 public:
  explicit HalfCodec(bool bfloat) : bfloat_(bfloat) {}

  absl::string_view name() const override { return bfloat_ ? "bf16" : "fp16"; }
  CodecProperties properties() const override {
    CodecProperties p;
    p.summable_encoded = true;
    return p;
  }
  size_t MaxEncodedBytes(size_t n) const override { return 2 * n; }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext&,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    if (auto s = codec_checks::OutputFits(name(), out.size(), half::PayloadBytes(n)); !s.ok()) {
      return s;
    }
    const bool aligned = reinterpret_cast<uintptr_t>(out.data()) % 2 == 0;
    if (!aligned) out_scratch_.resize(n);
    uint16_t* dst = aligned ? reinterpret_cast<uint16_t*>(out.data()) : out_scratch_.data();
    uint32_t m;
    if (bfloat_) {
      m = FloatToBF16(input.data(), dst, n);
    } else if (HaveF16C()) {
      m = FloatToHalfF16C(input.data(), dst, n);
    } else {
      m = FloatToHalfScalar<false>(input.data(), dst, n);
    }
    if (!IsFiniteBits(m)) return NonFiniteError(input, absl::StrCat("codec '", name(), "' input"));
    if (!aligned && n > 0) std::memcpy(out.data(), dst, 2 * n);
    return 2 * n;
  }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                      absl::Span<float> output) override {
    if (auto s = Validate(encoded, output.size()); !s.ok()) return s;
    const uint16_t* src = AlignedAs<uint16_t>(encoded, scratch_);
    if (bfloat_) {
      BF16ToFloat<false>(src, output.data(), output.size());
    } else {
      HalfToFloat<false>(src, output.data(), output.size());
    }
    return absl::OkStatus();
  }

  absl::Status DecodeAdd(absl::Span<const uint8_t> encoded, const CodecContext&,
                         absl::Span<float> accumulator) override {
    if (auto s = Validate(encoded, accumulator.size()); !s.ok()) return s;
    const uint16_t* src = AlignedAs<uint16_t>(encoded, scratch_);
    if (bfloat_) {
      BF16ToFloat<true>(src, accumulator.data(), accumulator.size());
    } else {
      HalfToFloat<true>(src, accumulator.data(), accumulator.size());
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Validate(absl::Span<const uint8_t> encoded, size_t n) {
    if (auto s = CheckPayloadSize(name(), encoded.size(), n, 2); !s.ok()) return s;
    const uint16_t m = MaxAbsHalfBits(AlignedAs<uint16_t>(encoded, scratch_), n);
    if (!half::IsFiniteHalfBits(m, bfloat_)) {
      return FormatErrorStatus(name(), MakeFormatError(FormatErrorCode::kPayloadNotFinite));
    }
    return absl::OkStatus();
  }

  bool bfloat_;
  std::vector<uint16_t> scratch_;      // unaligned payloads only
  std::vector<uint16_t> out_scratch_;  // unaligned output buffers only
};

CodecFacts WithSummedWire(CodecFacts facts, SummedWire wire) {
  facts.summed_wire = wire;
  return facts;
}

}  // namespace

void RegisterBasicCodecs(CodecRegistry& registry) {
  MustRegister(registry,
               {.name = "none",
                .summary = "no compression: the fp32 values",
                .params = {},
                .factory = [](const CodecParams&) -> absl::StatusOr<std::unique_ptr<Codec>> {
                  return std::make_unique<NoneCodec>();
                },
                .facts = {.loss = CodecLoss::kNone,
                          .summable_encoded = true,
                          .encode_target = EncodeSpeedTarget::kElementwise}});
  // fp16 and bf16 have GPU kernels (compress/cuda basic_kernels.cu), with the residual fused.
  const CodecFacts half_facts = {.loss = CodecLoss::kRounding,
                                 .summable_encoded = true,
                                 .gpu_kernel = true,
                                 .gpu_memories = {MemoryKind::kResidual},
                                 .encode_target = EncodeSpeedTarget::kElementwise};
  MustRegister(registry,
               {.name = "fp16",
                .summary = "IEEE half precision, saturated at +-65504",
                .params = {},
                .factory = [](const CodecParams&) -> absl::StatusOr<std::unique_ptr<Codec>> {
                  return std::make_unique<HalfCodec>(false);
                },
                .facts = WithSummedWire(half_facts, SummedWire::kFloat16)});
  MustRegister(registry,
               {.name = "bf16",
                .summary = "bfloat16 (fp32's top 16 bits, rounded to nearest even)",
                .params = {},
                .factory = [](const CodecParams&) -> absl::StatusOr<std::unique_ptr<Codec>> {
                  return std::make_unique<HalfCodec>(true);
                },
                .facts = WithSummedWire(half_facts, SummedWire::kBfloat16)});
}

}  // namespace bytecomp::compress
