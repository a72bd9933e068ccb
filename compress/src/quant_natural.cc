// natural compression (Horvath et al.): stochastic rounding of |x| to a power of two; sign and
// exponent in a byte. Payload: format/natural_format.h, shared with the CUDA codec.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>
#include "exact_float_math.h"  // first: see there

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/natural_format.h"
#include "bytecomp/compress/params.h"
#include "bytecomp/compress/registry.h"
#include "codec_checks.h"
#include "param_specs.h"
#include "quant_codecs.h"
#include "quant_kernels.h"
#include "simd_kernel.h"

namespace bytecomp::compress {
namespace {

BYTECOMP_SIMD_KERNEL(void, NaturalEncode,
                     (const float* __restrict x, size_t n, uint32_t exponent_low,
                      CounterRandom random, uint8_t* __restrict out),
                     (x, n, exponent_low, random, out)) {
  const uint32_t count = static_cast<uint32_t>(n);  // 32-bit counters: see qsgd
  for (uint32_t i = 0; i < count; ++i) {
    out[i] = NaturalCode(x[i], exponent_low, RandomBits(random, i));
  }
}

// NaturalEncode with AVX-512 by hand, 16 elements a step, for elements first..first+n-1 of the
// partition: the random bits advanced by an addition (RandomBits16), and the branch below the
// smallest power (rare: only magnitudes 2^126 below the largest, zeros and subnormals) computed
// only for the steps that have such an element. The same IEEE operations as NaturalCode, so the
// same bytes.
[[gnu::target("arch=x86-64-v4")]] void NaturalEncodeAvx512Steps(const float* __restrict x, size_t n,
                                                                uint32_t first,
                                                                uint32_t exponent_low,
                                                                CounterRandom random,
                                                                uint8_t* __restrict out) {
  RandomBits16 bits16(random, first);
  const __m512i low = _mm512_set1_epi32(static_cast<int>(exponent_low));
  const __m512i above_offset = _mm512_set1_epi32(static_cast<int>(1u - exponent_low));
  const __m512i top_exponent = _mm512_set1_epi32(254);
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i sign_bit = _mm512_set1_epi32(0x80);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512 inverse_smallest =
      _mm512_set1_ps(BitsToFloat(exponent_low < 254u ? (254u - exponent_low) << 23 : 0x00400000u));
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    PrefetchLineAhead(x + i);
    const __m512i random_bits = bits16.Next();
    const __m512i v = _mm512_castps_si512(_mm512_loadu_ps(x + i));
    const __m512i abs_bits = _mm512_and_si512(v, abs_mask);
    const __m512i exponent = _mm512_srli_epi32(abs_bits, 23);
    // (random >> 9) < mantissa <=> random < mantissa << 9 (unsigned; v << 9 drops the rest).
    const __mmask16 up = _mm512_cmplt_epu32_mask(random_bits, _mm512_slli_epi32(v, 9));
    const __m512i e =
        _mm512_min_epu32(_mm512_mask_add_epi32(exponent, up, exponent, one), top_exponent);
    __m512i code = _mm512_add_epi32(e, above_offset);  // >= 1 where exponent >= low
    const __mmask16 above = _mm512_cmpge_epu32_mask(exponent, low);
    if (above != 0xffff) {
      const __m512 probability = _mm512_mul_ps(_mm512_castsi512_ps(abs_bits), inverse_smallest);
      const __mmask16 below_up =
          _mm512_cmp_ps_mask(UniformFromBits16(random_bits), probability, _CMP_LT_OQ);
      code = _mm512_mask_mov_epi32(_mm512_maskz_mov_epi32(below_up, one), above, code);
    }
    const __mmask16 negative = _mm512_test_epi32_mask(code, code) & _mm512_movepi32_mask(v);
    code = _mm512_mask_or_epi32(code, negative, code, sign_bit);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm512_cvtepi32_epi8(code));
  }
  for (; i < n; ++i) {
    out[i] = NaturalCode(x[i], exponent_low, RandomBits(random, first + static_cast<uint32_t>(i)));
  }
}

// Largest 7-bit code, and whether a "negative zero" byte (0x80, never written) is present.
BYTECOMP_SIMD_KERNEL(uint32_t, NaturalMaxCode, (const uint8_t* in, size_t n, bool* negative_zero),
                     (in, n, negative_zero)) {
  uint8_t m = 0;
  uint8_t nz = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t c = in[i] & 0x7fu;
    m = c > m ? c : m;
    nz |= in[i] == 0x80u ? 1u : 0u;
  }
  *negative_zero = nz != 0;
  return m;
}

