// randomk: k = KeptCount(ratio, n) values at indices every worker derives from (seed, key,
// round), so the value arrays add element-wise (summable_encoded). Payload and indices:
// format/randomk_format.h, shared with the CUDA codec.
#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/format/randomk_format.h"
#include "bytecomp/compress/format/sparse_format.h"
#include "codec_checks.h"
#include "sparse_codecs.h"

namespace bytecomp::compress {
namespace {

class RandomkCodec final : public Codec {
 public:
  RandomkCodec(double ratio, bool scale) : ratio_(ratio), scale_(scale) {}
  absl::string_view name() const override { return "randomk"; }
  CodecProperties properties() const override {
    CodecProperties p;
    p.summable_encoded = true;
    p.sparse = true;
    p.unbiased = scale_;
    return p;
  }
  size_t MaxEncodedBytes(size_t n) const override {
    return randomk::PayloadBytes(sparse::KeptCount(ratio_, n));
  }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext& ctx,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    if (auto s = codec_checks::CheckEncodeCall(*this, n, out.size()); !s.ok()) return s;
    const size_t k = sparse::KeptCount(ratio_, n);
    randomk::WriteHeader(out.data(), static_cast<uint32_t>(n), static_cast<uint32_t>(k));
    uint8_t* values = out.data() + randomk::kHeaderBytes;
    const float* x = input.data();
    // The finite check runs block by block just ahead of the gather, so the input is read from
    // memory once (the gather then hits the cache).
    constexpr size_t kBlock = 4096;
    uint32_t max_bits = 0, scaled_bits = 0;
    size_t checked = 0;
    auto check_through = [&](size_t end) {
      while (checked < end) {
        const size_t len = std::min(kBlock, n - checked);
        max_bits = std::max(max_bits, MaxAbsBits(x + checked, len));
        checked += len;
      }
    };
    if (scale_) {
      randomk::ForEachRandomIndex(n, k, SharedSeed(ctx, randomk::kRandomkSalt),
                                  [&](size_t j, size_t i, size_t start, uint32_t size) {
                                    if (start + size > checked) check_through(start + size);
                                    const float v = x[i] * static_cast<float>(size);
                                    scaled_bits = std::max(scaled_bits, AbsBits(v));
                                    PutF32(values + 4 * j, v);
                                  });
    } else {
      randomk::ForEachRandomIndex(n, k, SharedSeed(ctx, randomk::kRandomkSalt),
                                  [&](size_t j, size_t i, size_t start, uint32_t size) {
                                    if (start + size > checked) check_through(start + size);
                                    PutF32(values + 4 * j, x[i]);
                                  });
    }
    check_through(n);
    if (!IsFiniteBits(max_bits)) return NonFiniteError(input, "codec 'randomk' input");
    if (!IsFiniteBits(scaled_bits)) {
      return absl::InvalidArgumentError(
          "codec 'randomk': a value times its scale n/k overflows fp32 (|x| near 3.4e38)");
    }
    return randomk::PayloadBytes(k);
  }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext& ctx,
                      absl::Span<float> output) override {
    if (auto s = Validate(encoded, output.size()); !s.ok()) return s;
    const uint8_t* values = encoded.data() + randomk::kHeaderBytes;
    Scatter(ctx, output, [values](size_t j) { return GetF32(values + 4 * j); });
    return absl::OkStatus();
  }

  absl::Status DecodeAdd(absl::Span<const uint8_t> encoded, const CodecContext& ctx,
                         absl::Span<float> accumulator) override {
    if (auto s = Validate(encoded, accumulator.size()); !s.ok()) return s;
    const uint8_t* values = encoded.data() + randomk::kHeaderBytes;
    randomk::ForEachRandomIndex(
        accumulator.size(), sparse::KeptCount(ratio_, accumulator.size()),
        SharedSeed(ctx, randomk::kRandomkSalt),
        [&](size_t j, size_t i, size_t, uint32_t) { accumulator[i] += GetF32(values + 4 * j); });
    return absl::OkStatus();
  }

  size_t SummedLength(size_t n, const CodecContext&) const override {
    return sparse::KeptCount(ratio_, n);
  }

