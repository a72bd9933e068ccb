// adaq (AdaComp style): per sign, a threshold from a sample; the message carries the indices
// of the kept positive and negative elements and one mean per sign. CPU only.
//
// Format: u8 version 1, u8 positive index encoding, u8 its width, u8 negative index encoding,
//   u8 its width, 3 zero bytes; u32 n, u32 k_pos, u32 k_neg, u32 pos_index_bytes,
//   u32 neg_index_bytes; f32 mean_pos, f32 mean_neg (36-byte header); then the positive and the
//   negative index sections (format/sparse_format.h). Decode: mean_pos at the positive indices,
//   mean_neg at the negative ones (the two sets must be disjoint), 0 elsewhere.
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/format/dgc_threshold.h"
#include "bytecomp/compress/format/sparse_format.h"
#include "bytecomp/compress/format/topk_select.h"
#include "codec_checks.h"
#include "index_section.h"
#include "sparse_codecs.h"

namespace bytecomp::compress {
namespace {

using sparse::IndexPlan;

constexpr size_t kAdaqHeader = 36;
constexpr uint64_t kAdaqSalt = 0x61646171ull;

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
  size_t MaxEncodedBytes(size_t n) const override { return kAdaqHeader + 4 * n; }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext& ctx,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    if (auto s = codec_checks::CheckEncodeCall(*this, n, out.size()); !s.ok()) return s;
    if (auto s = CheckFinite(input, "codec 'adaq' input"); !s.ok()) return s;
    const float* x = input.data();
    // Thresholds per sign, as bit patterns of the magnitude; UINT32_MAX keeps nothing.
    uint32_t pos_t = 0xffffffffu, neg_t = 0xffffffffu;
    if (n > 0) {
      SampleSigned(x, n, NodeSeed(ctx, kAdaqSalt));
      if (!pos_sample_.empty()) pos_t = NthLargestFraction(pos_sample_);
      if (!neg_sample_.empty()) neg_t = NthLargestFraction(neg_sample_);
    }
    // Thresholds compared on the raw bit pattern: a positive x has bits in [pos_t, max finite];
    // a negative one has bits 0x80000000 | |x|, so |x| >= neg_t is bits >= 0x80000000 | neg_t.
    size_t kp = 0, kn = 0;
    pos_.resize(n + kCompactSlack);
    neg_.resize(n + kCompactSlack);
    if (pos_t != 0xffffffffu) {
      kp = CompactRange<false>(x, n, pos_t, kNonFiniteAbsBits - 1, nullptr, pos_.data());
    }
    if (neg_t != 0xffffffffu) {
      kn = CompactRange<false>(x, n, 0x80000000u | neg_t, 0x80000000u | (kNonFiniteAbsBits - 1),
                               nullptr, neg_.data());
    }
    const float mean_p = kp ? static_cast<float>(SumAt(x, pos_.data(), kp) / kp) : 0.0f;
    const float mean_n = kn ? static_cast<float>(SumAt(x, neg_.data(), kn) / kn) : 0.0f;
    const IndexPlan plan_p = sparse::PlanIndices(pos_.data(), kp);
    const IndexPlan plan_n = sparse::PlanIndices(neg_.data(), kn);
    uint8_t* p = out.data();
    std::memset(p, 0, kAdaqHeader);
    p[0] = 1;
    p[1] = plan_p.encoding;
    p[2] = plan_p.width;
    p[3] = plan_n.encoding;
    p[4] = plan_n.width;
    PutU32(p + 8, static_cast<uint32_t>(n));
    PutU32(p + 12, static_cast<uint32_t>(kp));
    PutU32(p + 16, static_cast<uint32_t>(kn));
    PutU32(p + 20, static_cast<uint32_t>(plan_p.bytes));
    PutU32(p + 24, static_cast<uint32_t>(plan_n.bytes));
    PutF32(p + 28, mean_p);
    PutF32(p + 32, mean_n);
    size_t size = kAdaqHeader;
    size += sparse::WriteIndices(pos_.data(), kp, plan_p, p + size);
    size += sparse::WriteIndices(neg_.data(), kn, plan_n, p + size);
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

  // The ratio-th top fraction's smallest value (reorders values).
  uint32_t NthLargestFraction(std::vector<uint32_t>& values) const {
    return topk::NthLargest(values, sparse::KeptCount(ratio_, values.size()));
  }

  // The sample of dgc's threshold (format/dgc_threshold.h), split by sign.
  void SampleSigned(const float* x, size_t n, uint64_t seed) {
    pos_sample_.clear();
    neg_sample_.clear();
    dgc::ForEachSamplePosition(n, seed, [&](size_t, size_t i) {
      const float v = x[i];
      if (v > 0) pos_sample_.push_back(AbsBits(v));
      if (v < 0) neg_sample_.push_back(AbsBits(v));
    });
  }

  absl::Status Parse(absl::Span<const uint8_t> encoded, size_t n, float* mean_p, float* mean_n) {
    const uint8_t* p = encoded.data();
    if (encoded.size() < kAdaqHeader) {
      return FormatErrorStatus(
          name(), MakeFormatError(FormatErrorCode::kShorterThanHeader, encoded.size()));
    }
    if (p[0] != 1) {
      return FormatErrorStatus(name(), MakeFormatError(FormatErrorCode::kUnknownVersion, p[0]));
    }
    const uint32_t msg_n = GetU32(p + 8), kp = GetU32(p + 12), kn = GetU32(p + 16);
    const uint32_t bytes_p = GetU32(p + 20), bytes_n = GetU32(p + 24);
    if (msg_n != n) {
      return FormatErrorStatus(name(),
                               MakeFormatError(FormatErrorCode::kMessageElementCount, msg_n, n));
    }
    if (static_cast<uint64_t>(kp) + kn > n) {
      return MalformedError(name(),
                            absl::StrCat("k_pos + k_neg = ", uint64_t{kp} + kn, " > n = ", n));
    }
    const uint64_t expected = kAdaqHeader + uint64_t{bytes_p} + bytes_n;
    if (encoded.size() != expected) {
      return FormatErrorStatus(
          name(), MakeFormatError(FormatErrorCode::kSizeVsHeader, encoded.size(), expected));
    }
    *mean_p = GetF32(p + 28);
    *mean_n = GetF32(p + 32);
    if (!std::isfinite(*mean_p) || !std::isfinite(*mean_n)) {
      return MalformedError(name(), "means are NaN or Inf");
    }
    if (auto s = sparse::ReadIndices(name(), p + kAdaqHeader, bytes_p, kp, n, p[1], p[2], pos_);
        !s.ok()) {
      return s;
    }
    if (auto s = sparse::ReadIndices(name(), p + kAdaqHeader + bytes_p, bytes_n, kn, n, p[3], p[4],
                                     neg_);
        !s.ok()) {
      return s;
    }
    // Disjoint sets, checked by a merge of the two sorted lists.
    size_t a = 0, b = 0;
    while (a < pos_.size() && b < neg_.size()) {
      if (pos_[a] == neg_[b]) {
        return MalformedError(name(),
                              absl::StrCat("index ", pos_[a], " is both positive and negative"));
      }
      if (pos_[a] < neg_[b]) {
        ++a;
      } else {
        ++b;
      }
    }
    return absl::OkStatus();
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
  MustRegister(registry, std::move(spec));
}

}  // namespace bytecomp::compress
