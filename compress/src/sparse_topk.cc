// topk (the k largest magnitudes, format/topk_select.h) and threshold (every magnitude above a
// fixed threshold): the sparse message of format/sparse_format.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/format/sparse_format.h"
#include "bytecomp/compress/format/topk_select.h"
#include "codec_checks.h"
#include "index_section.h"
#include "sparse_codecs.h"

namespace bytecomp::compress {
namespace {

// The k largest magnitudes in linear time, without sorting. On large inputs a strided sample
// bounds the k-th largest from below, one compaction pass gathers every |x| from that bound up
// (in index order) and nth_element among the gathered finds the exact threshold
// (SelectBySample). Otherwise, or when the bound misses: a histogram of the top 11 bits of |x|
// finds the bin that holds the k-th largest; one compaction pass gathers every element from
// that bin up; nth_element over the bin's few finds the threshold. Either way a pass over the
// gathered keeps every element above it and the first ties at it. When the bin holds too many
// elements to gather (ties of a few values), the bin's magnitudes alone are gathered and a
// second pass over the input keeps the selected ones.
class TopkCodec final : public SparseCodec {
 public:
  explicit TopkCodec(double ratio) : ratio_(ratio) {}
  absl::string_view name() const override { return "topk"; }
  size_t MaxEncodedBytes(size_t n) const override {
    return sparse::MaxMessageBytes(sparse::KeptCount(ratio_, n));
  }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext&,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    if (auto s = codec_checks::CheckEncodeCall(*this, n, out.size()); !s.ok()) return s;
    const size_t k = sparse::KeptCount(ratio_, n);
    const float* x = input.data();
    if (absl::StatusOr<size_t> r; k > 0 && SelectBySample(x, n, k, out, &r)) return r;

    constexpr int kBins = 2048, kShift = 20;
    uint32_t hist[4][kBins] = {};
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {  // four histograms: repeated bins do not serialise
      ++hist[0][AbsBits(x[i]) >> kShift];
      ++hist[1][AbsBits(x[i + 1]) >> kShift];
      ++hist[2][AbsBits(x[i + 2]) >> kShift];
      ++hist[3][AbsBits(x[i + 3]) >> kShift];
    }
    for (; i < n; ++i) ++hist[0][AbsBits(x[i]) >> kShift];
    // NaN and Inf land in the bins from kNonFiniteAbsBits up: the finite check for free.
    for (uint32_t b = kNonFiniteAbsBits >> kShift; b < kBins; ++b) {
      if (hist[0][b] + hist[1][b] + hist[2][b] + hist[3][b] != 0) {
        return NonFiniteError(input, "codec 'topk' input");
      }
    }

    if (k == 0) return FinishSparseMessage(out.data(), n, 0, nullptr);
    auto bin_count_of = [&hist](uint32_t b) -> uint64_t {
      return hist[0][b] + hist[1][b] + hist[2][b] + hist[3][b];
    };
    uint64_t above = 0;
    const uint32_t bin = topk::SelectBin(kBins - 1, k, bin_count_of, &above);
    const size_t bin_count = bin_count_of(bin);
    const uint32_t bin_lo = static_cast<uint32_t>(bin) << kShift;
    const uint32_t bin_hi = bin_lo + ((1u << kShift) - 1);
    // Few candidates (small ratios): gathered once. Many: the picking pass (scalar) would cost
    // more than the compaction kernels' second pass.
    if (above + bin_count <= 2 * k + kMaxExtraCandidates && above + bin_count <= n / 16) {
      return SelectFromCandidates(x, n, k, bin_lo, bin_hi, above + bin_count, out);
    }
    // The threshold's bin holds too many elements to gather them all (ties of a few values):
    // its elements' magnitudes alone, then a second pass keeps the selected ones.
    uint32_t threshold = 0;
    size_t ties = 0;
    bool all_ties = false;
    {
      candidates_.resize(bin_count + kCompactSlack);
      const size_t c = CompactRange(x, n, bin_lo, bin_lo + ((1u << kShift) - 1),
                                    reinterpret_cast<uint8_t*>(candidates_.data()), nullptr);
      candidates_.resize(c);
      for (auto& a : candidates_) a &= 0x7fffffffu;  // stored as the values' bits
      const size_t need = k - above;                 // 1 <= need <= c
      const topk::Cut cut = topk::CutForLargest(candidates_, need);
      threshold = cut.threshold;
      ties = cut.ties;
      all_ties = cut.ties == cut.equal;
    }