BYTECOMP_SIMD_KERNEL(void, NaturalDecode,
                     (const uint8_t* __restrict in, size_t n, uint32_t exponent_low,
                      float* __restrict out),
                     (in, n, exponent_low, out)) {
  for (size_t i = 0; i < n; ++i) out[i] = NaturalValue(in[i], exponent_low);
}

class NaturalCodec final : public Codec {
 public:
  absl::string_view name() const override { return "natural"; }
  CodecProperties properties() const override {
    CodecProperties p;
    p.unbiased = true;
    return p;
  }
  size_t MaxEncodedBytes(size_t n) const override { return natural::PayloadBytes(n); }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext& ctx,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    if (CpuSimdLevel() == SimdLevel::kAvx512) return EncodeOnePass(input, ctx, out);
    uint32_t max_bits = 0;
    if (auto s = codec_checks::CheckEncodeCallAndFinite(*this, input, out.size(), &max_bits);
        !s.ok()) {
      return s;
    }
    const uint32_t exponent_low = NaturalExponentLow(max_bits >> 23);
    out[0] = static_cast<uint8_t>(exponent_low);
    NaturalEncode(input.data(), n, exponent_low, StreamOf(ctx), out.data() + 1);
    return MaxEncodedBytes(n);
  }

  // With AVX-512: one pass over the input in L1-sized chunks, each coded with the exponent base
  // of the largest |x| so far (the chunk's maximum read first, from memory; its codes then from
  // L1). The base only grows; the chunks coded before it reached its final value are coded
  // again at the end (typically a few: a tensor's largest exponent shows up early). The bytes
  // are those of the two-pass encoder.
  absl::StatusOr<size_t> EncodeOnePass(absl::Span<const float> input, const CodecContext& ctx,
                                       absl::Span<uint8_t> out) {
    const size_t n = input.size();
    if (auto s = codec_checks::CheckEncodeCall(*this, n, out.size()); !s.ok()) return s;
    constexpr size_t kChunk = 4096;
    const float* const x = input.data();
    uint8_t* const codes = out.data() + 1;
    const CounterRandom random = StreamOf(ctx);
    uint32_t max_bits = 0;
    uint32_t exponent_low = NaturalExponentLow(0);
    size_t final_from = 0;  // the first chunk coded with the current base
    for (size_t begin = 0; begin < n; begin += kChunk) {
      const size_t len = std::min(kChunk, n - begin);
      max_bits = std::max(max_bits, MaxAbsBits(x + begin, len));
      if (!IsFiniteBits(max_bits)) return NonFiniteError(input, codec_checks::InputWhat(name()));
      const uint32_t low = NaturalExponentLow(max_bits >> 23);
      if (low != exponent_low) {
        exponent_low = low;
        final_from = begin;
      }
      NaturalEncodeAvx512Steps(x + begin, len, static_cast<uint32_t>(begin), exponent_low, random,
                               codes + begin);
    }
    NaturalEncodeAvx512Steps(x, final_from, 0, exponent_low, random, codes);
    out[0] = static_cast<uint8_t>(exponent_low);
    return MaxEncodedBytes(n);
  }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                      absl::Span<float> output) override {
    const size_t n = output.size();
    FormatError e = CheckPayloadSize(encoded.size(), MaxEncodedBytes(n), n);
    const uint32_t exponent_low = e.ok() ? encoded[0] : 0;
    if (e.ok()) e = natural::CheckExponentLow(exponent_low);
    if (!e.ok()) return FormatErrorStatus(name(), e);
    // Blocks whose codes are checked and decoded while in L1: one pass over the payload. On a
    // bad code the whole payload's check says what is wrong, as one pass would.
    constexpr size_t kBlock = 4096;
    const uint8_t* const codes = encoded.data() + 1;
    for (size_t begin = 0; begin < n; begin += kBlock) {
      const size_t len = std::min(kBlock, n - begin);
      bool negative_zero = false;
      const uint32_t max_code = NaturalMaxCode(codes + begin, len, &negative_zero);
      if (!natural::CheckCodes(max_code, negative_zero, exponent_low).ok()) {
        const uint32_t all_max = NaturalMaxCode(codes, n, &negative_zero);
        return FormatErrorStatus(name(), natural::CheckCodes(all_max, negative_zero, exponent_low));
      }
      NaturalDecode(codes + begin, len, exponent_low, output.data() + begin);
    }
    return absl::OkStatus();
  }
};

}  // namespace

void RegisterNaturalCodec(CodecRegistry& registry) {
  CodecSpec spec = ParameterlessSpec<NaturalCodec>(
      "natural", "stochastic rounding to a power of two: sign and exponent in a byte");
  spec.facts = {.gpu_kernel = true,
                .gpu_memories = {MemoryKind::kResidual},
                .encode_target = EncodeSpeedTarget::kElementwise};
  MustRegister(registry, std::move(spec));
}

}  // namespace bytecomp::compress
