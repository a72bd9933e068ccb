// inceptionn: error-bounded float compression after INCEPTIONN (Li et al., MICRO 2018). Each
// value keeps the narrowest form whose error is at most the error bound eb (elementwise.h):
// dropped, an int8 or int16 multiple of 2 eb, or the fp32 value. Payload:
// format/inceptionn_format.h, shared with the CUDA codec.
#include <cstring>
#include <memory>
#include <vector>
#include "exact_float_math.h"  // first: see there

#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/inceptionn_format.h"
#include "bytecomp/compress/params.h"
#include "codec_checks.h"
#include "param_specs.h"
#include "quant_codecs.h"
#include "simd_kernel.h"

namespace bytecomp::compress {
namespace {

BYTECOMP_SIMD_KERNEL(void, ComputeTags,
                     (const float* __restrict x, size_t n, float error_bound,
                      uint8_t* __restrict tags),
                     (x, n, error_bound, tags)) {
  for (size_t i = 0; i < n; ++i) tags[i] = static_cast<uint8_t>(InceptionnTag(x[i], error_bound));
}

class InceptionnCodec final : public Codec {
 public:
  explicit InceptionnCodec(float error_bound) : error_bound_(error_bound) {}
  absl::string_view name() const override { return "inceptionn"; }
  CodecProperties properties() const override { return {}; }
  size_t MaxEncodedBytes(size_t n) const override { return inceptionn::MaxPayloadBytes(n); }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext&,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    // The caller provides MaxEncodedBytes(n) (codec.h), whatever this input needs.
    if (auto s = codec_checks::CheckEncodeCall(*this, n, out.size()); !s.ok()) return s;
    if (auto s = CheckFinite(input, codec_checks::InputWhat(name())); !s.ok()) return s;
    tags_.resize(n);
    ComputeTags(input.data(), n, error_bound_, tags_.data());
    inceptionn::TagCounts totals;
    for (size_t i = 0; i < n; ++i) inceptionn::CountTag(tags_[i], &totals);
    PutU32(out.data(), static_cast<uint32_t>(n));
    uint8_t* tag_out = out.data() + 4;
    std::memset(tag_out, 0, inceptionn::TagBytes(n));
    inceptionn::Cursors at = inceptionn::CursorsAfter(n, totals, {});
    for (size_t i = 0; i < n; ++i) {
      const uint32_t tag = tags_[i];
      tag_out[i / 4] |= inceptionn::TagBits(tag, i);
      inceptionn::PutValue(input[i], tag, error_bound_, out.data(), &at);
    }
    return inceptionn::PayloadBytes(n, totals);
  }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                      absl::Span<float> output) override {
    const size_t n = output.size();
    const uint8_t* payload = encoded.data();
    FormatError e = inceptionn::CheckHeader(payload, encoded.size(), n);
    // (No offset from an empty payload's null data(): the header check refused it.)
    const uint8_t* tags = e.ok() ? payload + 4 : nullptr;
    if (e.ok()) e = inceptionn::CheckPadding(tags, n);
    inceptionn::TagCounts totals;
    for (size_t g = 0; e.ok() && g < inceptionn::TagBytes(n); ++g) {
      totals = totals + inceptionn::CountTagByte(tags[g], n, g);
    }
    if (e.ok()) e = CheckPayloadSize(encoded.size(), inceptionn::PayloadBytes(n, totals), n);
    inceptionn::Cursors at = inceptionn::CursorsAfter(n, totals, {});
    for (size_t i = 0; e.ok() && i < totals.fp32; ++i) {
      e = inceptionn::CheckFp32(GetF32(payload + at.fp32 + 4 * i), i);
    }
    if (!e.ok()) return FormatErrorStatus(name(), e);
    for (size_t i = 0; i < n; ++i) {
      output[i] = inceptionn::GetValue(inceptionn::TagOf(tags, i), error_bound_, payload, &at);
    }
    // A multiple that a real encode never writes can overflow with a huge error bound.
    if (!IsFiniteBits(MaxAbsBits(output.data(), n))) {
      return FormatErrorStatus(name(), MakeFormatError(FormatErrorCode::kMultipleOverflows));
    }
    return absl::OkStatus();
  }

 private:
  float error_bound_;
  std::vector<uint8_t> tags_;
};

}  // namespace

void RegisterInceptionnCodec(CodecRegistry& registry) {
  CodecSpec spec;
  spec.name = "inceptionn";
  spec.summary = "each value as 0, int8, int16 or fp32 within an absolute error bound";
  spec.params = {param_specs::DoubleParam(
      "error_bound", "0.0009765625", "largest absolute error (2^-10 by default), > 0", 0.0, true)};
  spec.factory = [](const CodecParams& params) -> absl::StatusOr<std::unique_ptr<Codec>> {
    ParamReader r(params);
    const double error_bound = r.Double("error_bound");
    if (!r.ok()) return r.status();
    if (auto s = inceptionn::CheckParams(error_bound); !s.ok()) return s;
    return std::unique_ptr<Codec>(new InceptionnCodec(static_cast<float>(error_bound)));
  };
  spec.facts = {.gpu_kernel = true, .gpu_memories = {MemoryKind::kResidual}};
  MustRegister(registry, std::move(spec));
}

}  // namespace bytecomp::compress
