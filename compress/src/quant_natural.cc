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
