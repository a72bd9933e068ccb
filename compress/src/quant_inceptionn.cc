// inceptionn: error-bounded float compression after INCEPTIONN (Li et al., MICRO 2018). Each
// value keeps the narrowest form whose error is at most the error bound eb (elementwise.h):
// tag 0 dropped (|x| <= eb), tag 1 an int8 multiple of 2 eb, tag 2 an int16 multiple of 2 eb,
// tag 3 the fp32 value.
//
// Wire format (little-endian): u32 n, ceil(n/4) bytes of 2-bit tags (element i in bits
// 2(i%4)..2(i%4)+1 of byte i/4, padding bits 0), then the int8 values of the tag-1 elements,
// the int16 values of the tag-2 elements and the f32 values of the tag-3 elements, each in
// element order. Size: 4 + ceil(n/4) + c1 + 2 c2 + 4 c3 (c_t: elements with tag t); at most
// 4 + ceil(n/4) + 4n.
#include <cstring>
#include <memory>
#include <vector>
#include "exact_float_math.h"  // first: see there

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/elementwise.h"
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
  size_t MaxEncodedBytes(size_t n) const override { return 4 + TagBytes(n) + 4 * n; }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext&,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    // The caller provides MaxEncodedBytes(n) (codec.h), whatever this input needs.
    if (auto s = codec_checks::CheckEncodeCall(*this, n, out.size()); !s.ok()) return s;
    if (auto s = CheckFinite(input, codec_checks::InputWhat(name())); !s.ok()) return s;
    tags_.resize(n);
    ComputeTags(input.data(), n, error_bound_, tags_.data());
    size_t counts[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < n; ++i) ++counts[tags_[i]];
    const size_t bytes = 4 + TagBytes(n) + counts[1] + 2 * counts[2] + 4 * counts[3];
    PutU32(out.data(), static_cast<uint32_t>(n));
    uint8_t* tag_out = out.data() + 4;
    std::memset(tag_out, 0, TagBytes(n));
    uint8_t* p8 = tag_out + TagBytes(n);
    uint8_t* p16 = p8 + counts[1];
    uint8_t* p32 = p16 + 2 * counts[2];
    for (size_t i = 0; i < n; ++i) {
      const uint32_t tag = tags_[i];
      tag_out[i / 4] |= static_cast<uint8_t>(tag << (2 * (i % 4)));
      if (tag == 1) {
        *p8++ = static_cast<uint8_t>(static_cast<int8_t>(InceptionnSteps(input[i], error_bound_)));
      } else if (tag == 2) {
        const int16_t v = static_cast<int16_t>(InceptionnSteps(input[i], error_bound_));
        std::memcpy(p16, &v, 2);
        p16 += 2;
      } else if (tag == 3) {
        PutF32(p32, input[i]);
        p32 += 4;
      }
    }
    return bytes;
  }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                      absl::Span<float> output) override {
    const size_t n = output.size();
    if (auto s = codec_checks::PayloadAtLeast(name(), encoded.size(), 4 + TagBytes(n), n);
        !s.ok()) {
      return s;
    }
    if (auto s = FormatErrorStatus(name(), CheckElementCount(GetU32(encoded.data()), n)); !s.ok()) {
      return s;
    }
    const uint8_t* tags = encoded.data() + 4;
    if (n % 4 != 0 && (tags[TagBytes(n) - 1] >> (2 * (n % 4))) != 0) {
      return MalformedError(name(), "padding bits after the last tag are not zero");
    }
    size_t counts[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < n; ++i) ++counts[(tags[i / 4] >> (2 * (i % 4))) & 3u];
    const size_t expected = 4 + TagBytes(n) + counts[1] + 2 * counts[2] + 4 * counts[3];
    if (auto s = codec_checks::PayloadSizeIs(name(), encoded.size(), expected, n); !s.ok()) {
      return s;
    }
    const uint8_t* p8 = tags + TagBytes(n);
    const uint8_t* p16 = p8 + counts[1];
    const uint8_t* p32 = p16 + 2 * counts[2];
    for (size_t i = 0; i < counts[3]; ++i) {
      if (!IsFiniteFloat(GetF32(p32 + 4 * i))) {
        return MalformedError(name(), absl::StrCat("fp32 value ", i, " is not finite"));
      }
    }
    for (size_t i = 0; i < n; ++i) {
      const uint32_t tag = (tags[i / 4] >> (2 * (i % 4))) & 3u;
      float v = 0.0f;
      if (tag == 1) {
        v = InceptionnStepsValue(static_cast<int8_t>(*p8++), error_bound_);
      } else if (tag == 2) {
        int16_t steps;
        std::memcpy(&steps, p16, 2);
        p16 += 2;
        v = InceptionnStepsValue(steps, error_bound_);
      } else if (tag == 3) {
        v = GetF32(p32);
        p32 += 4;
      }
      output[i] = v;
    }
    // A multiple that a real encode never writes can overflow with a huge error bound.
    if (!IsFiniteBits(MaxAbsBits(output.data(), n))) {
      return MalformedError(name(), "a stored multiple overflows the float range");
    }
    return absl::OkStatus();
  }

 private:
  static size_t TagBytes(size_t n) { return (n + 3) / 4; }

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
    if (!(error_bound >= 1e-37 && error_bound <= 1e37)) {
      return absl::InvalidArgumentError(absl::StrCat("codec 'inceptionn': error_bound ",
                                                     error_bound, " is outside [1e-37, 1e37]"));
    }
    return std::unique_ptr<Codec>(new InceptionnCodec(static_cast<float>(error_bound)));
  };
  MustRegister(registry, std::move(spec));
}

}  // namespace bytecomp::compress