    uint8_t* values = out.data() + sparse::kHeaderBytes;
    size_t j = 0;
    if (all_ties && k >= kCompactSlack) {
      // Every element at the threshold is kept: exactly k elements have |x| >= threshold, and
      // the value area (room for 2k values before the index section) takes the slack.
      indices_.resize(k + kCompactSlack);
      j = CompactRange(x, n, threshold, kNonFiniteAbsBits - 1, values, indices_.data());
    } else if (k >= kCompactSlack) {
      // Some elements equal to the threshold are dropped: keep the first `ties` of them. The
      // elements above it are compacted in one pass; the ties are found block by block until
      // enough are seen; a backward merge puts both in index order in place.
      indices_.resize(k + kCompactSlack);
      const size_t greater =
          CompactRange(x, n, threshold + 1, kNonFiniteAbsBits - 1, values, indices_.data());
      constexpr size_t kBlock = 4096;
      ties_.resize(ties + kBlock + kCompactSlack);
      tie_values_.resize(kBlock + kCompactSlack);
      size_t t = 0;
      for (size_t start = 0; start < n && t < ties; start += kBlock) {
        t += CompactRange(x + start, std::min(kBlock, n - start), threshold, threshold,
                          reinterpret_cast<uint8_t*>(tie_values_.data()), ties_.data() + t,
                          static_cast<uint32_t>(start));
      }
      if (greater + ties != k || t < ties) {
        return absl::InternalError(absl::StrCat("topk: ", greater, " above the threshold, ", t,
                                                " ties seen, ", ties, " needed, k = ", k));
      }
      int64_t g = static_cast<int64_t>(greater) - 1, tt = static_cast<int64_t>(ties) - 1;
      for (int64_t w = static_cast<int64_t>(k) - 1; tt >= 0; --w) {
        if (g >= 0 && indices_[g] > ties_[tt]) {
          indices_[w] = indices_[g];
          std::memcpy(values + 4 * w, values + 4 * g, 4);
          --g;
        } else {
          indices_[w] = ties_[tt];
          std::memcpy(values + 4 * w, x + ties_[tt], 4);
          --tt;
        }
      }
      j = k;
    } else {
      // k below the vector kernel's slack: one scalar pass keeping the first ties.
      indices_.resize(k + 1);
      uint32_t* idx = indices_.data();
      for (size_t e = 0; e < n && k > 0; ++e) {
        const uint32_t a = AbsBits(x[e]);
        const bool tie = a == threshold && ties > 0;
        const bool keep = a > threshold || tie;
        std::memcpy(values + 4 * j, x + e, 4);
        idx[j] = static_cast<uint32_t>(e);
        j += keep ? 1 : 0;
        ties -= tie ? 1 : 0;
      }
    }
    if (j != k) return absl::InternalError(absl::StrCat("topk selected ", j, " of ", k));
    const uint32_t* idx = indices_.data();
    return FinishSparseMessage(out.data(), n, k, idx);
  }

 protected:
  int64_t RequiredK(size_t n) const override {
    return static_cast<int64_t>(sparse::KeptCount(ratio_, n));
  }

 private:
  // Candidates beyond 2k that SelectFromCandidates may gather (its scratch, in elements).
  static constexpr size_t kMaxExtraCandidates = size_t{1} << 16;

  // One pass gathers every candidate, |x| from the threshold's bin [bin_lo, bin_hi] up, in
  // index order (`count` of them: the histogram's count); the k-th largest among the bin's
  // elements is the threshold; a pass over the candidates keeps those above it and the first
  // ties at it, straight into the message.
  absl::StatusOr<size_t> SelectFromCandidates(const float* x, size_t n, size_t k, uint32_t bin_lo,
                                              uint32_t bin_hi, size_t count,
                                              absl::Span<uint8_t> out) {
    candidate_values_.resize(count + kCompactSlack);
    candidate_indices_.resize(count + kCompactSlack);
    const size_t c = CompactRange(x, n, bin_lo, kNonFiniteAbsBits - 1,
                                  reinterpret_cast<uint8_t*>(candidate_values_.data()),
                                  candidate_indices_.data());
    if (c != count) {
      return absl::InternalError(absl::StrCat("topk: ", c, " candidates, histogram ", count));
    }
    candidates_.clear();
    for (size_t i = 0; i < c; ++i) {
      const uint32_t a = AbsBits(candidate_values_[i]);
      if (a <= bin_hi) candidates_.push_back(a);
    }
    const size_t need = k - (c - candidates_.size());  // 1 <= need <= the bin's count
    const topk::Cut cut = topk::CutForLargest(candidates_, need);
    return PickFromCandidates(n, k, c, cut.threshold, cut.ties, out);
  }

