// sketch: quantile bucketing. The encoder estimates q quantiles of the input, sends each
// element's bucket id and the mean of each bucket; the decoder maps ids to means.
//
// Wire format (little-endian): u32 n, q f32 bucket means (bucket b: the elements with
// boundary[b-1] <= x < boundary[b]; 0 for an empty bucket), then n bucket ids of
// b = ceil(log2 q) bits (LSB-first stream, padding bits 0). Size: 4 + 4q + ceil(n*b/8);
// with q = 64: 4 + 256 + ceil(6n/8).
// Boundaries: the j/q quantiles (j = 1..q-1) of a deterministic sample of min(n, 8192)
// elements at evenly spaced indices, so encoding costs O(n log q) and a sort of the sample.
// Decoding preserves each bucket's sum (hence the tensor's sum) and the order of elements.
#include <algorithm>
#include <limits>
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
#include "quant_pack.h"

namespace bytecomp::compress {
namespace {

constexpr size_t kMaxSample = 8192;

class SketchCodec final : public Codec {
 public:
  explicit SketchCodec(uint32_t quantiles)
      : quantiles_(quantiles), id_bits_(BitsFor(quantiles - 1)) {}
  absl::string_view name() const override { return "sketch"; }
  CodecProperties properties() const override { return {}; }
  size_t MaxEncodedBytes(size_t n) const override {
    return 4 + 4 * size_t{quantiles_} + PackedBytes(n, static_cast<int>(id_bits_));
  }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext&,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    const size_t bytes = MaxEncodedBytes(n);
    if (auto s = codec_checks::CheckEncodeCall(*this, n, out.size()); !s.ok()) return s;
    if (auto s = CheckFinite(input, codec_checks::InputWhat(name())); !s.ok()) return s;
    // Boundaries from a sorted sample.
    const size_t m = std::min(n, kMaxSample);
    sample_.resize(m);
    for (size_t i = 0; i < m; ++i) sample_[i] = input[i * n / m];
    std::sort(sample_.begin(), sample_.end());
    boundaries_.resize(quantiles_ - 1);
    for (size_t j = 1; j < quantiles_; ++j) {
      boundaries_[j - 1] = m == 0 ? 0.0f : sample_[std::min(m - 1, j * m / quantiles_)];
    }
    // Ids and per-bucket sums.
    // Branch-free search: the boundaries padded with +inf to a power of two, then one
    // comparison per halving step (id = the number of boundaries <= x, as upper_bound).
    size_t padded = 1;
    while (padded < boundaries_.size() + 1) padded *= 2;
    search_.assign(padded, std::numeric_limits<float>::infinity());
    std::copy(boundaries_.begin(), boundaries_.end(), search_.begin());
    ids_.resize(n);
    sums_.assign(quantiles_, 0.0);
    counts_.assign(quantiles_, 0);
    const float* table = search_.data();
    for (size_t i = 0; i < n; ++i) {
      const float x = input[i];
      uint32_t id = 0;
      for (uint32_t step = static_cast<uint32_t>(padded / 2); step > 0; step /= 2) {
        // A mask, not a select: GCC turns the select into a branch, mispredicted half the time.
        id += step & (0u - static_cast<uint32_t>(x >= table[id + step - 1]));
      }
      ids_[i] = static_cast<uint16_t>(id);
      sums_[id] += x;
      ++counts_[id];
    }
    PutU32(out.data(), static_cast<uint32_t>(n));
    for (size_t b = 0; b < quantiles_; ++b) {
      const float mean = counts_[b] == 0 ? 0.0f : static_cast<float>(sums_[b] / counts_[b]);
      PutF32(out.data() + 4 + 4 * b, mean);
    }
    PackCodes(ids_.data(), n, id_bits_, out.data() + 4 + 4 * size_t{quantiles_});
    return bytes;
  }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                      absl::Span<float> output) override {
    const size_t n = output.size();
    if (auto s = codec_checks::CheckSizeAndCount(*this, encoded, n); !s.ok()) return s;
    means_.resize(quantiles_);
    for (size_t b = 0; b < quantiles_; ++b) {
      means_[b] = GetF32(encoded.data() + 4 + 4 * b);
      if (!IsFiniteFloat(means_[b])) {
        return MalformedError(name(), absl::StrCat("mean ", b, " is not finite"));
      }
    }
    ids_.resize(n);
    if (!UnpackCodes(encoded.data() + 4 + 4 * size_t{quantiles_}, n, id_bits_, ids_.data())) {
      return MalformedError(name(), "padding bits after the last id are not zero");
    }
    for (size_t i = 0; i < n; ++i) {
      if (ids_[i] >= quantiles_) {
        return MalformedError(name(), absl::StrCat("bucket id ", ids_[i], " at element ", i,
                                                   " (quantiles ", quantiles_, ")"));
      }
    }
    for (size_t i = 0; i < n; ++i) output[i] = means_[ids_[i]];
    return absl::OkStatus();
  }

 private:
  uint32_t quantiles_;
  uint32_t id_bits_;
  std::vector<float> sample_;
  std::vector<float> boundaries_;
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
  MustRegister(registry, std::move(spec));
}

}  // namespace bytecomp::compress
