// dithering (BytePS): stochastic rounding of |x| / norm to k levels, linear or natural spacing.
// Payload: format/dithering_format.h, shared with the CUDA codec.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>
#include "exact_float_math.h"  // first: see there

#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/dithering_format.h"
#include "bytecomp/compress/params.h"
#include "bytecomp/compress/registry.h"
#include "codec_checks.h"
#include "param_specs.h"
#include "quant_codecs.h"
#include "quant_kernels.h"
#include "quant_pack.h"
#include "simd_kernel.h"

namespace bytecomp::compress {
namespace {

template <bool kNatural>
__attribute__((always_inline)) inline void DitherEncodeBody(
    const float* __restrict x, size_t n, float inverse_norm, uint32_t s, uint32_t level_bits,
    CounterRandom random, uint32_t first_index, uint16_t* __restrict codes) {
  const uint32_t count = static_cast<uint32_t>(n);  // 32-bit counters: see qsgd
  for (uint32_t i = 0; i < count; ++i) {
    codes[i] = static_cast<uint16_t>(DitherCode(x[i], inverse_norm, s, level_bits, kNatural,
                                                UniformFloat(random, first_index + i)));
  }
}

BYTECOMP_SIMD_KERNEL(void, DitherEncodeLinear,
                     (const float* __restrict x, size_t n, float inverse_norm, uint32_t s,
                      uint32_t level_bits, CounterRandom random, uint32_t first_index,
                      uint16_t* __restrict codes),
                     (x, n, inverse_norm, s, level_bits, random, first_index, codes)) {
  DitherEncodeBody<false>(x, n, inverse_norm, s, level_bits, random, first_index, codes);
}

BYTECOMP_SIMD_KERNEL(void, DitherEncodeNatural,
                     (const float* __restrict x, size_t n, float inverse_norm, uint32_t s,
                      uint32_t level_bits, CounterRandom random, uint32_t first_index,
                      uint16_t* __restrict codes),
                     (x, n, inverse_norm, s, level_bits, random, first_index, codes)) {
  DitherEncodeBody<true>(x, n, inverse_norm, s, level_bits, random, first_index, codes);
}

// DitherEncodeLinear with AVX-512 by hand, 16 elements a step: the random bits advanced by an
// addition (RandomBits16), StochasticLevel's selects as vmaxps and vminps (the same results, NaN
// included), the sign bit by a masked or. The same IEEE operations as DitherCode, so the same
// codes.
[[gnu::target("arch=x86-64-v4")]] void DitherEncodeLinearAvx512Steps(
    const float* __restrict x, size_t n, float inverse_norm, uint32_t s, uint32_t level_bits,
    CounterRandom random, uint32_t first_index, uint16_t* __restrict codes) {
  RandomBits16 bits16(random, first_index);
  const __m512 inverse = _mm512_set1_ps(inverse_norm);
  const __m512 levels = _mm512_set1_ps(static_cast<float>(s));  // DitherLinearLevel's product
  const __m512 top = _mm512_set1_ps(static_cast<float>(static_cast<int32_t>(s)));
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(1u << level_bits));
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    PrefetchLineAhead(x + i);
    const __m512 uniform = UniformFromBits16(bits16.Next());
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512 scaled = _mm512_mul_ps(_mm512_mul_ps(_mm512_abs_ps(v), inverse), levels);
    const __m512i code = StochasticCode16(scaled, top, uniform, v, sign);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + i), _mm512_cvtepi32_epi16(code));
  }
  for (; i < n; ++i) {
    const uint32_t index = first_index + static_cast<uint32_t>(i);
    codes[i] = static_cast<uint16_t>(
        DitherCode(x[i], inverse_norm, s, level_bits, false, UniformFloat(random, index)));
  }
}

// Decoded value of a code (dithering::Value), the partition a constant of each loop.
BYTECOMP_SIMD_KERNEL(void, DitherDecodeLinear,
                     (const uint16_t* __restrict codes, size_t n, uint32_t s, uint32_t level_bits,
                      float norm, float* __restrict out),
                     (codes, n, s, level_bits, norm, out)) {
  for (size_t i = 0; i < n; ++i) out[i] = dithering::Value(codes[i], level_bits, s, false, norm);
}

BYTECOMP_SIMD_KERNEL(void, DitherDecodeNatural,
                     (const uint16_t* __restrict codes, size_t n, uint32_t s, uint32_t level_bits,
                      float norm, float* __restrict out),
                     (codes, n, s, level_bits, norm, out)) {
  for (size_t i = 0; i < n; ++i) out[i] = dithering::Value(codes[i], level_bits, s, true, norm);
}