  // From the c gathered candidates (index order), every one above threshold and the first
  // `ties` equal to it, straight into the message. Writes every candidate at slot j and
  // advances j past the kept ones: the value area has room for 2k >= k + 1 values, indices_
  // k + 1.
  absl::StatusOr<size_t> PickFromCandidates(size_t n, size_t k, size_t c, uint32_t threshold,
                                            size_t ties, absl::Span<uint8_t> out) {
    uint8_t* values = out.data() + sparse::kHeaderBytes;
    indices_.resize(k + 1);
    uint32_t* idx = indices_.data();
    size_t j = 0;
    for (size_t i = 0; i < c; ++i) {
      const uint32_t a = AbsBits(candidate_values_[i]);
      const bool tie = a == threshold && ties > 0;
      const bool keep = a > threshold || tie;
      std::memcpy(values + 4 * j, &candidate_values_[i], 4);
      idx[j] = candidate_indices_[i];
      j += keep ? 1 : 0;
      ties -= tie ? 1 : 0;
      if (j == k) break;
    }
    if (j != k) return absl::InternalError(absl::StrCat("topk selected ", j, " of ", k));
    return FinishSparseMessage(out.data(), n, k, idx);
  }

  // The histogram's pass skipped: a strided sample of |x| estimates a bound below the k-th
  // largest (its m-th largest, m a few standard deviations above the k * samples / n
  // expected), one compaction pass gathers every |x| from that bound up, and the k-th largest
  // among the gathered is the threshold. Returns false, having written nothing that counts,
  // when the estimate misses: fewer than k gathered, more than the scratch takes, a bound of
  // 0, or a NaN or Inf among them (the histogram path then selects, or reports the input).
  bool SelectBySample(const float* x, size_t n, size_t k, absl::Span<uint8_t> out,
                      absl::StatusOr<size_t>* result) {
    constexpr size_t kSamples = 8192;
    if (n < 64 * kSamples) return false;
    const double expected = static_cast<double>(k) * kSamples / static_cast<double>(n);
    const size_t m = static_cast<size_t>(expected + 4.0 * std::sqrt(expected) + 16.0);
    if (m >= kSamples / 32) return false;  // ratios above ~2%: the histogram path
    const size_t stride = n / kSamples;
    candidates_.resize(kSamples);
    for (size_t i = 0; i < kSamples; ++i) candidates_[i] = AbsBits(x[i * stride + stride / 2]);
    const uint32_t lo = topk::NthLargest(candidates_, m);
    if (lo == 0 || lo >= kNonFiniteAbsBits) return false;
    const size_t cap = 2 * k + kMaxExtraCandidates;
    constexpr size_t kBlock = size_t{1} << 16;
    candidate_values_.resize(cap + kBlock + kCompactSlack);
    candidate_indices_.resize(cap + kBlock + kCompactSlack);
    size_t c = 0;
    for (size_t begin = 0; begin < n; begin += kBlock) {  // NaN and Inf gathered too
      c += CompactRange(x + begin, std::min(kBlock, n - begin), lo, 0xffffffffu,
                        reinterpret_cast<uint8_t*>(candidate_values_.data() + c),
                        candidate_indices_.data() + c, static_cast<uint32_t>(begin));
      if (c > cap) return false;
    }
    if (c < k) return false;
    candidates_.resize(c);
    uint32_t max_bits = 0;
    for (size_t i = 0; i < c; ++i) {
      candidates_[i] = AbsBits(candidate_values_[i]);
      max_bits = candidates_[i] > max_bits ? candidates_[i] : max_bits;
    }
    if (max_bits >= kNonFiniteAbsBits) return false;
    const topk::Cut cut = topk::CutForLargest(candidates_, k);
    *result = PickFromCandidates(n, k, c, cut.threshold, cut.ties, out);
    return true;
  }