  absl::Status AddEncodedValues(absl::Span<const uint8_t> encoded, const CodecContext&, size_t n,
                                absl::Span<float> sum) override {
    if (auto s = Validate(encoded, n); !s.ok()) return s;
    const size_t k = sparse::KeptCount(ratio_, n);
    if (sum.size() != k) {
      return absl::InvalidArgumentError(
          absl::StrCat("codec 'randomk': sum has ", sum.size(), " values, expected ", k));
    }
    const uint8_t* values = encoded.data() + randomk::kHeaderBytes;
    for (size_t j = 0; j < k; ++j) sum[j] += GetF32(values + 4 * j);
    return absl::OkStatus();
  }

  absl::Status ExpandSum(absl::Span<const float> sum, const CodecContext& ctx,
                         absl::Span<float> output) override {
    const size_t n = output.size(), k = sparse::KeptCount(ratio_, n);
    if (sum.size() != k) {
      return absl::InvalidArgumentError(
          absl::StrCat("codec 'randomk': sum has ", sum.size(), " values, expected ", k));
    }
    Scatter(ctx, output, [&sum](size_t j) { return sum[j]; });
    return absl::OkStatus();
  }

 private:
  // output = value(j) at the j-th shared index, zeros elsewhere. Zeroing runs a block ahead of
  // the scatter (every pick lies below its stratum's end), so the output is written in one
  // sweep that stays in the cache.
  template <typename Value>
  void Scatter(const CodecContext& ctx, absl::Span<float> output, Value value) {
    const size_t n = output.size();
    float* o = output.data();
    constexpr size_t kBlock = 4096;
    size_t zeroed = 0;
    randomk::ForEachRandomIndex(n, sparse::KeptCount(ratio_, n),
                                SharedSeed(ctx, randomk::kRandomkSalt),
                                [&](size_t j, size_t i, size_t start, uint32_t size) {
                                  while (zeroed < start + size) {
                                    const size_t len = std::min(kBlock, n - zeroed);
                                    std::memset(o + zeroed, 0, 4 * len);
                                    zeroed += len;
                                  }
                                  o[i] = value(j);
                                });
    if (zeroed < n) std::memset(o + zeroed, 0, 4 * (n - zeroed));
  }

  absl::Status Validate(absl::Span<const uint8_t> encoded, size_t n) {
    const size_t k = sparse::KeptCount(ratio_, n);
    FormatError e = randomk::CheckHeader(encoded.data(), encoded.size(), n, k);
    if (e.ok() && !sparse::ValuesFinite(encoded.data() + randomk::kHeaderBytes, k)) {
      e = MakeFormatError(FormatErrorCode::kValuesNotFinite);
    }
    return FormatErrorStatus(name(), e);
  }

  double ratio_;
  bool scale_;
};

}  // namespace

void RegisterRandomkCodec(CodecRegistry& registry) {
  MustRegister(
      registry,
      {.name = "randomk",
       .summary =
           "k = ceil(ratio * n) values at indices every worker derives from (seed, key, round)",
       .params = {param_specs::RatioParam(),
                  {.name = "scale",
                   .type = CodecParamSpec::Type::kBool,
                   .default_value = "false",
                   .help =
                       "multiply values by n/k (the stratum size), which makes randomk unbiased"}},
       .factory = [](const CodecParams& params) -> absl::StatusOr<std::unique_ptr<Codec>> {
         ParamReader r(params);
         const double ratio = r.Double("ratio");
         const bool scale = r.Bool("scale");
         if (!r.ok()) return r.status();
         return std::make_unique<RandomkCodec>(ratio, scale);
       },
       // Random selection loses accuracy even with error feedback (1%: 1.4 points in one of
       // our runs, with a residual).
       .facts = {.loss = CodecLoss::kHigh,
                 .sparse = true,
                 .summable_encoded = true,
                 .gpu_kernel = true,
                 .gpu_memories = {MemoryKind::kResidual},
                 .encode_target = EncodeSpeedTarget::kElementwise}});
}

}  // namespace bytecomp::compress
