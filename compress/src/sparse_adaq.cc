// adaq (AdaComp style): per sign, a threshold from a sample; the message carries the indices
// of the kept positive and negative elements and one mean per sign (format/adaq_format.h, whose
// steps the CUDA codec takes too).
#include <cstring>
#include <memory>
#include <vector>

#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/format/adaq_format.h"
#include "bytecomp/compress/format/dgc_threshold.h"
#include "bytecomp/compress/format/sparse_format.h"
#include "codec_checks.h"
#include "index_section.h"
#include "sparse_codecs.h"

namespace bytecomp::compress {
namespace {

// AdaComp style: per sign, a threshold from a sample (the ratio-th top fraction of the sampled
// positive values, and of the negative ones); the message carries the indices of the kept
// positive and negative elements and one mean per sign.
class AdaqCodec final : public Codec {
 public:
  explicit AdaqCodec(double ratio) : ratio_(ratio) {}
  absl::string_view name() const override { return "adaq"; }
  CodecProperties properties() const override {
    CodecProperties p;
    p.sparse = true;
    return p;
  }
  size_t MaxEncodedBytes(size_t n) const override { return adaq::kHeaderBytes + 4 * n; }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext& ctx,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    if (auto s = codec_checks::CheckEncodeCall(*this, n, out.size()); !s.ok()) return s;
    if (auto s = CheckFinite(input, "codec 'adaq' input"); !s.ok()) return s;
    const float* x = input.data();
    // Thresholds per sign, as bit patterns of the magnitude (adaq::kKeepNone keeps nothing).
    uint32_t pos_t = adaq::kKeepNone, neg_t = adaq::kKeepNone;
    if (n > 0) {
      SampleSigned(x, n, NodeSeed(ctx, adaq::kAdaqSalt));
      pos_t = adaq::SignThreshold(pos_sample_, ratio_);
      neg_t = adaq::SignThreshold(neg_sample_, ratio_);
    }
    // Compared on the raw bit pattern (an empty range for kKeepNone returns at once).
    pos_.resize(n + kCompactSlack);
    neg_.resize(n + kCompactSlack);
    const adaq::BitRange pos_range = adaq::PositiveRange(pos_t);
    const adaq::BitRange neg_range = adaq::NegativeRange(neg_t);
    const size_t kp = CompactRange<false>(x, n, pos_range.lo, pos_range.hi, nullptr, pos_.data());
    const size_t kn = CompactRange<false>(x, n, neg_range.lo, neg_range.hi, nullptr, neg_.data());
    adaq::Header h;
    h.n = static_cast<uint32_t>(n);
    h.k_pos = static_cast<uint32_t>(kp);
    h.k_neg = static_cast<uint32_t>(kn);
    h.mean_pos = adaq::Mean(SumAt(x, pos_.data(), kp), kp);
    h.mean_neg = adaq::Mean(SumAt(x, neg_.data(), kn), kn);
    h.pos = sparse::PlanIndices(pos_.data(), kp);
    h.neg = sparse::PlanIndices(neg_.data(), kn);
    uint8_t* p = out.data();
    adaq::WriteHeader(p, h);
    size_t size = adaq::kHeaderBytes;
    size += sparse::WriteIndices(pos_.data(), kp, h.pos, p + size);
    size += sparse::WriteIndices(neg_.data(), kn, h.neg, p + size);
    return size;
  }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                      absl::Span<float> output) override {
    float mean_p, mean_n;
    if (auto s = Parse(encoded, output.size(), &mean_p, &mean_n); !s.ok()) return s;
    std::fill(output.begin(), output.end(), 0.0f);
    for (uint32_t i : pos_) output[i] = mean_p;
    for (uint32_t i : neg_) output[i] = mean_n;
    return absl::OkStatus();
  }

  absl::Status DecodeAdd(absl::Span<const uint8_t> encoded, const CodecContext&,
                         absl::Span<float> accumulator) override {
    float mean_p, mean_n;
    if (auto s = Parse(encoded, accumulator.size(), &mean_p, &mean_n); !s.ok()) return s;
    for (uint32_t i : pos_) accumulator[i] += mean_p;
    for (uint32_t i : neg_) accumulator[i] += mean_n;
    return absl::OkStatus();
  }

 private:
  // Sum of x at the indices, in double with four accumulators (no long dependency chain).
  static double SumAt(const float* x, const uint32_t* idx, size_t k) {
    double s[4] = {0, 0, 0, 0};
    size_t j = 0;
    for (; j + 4 <= k; j += 4) {
      for (int l = 0; l < 4; ++l) s[l] += x[idx[j + l]];
    }
    for (; j < k; ++j) s[0] += x[idx[j]];
    return (s[0] + s[1]) + (s[2] + s[3]);
  }

  // The sample of dgc's threshold (format/dgc_threshold.h), split by sign.
  void SampleSigned(const float* x, size_t n, uint64_t seed) {
    pos_sample_.clear();
    neg_sample_.clear();
    dgc::ForEachSamplePosition(
        n, seed, [&](size_t, size_t i) { adaq::AddSampled(x[i], pos_sample_, neg_sample_); });
  }

  absl::Status Parse(absl::Span<const uint8_t> encoded, size_t n, float* mean_p, float* mean_n) {
    const uint8_t* p = encoded.data();
    if (FormatError e = adaq::CheckHeader(p, encoded.size(), n); !e.ok()) {
      return FormatErrorStatus(name(), e);
    }
    const adaq::Header h = adaq::ReadHeader(p);
    *mean_p = h.mean_pos;
    *mean_n = h.mean_neg;
    const uint8_t* pos_section = p + adaq::kHeaderBytes;
    if (auto s = sparse::ReadIndices(name(), pos_section, h.pos.bytes, h.k_pos, n, h.pos.encoding,
                                     h.pos.width, pos_);
        !s.ok()) {
      return s;
    }
    if (auto s = sparse::ReadIndices(name(), pos_section + h.pos.bytes, h.neg.bytes, h.k_neg, n,
                                     h.neg.encoding, h.neg.width, neg_);
        !s.ok()) {
      return s;
    }
    return FormatErrorStatus(
        name(), adaq::CheckDisjoint(pos_.data(), pos_.size(), neg_.data(), neg_.size()));
  }

  double ratio_;
  std::vector<uint32_t> pos_sample_, neg_sample_;
  std::vector<uint32_t> pos_, neg_;
};

}  // namespace

void RegisterAdaqCodec(CodecRegistry& registry) {
  CodecSpec spec = RatioSpecOf<AdaqCodec>(
      "adaq", "AdaComp style: per-sign sampled thresholds, indices and one mean per sign");
  spec.facts.sparse = true;
  spec.facts.gpu_kernel = true;
  spec.facts.gpu_memories = {MemoryKind::kResidual};
  MustRegister(registry, std::move(spec));
}

}  // namespace bytecomp::compress