  double ratio_;
  std::vector<uint32_t> candidates_, ties_, candidate_indices_;
  std::vector<float> candidate_values_;
  std::vector<float> tie_values_;
};

class ThresholdCodec final : public SparseCodec {
 public:
  explicit ThresholdCodec(double threshold)
      : kept_from_bits_(sparse::ThresholdKeptFromBits(threshold)) {}
  absl::string_view name() const override { return "threshold"; }
  CodecProperties properties() const override {
    CodecProperties p = SparseCodec::properties();
    p.lossless = kept_from_bits_ == 1;  // drops only zeros
    return p;
  }
  size_t MaxEncodedBytes(size_t n) const override { return sparse::MaxMessageBytes(n); }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext&,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    if (auto s = codec_checks::CheckEncodeCall(*this, n, out.size()); !s.ok()) return s;
    // |x| > threshold, compared as bit patterns; the finite check in the same pass.
    const uint32_t hi = kNonFiniteAbsBits - 1;
    if (n >= kCompactSlack && n < (size_t{1} << 31) && kept_from_bits_ <= hi && ByteDeltaPaths()) {
      // The index steps as bytes while they fit (one pass; their section packed after it),
      // else from the block that holds a larger one on, the indices as below.
      steps_.resize(n + kCompactSlack);
      const ByteStepCompaction r =
          CompactByteSteps(input.data(), n, kept_from_bits_, out.data(), steps_.data());
      if (!r.stopped) {
        if (r.non_finite) return NonFiniteError(input, "codec 'threshold' input");
        return FinishByteStepMessage(out.data(), n, r.k, steps_.data(), r.max_delta);
      }
      indices_.resize(n + kCompactSlack);
      sparse::IndicesFromByteSteps(steps_.data(), r.k, indices_.data());
      bool non_finite = r.non_finite;
      const size_t k =
          r.k + CompactRange(input.data() + r.done, n - r.done, kept_from_bits_, hi,
                             out.data() + sparse::kHeaderBytes + 4 * r.k, indices_.data() + r.k,
                             static_cast<uint32_t>(r.done), &non_finite);
      if (non_finite) return NonFiniteError(input, "codec 'threshold' input");
      return FinishSparseMessage(out.data(), n, k, indices_.data());
    }
    indices_.resize(n + kCompactSlack);
    bool non_finite = false;
    const size_t k =
        Compact(input.data(), n, kept_from_bits_, out.data(), indices_.data(), &non_finite);
    if (non_finite) return NonFiniteError(input, "codec 'threshold' input");
    return FinishSparseMessage(out.data(), n, k, indices_.data());
  }

 private:
  uint32_t kept_from_bits_;     // sparse::ThresholdKeptFromBits
  std::vector<uint8_t> steps_;  // encode's index steps (CompactByteSteps)
};

}  // namespace

void RegisterTopkCodec(CodecRegistry& registry) {
  CodecSpec spec = RatioSpecOf<TopkCodec>(
      "topk", "values and indices of the k = ceil(ratio * n) largest magnitudes");
  spec.facts = {.sparse = true,
                .selection = "top-k",
                .gpu_kernel = true,
                .gpu_memories = {MemoryKind::kResidual},
                .encode_target = EncodeSpeedTarget::kSelection};
  MustRegister(registry, std::move(spec));
}

void RegisterThresholdCodec(CodecRegistry& registry) {
  MustRegister(registry,
               {.name = "threshold",
                .summary = "values and indices of every element with magnitude above the threshold",
                .params = {{.name = "threshold",
                            .type = CodecParamSpec::Type::kDouble,
                            .default_value = "0.01",
                            .help = "magnitudes strictly above it are sent",
                            .min_value = 0}},
                .factory = [](const CodecParams& params) -> absl::StatusOr<std::unique_ptr<Codec>> {
                  ParamReader r(params);
                  const double threshold = r.Double("threshold");
                  if (!r.ok()) return r.status();
                  return std::make_unique<ThresholdCodec>(threshold);
                },
                .facts = {.lossless_when = ThresholdIsZero,
                          .sparse = true,
                          .gpu_kernel = true,
                          .gpu_memories = {MemoryKind::kResidual},
                          .encode_target = EncodeSpeedTarget::kSelection}});
}

}  // namespace bytecomp::compress