class DitheringCodec final : public Codec {
 public:
  DitheringCodec(uint32_t levels, bool natural, bool l2)
      : levels_(levels), natural_(natural), l2_(l2), level_bits_(BitsFor(levels)) {}
  absl::string_view name() const override { return "dithering"; }
  CodecProperties properties() const override {
    CodecProperties p;
    p.unbiased = true;
    return p;
  }
  size_t MaxEncodedBytes(size_t n) const override {
    return dithering::PayloadBytes(n, level_bits_);
  }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext& ctx,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    const size_t bytes = MaxEncodedBytes(n);
    if (auto s = codec_checks::CheckEncodeCall(*this, n, out.size()); !s.ok()) return s;
    // One reduction: the sum of squares (NaN/Inf iff x has one) or the largest |x| bits.
    const double sum_of_squares = l2_ ? SumOfSquares(input.data(), n) : 0.0;
    const uint32_t max_bits = l2_ ? 0u : MaxAbsBits(input.data(), n);
    if (!std::isfinite(sum_of_squares) || !IsFiniteBits(max_bits)) {
      return NonFiniteError(input, codec_checks::InputWhat(name()));
    }
    const float norm = dithering::Norm(l2_, sum_of_squares, max_bits);
    PutU32(out.data(), static_cast<uint32_t>(n));
    PutF32(out.data() + 4, norm);
    const float inverse_norm = 1.0f / norm;
    const CounterRandom random = StreamOf(ctx);
    // Blocks of codes that stay in L1 between computing and packing them; a multiple of 8
    // elements, so every block but the last starts on a byte.
    constexpr size_t kBlock = 2048;
    codes_.resize(std::min(n, kBlock));
    const bool avx512 = CpuSimdLevel() == SimdLevel::kAvx512;
    for (size_t begin = 0; begin < n; begin += kBlock) {
      const size_t len = std::min(kBlock, n - begin);
      const uint32_t first = static_cast<uint32_t>(begin);
      // (The AVX-512 loop asks for its lines as it goes.)
      if (natural_ || !avx512) PrefetchAhead(input.data(), n, begin + kBlock, kBlock);
      if (natural_) {
        DitherEncodeNatural(input.data() + begin, len, inverse_norm, levels_, level_bits_, random,
                            first, codes_.data());
      } else if (avx512) {
        DitherEncodeLinearAvx512Steps(input.data() + begin, len, inverse_norm, levels_, level_bits_,
                                      random, first, codes_.data());
      } else {
        DitherEncodeLinear(input.data() + begin, len, inverse_norm, levels_, level_bits_, random,
                           first, codes_.data());
      }
      PackCodes(codes_.data(), len, level_bits_ + 1,
                out.data() + dithering::kHeaderBytes + begin * (level_bits_ + 1) / 8);
    }
    return bytes;
  }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                      absl::Span<float> output) override {
    const size_t n = output.size();
    auto header_norm = codec_checks::ReadHeaderValueAfterCount(*this, encoded, n, kNormValue);
    if (!header_norm.ok()) return header_norm.status();
    const float norm = *header_norm;
    // In L1-sized blocks (a multiple of 8 codes: each block starts on a byte): unpack, check
    // the levels, then sign * (level value * norm) by arithmetic, which vectorises.
    constexpr size_t kBlock = 2048;
    const uint32_t bits = level_bits_ + 1;
    const uint32_t level_mask = (1u << level_bits_) - 1u;
    codes_.resize(std::min(n, kBlock));
    for (size_t begin = 0; begin < n; begin += kBlock) {
      const size_t len = std::min(kBlock, n - begin);
      if (!UnpackCodes(encoded.data() + dithering::kHeaderBytes + begin * bits / 8, len, bits,
                       codes_.data())) {
        return FormatErrorStatus(name(), MakeFormatError(FormatErrorCode::kCodePaddingNotZero));
      }
      const uint32_t max_level = MaxCodeLevel(codes_.data(), len, level_mask);
      if (auto s = FormatErrorStatus(name(), dithering::CheckLevel(max_level, levels_)); !s.ok()) {
        return s;
      }
      if (natural_) {
        DitherDecodeNatural(codes_.data(), len, levels_, level_bits_, norm, output.data() + begin);
      } else {
        DitherDecodeLinear(codes_.data(), len, levels_, level_bits_, norm, output.data() + begin);
      }
    }
    return absl::OkStatus();
  }

 private:
  uint32_t levels_;
  bool natural_;
  bool l2_;
  uint32_t level_bits_;
  std::vector<uint16_t> codes_;
};

}  // namespace

void RegisterDitheringCodec(CodecRegistry& registry) {
  CodecSpec spec;
  spec.name = "dithering";
  spec.summary = "stochastic rounding of |x| / norm to k levels (BytePS dithering)";
  spec.params = {
      param_specs::IntParam("k", 15, "number of non-zero levels, in [1, 32767]; natural: [1, 127]",
                            1, 32767),
      param_specs::ChoiceParam("partition", "linear",
                               "level spacing: linear (j/k) or natural (2^(j-k))",
                               {"linear", "natural"}),
      param_specs::ChoiceParam("normalize", "max", "norm: max (max |x|) or l2", {"max", "l2"})};
  spec.factory = [](const CodecParams& params) -> absl::StatusOr<std::unique_ptr<Codec>> {
    ParamReader r(params);
    const int64_t k = r.Int("k");
    const std::string partition = r.String("partition");
    const std::string normalize = r.String("normalize");
    if (!r.ok()) return r.status();
    const bool natural = partition == "natural";
    if (auto s = dithering::CheckParams(k, natural); !s.ok()) return s;
    return std::unique_ptr<Codec>(
        new DitheringCodec(static_cast<uint32_t>(k), natural, normalize == "l2"));
  };
  spec.facts = {.gpu_kernel = true,
                .gpu_memories = {MemoryKind::kResidual},
                .encode_target = EncodeSpeedTarget::kElementwise};
  MustRegister(registry, std::move(spec));
}

}  // namespace bytecomp::compress
