// terngrad (Wen et al.): {-1, 0, +1} times a scale, drawn stochastically after clipping.
// Payload: format/terngrad_format.h, shared with the CUDA codec.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>
#include "exact_float_math.h"  // first: see there

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/terngrad_format.h"
#include "bytecomp/compress/params.h"
#include "bytecomp/compress/registry.h"
#include "codec_checks.h"
#include "param_specs.h"
#include "quant_codecs.h"
#include "quant_kernels.h"
#include "quant_pack.h"

namespace bytecomp::compress {
namespace {

// Four elements per output byte (PackTernary4's layout).
__attribute__((target_clones("avx2", "default"))) void TernEncode(const float* __restrict x,
                                                                  size_t n, float clip, float scale,
                                                                  CounterRandom random,
                                                                  uint8_t* __restrict out) {
  const uint32_t groups = static_cast<uint32_t>(n / 4);  // 32-bit counters: see qsgd
  for (uint32_t g = 0; g < groups; ++g) {
    const uint32_t i = 4 * g;
    out[g] = PackTernary4(TernaryCode(x[i], clip, scale, UniformFloat(random, i)),
                          TernaryCode(x[i + 1], clip, scale, UniformFloat(random, i + 1)),
                          TernaryCode(x[i + 2], clip, scale, UniformFloat(random, i + 2)),
                          TernaryCode(x[i + 3], clip, scale, UniformFloat(random, i + 3)));
  }
  if (n % 4 != 0) {
    uint32_t c[4] = {0, 0, 0, 0};
    for (size_t i = groups * 4; i < n; ++i) {
      c[i % 4] = TernaryCode(x[i], clip, scale, UniformFloat(random, static_cast<uint32_t>(i)));
    }
    out[groups] = PackTernary4(c[0], c[1], c[2], c[3]);
  }
}

// Whether any 2-bit code in the bytes is 3 (invalid).
__attribute__((target_clones("avx2", "default"))) bool HasTernaryCode3(const uint8_t* in,
                                                                       size_t bytes) {
  uint8_t any = 0;
  for (size_t i = 0; i < bytes; ++i) any |= in[i] & (in[i] >> 1) & 0x55u;  // terngrad::HasCode3
  return any != 0;
}

__attribute__((target_clones("avx2", "default"))) void TernDecode(const uint16_t* __restrict codes,
                                                                  size_t n, float scale,
                                                                  float* __restrict out) {
  for (size_t i = 0; i < n; ++i) out[i] = TernaryValue(codes[i], scale);
}

class TernGradCodec final : public Codec {
 public:
  absl::string_view name() const override { return "terngrad"; }
  CodecProperties properties() const override {
    CodecProperties p;
    p.unbiased = true;  // for the clipped input
    return p;
  }
  size_t MaxEncodedBytes(size_t n) const override { return terngrad::PayloadBytes(n); }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext& ctx,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    const size_t bytes = MaxEncodedBytes(n);
    if (auto s = codec_checks::CheckEncodeCall(*this, n, out.size()); !s.ok()) return s;
    const SquaresAndMax stats = SumOfSquaresAndMaxAbs(input.data(), n);
    if (!IsFiniteBits(stats.max_abs_bits)) {
      return NonFiniteError(input, codec_checks::InputWhat(name()));
    }
    const terngrad::ClipScale cs =
        terngrad::ClipAndScale(stats.sum_of_squares, n, stats.max_abs_bits);
    PutU32(out.data(), static_cast<uint32_t>(n));
    PutF32(out.data() + 4, cs.scale);
    TernEncode(input.data(), n, cs.clip, cs.scale, StreamOf(ctx), out.data() + 8);
    return bytes;
  }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                      absl::Span<float> output) override {
    const size_t n = output.size();
    auto scale = codec_checks::ReadHeaderValueAfterCount(*this, encoded, n, kScaleValue);
    if (!scale.ok()) return scale.status();
    const uint8_t* codes = encoded.data() + 8;
    if (HasTernaryCode3(codes, terngrad::CodeBytes(n))) {
      return FormatErrorStatus(name(), MakeFormatError(FormatErrorCode::kTernaryCode3));
    }
    if (!terngrad::PaddingIsZero(codes, n)) {
      return FormatErrorStatus(name(), MakeFormatError(FormatErrorCode::kCodePaddingNotZero));
    }
    codes_.resize(n);
    UnpackCodes(codes, n, 2, codes_.data());
    TernDecode(codes_.data(), n, *scale, output.data());
    return absl::OkStatus();
  }

 private:
  std::vector<uint16_t> codes_;
};

}  // namespace

void RegisterTernGradCodec(CodecRegistry& registry) {
  CodecSpec spec = ParameterlessSpec<TernGradCodec>(
      "terngrad", "{-1, 0, +1} times a scale, stochastic, after clipping at 2.5 sigma");
  spec.facts = {.gpu_kernel = true,
                .gpu_memories = {MemoryKind::kResidual},
                .encode_target = EncodeSpeedTarget::kElementwise};
  MustRegister(registry, std::move(spec));
}

}  // namespace bytecomp::compress
