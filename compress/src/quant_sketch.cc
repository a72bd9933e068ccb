// sketch: quantile bucketing. The encoder estimates q quantiles of the input from a sample,
// sends each element's bucket id and the mean of each bucket; the decoder maps ids to means.
// Payload: format/sketch_format.h, shared with the CUDA codec. Encoding costs O(n log q) and a
// sort of the sample (at most 8192 elements).
#include <algorithm>
#include <memory>
#include <vector>
#include "exact_float_math.h"  // first: see there

#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/sketch_format.h"
#include "bytecomp/compress/params.h"
#include "codec_checks.h"
#include "param_specs.h"
#include "quant_codecs.h"
#include "quant_pack.h"

namespace bytecomp::compress {
namespace {

class SketchCodec final : public Codec {
 public:
  explicit SketchCodec(uint32_t quantiles)
      : quantiles_(quantiles), id_bits_(sketch::IdBits(quantiles)) {}
  absl::string_view name() const override { return "sketch"; }
  CodecProperties properties() const override { return {}; }
  size_t MaxEncodedBytes(size_t n) const override { return sketch::PayloadBytes(n, quantiles_); }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext&,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    const size_t bytes = MaxEncodedBytes(n);
    if (auto s = codec_checks::CheckEncodeCall(*this, n, out.size()); !s.ok()) return s;
    if (auto s = CheckFinite(input, codec_checks::InputWhat(name())); !s.ok()) return s;
    // Boundaries from a sorted sample, as a search table.
    const size_t m = sketch::SampleSize(n);
    sample_.resize(m);
    for (size_t i = 0; i < m; ++i) sample_[i] = input[sketch::SampleIndex(i, n, m)];
    std::sort(sample_.begin(), sample_.end());
    const size_t padded = sketch::SearchSize(quantiles_);
    search_.resize(padded);
    for (size_t slot = 0; slot < padded; ++slot) {
      search_[slot] = sketch::SearchEntry(sample_.data(), m, quantiles_, slot);
    }
    // Ids and per-bucket sums.
    ids_.resize(n);
    sums_.assign(quantiles_, 0.0);
    counts_.assign(quantiles_, 0);
    const float* table = search_.data();
    for (size_t i = 0; i < n; ++i) {
      const float x = input[i];
      const uint32_t id = sketch::BucketId(x, table, padded);
      ids_[i] = static_cast<uint16_t>(id);
      sums_[id] += x;
      ++counts_[id];
    }
    PutU32(out.data(), static_cast<uint32_t>(n));
    for (size_t b = 0; b < quantiles_; ++b) {
      PutF32(out.data() + 4 + 4 * b, sketch::BucketMean(sums_[b], counts_[b]));
    }
    PackCodes(ids_.data(), n, id_bits_, out.data() + sketch::IdsStart(quantiles_));
    return bytes;
  }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                      absl::Span<float> output) override {
    const size_t n = output.size();
    if (auto s = codec_checks::CheckSizeAndCount(*this, encoded, n); !s.ok()) return s;
    means_.resize(quantiles_);
    for (size_t b = 0; b < quantiles_; ++b) {
      means_[b] = GetF32(encoded.data() + 4 + 4 * b);
      const FormatError e = sketch::CheckMean(means_[b], b);
      if (!e.ok()) return FormatErrorStatus(name(), e);
    }
    ids_.resize(n);
    if (!UnpackCodes(encoded.data() + sketch::IdsStart(quantiles_), n, id_bits_, ids_.data())) {
      return FormatErrorStatus(name(), MakeFormatError(FormatErrorCode::kIdPaddingNotZero));
    }
    for (size_t i = 0; i < n; ++i) {
      if (!sketch::IdValid(ids_[i], quantiles_)) {
        return FormatErrorStatus(name(), sketch::CheckId(ids_[i], i, quantiles_));
      }
    }
    for (size_t i = 0; i < n; ++i) output[i] = means_[ids_[i]];
    return absl::OkStatus();
  }

 private:
  uint32_t quantiles_;
  uint32_t id_bits_;
  std::vector<float> sample_;
  std::vector<float> search_;
  std::vector<uint16_t> ids_;
  std::vector<double> sums_;
  std::vector<size_t> counts_;
  std::vector<float> means_;
};

}  // namespace

void RegisterSketchCodec(CodecRegistry& registry) {
  CodecSpec spec;
  spec.name = "sketch";
  spec.summary = "quantile bucket id per element and the bucket means";
  spec.params = {
      param_specs::IntParam("quantiles", 64, "number of buckets, in [2, 65536]", 2, 65536)};
  spec.factory = [](const CodecParams& params) -> absl::StatusOr<std::unique_ptr<Codec>> {
    ParamReader r(params);
    const int64_t quantiles = r.Int("quantiles");
    if (!r.ok()) return r.status();
    return std::unique_ptr<Codec>(new SketchCodec(static_cast<uint32_t>(quantiles)));
  };
  spec.facts = {.gpu_kernel = true, .gpu_memories = {MemoryKind::kResidual}};
  MustRegister(registry, std::move(spec));
}

}  // namespace bytecomp::compress
