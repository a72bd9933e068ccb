// dgc (GRACE's DGC; its momentum correction is the dgc_momentum memory): every |x| at or above
// a threshold searched from a sample (format/dgc_threshold.h, shared with the CUDA codec), in
// the sparse message of format/sparse_format.h.
#include <cstring>
#include <memory>
#include <vector>

#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/format/dgc_threshold.h"
#include "bytecomp/compress/format/sparse_format.h"
#include "codec_checks.h"
#include "simd_kernel.h"
#include "sparse_codecs.h"

namespace bytecomp::compress {
namespace {

// The number of |x| >= the float with |bits| threshold_bits.
BYTECOMP_SIMD_KERNEL(size_t, CountAtLeast, (const float* x, size_t n, int32_t threshold_bits),
                     (x, n, threshold_bits)) {
  size_t count = 0;
  for (size_t i = 0; i < n; ++i) {
    int32_t b;
    std::memcpy(&b, x + i, 4);
    count += (b & 0x7fffffff) >= threshold_bits ? 1 : 0;
  }
  return count;
}

class DgcCodec final : public SparseCodec {
 public:
  explicit DgcCodec(double ratio) : ratio_(ratio) {}
  absl::string_view name() const override { return "dgc"; }
  size_t MaxEncodedBytes(size_t n) const override { return sparse::MaxMessageBytes(n); }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext& ctx,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    if (auto s = codec_checks::CheckEncodeCall(*this, n, out.size()); !s.ok()) return s;
    if (auto s = CheckFinite(input, "codec 'dgc' input"); !s.ok()) return s;
    if (n == 0) return FinishSparseMessage(out.data(), 0, 0, nullptr);
    const float* x = input.data();
    sample_.resize(dgc::SampleSize(n));
    dgc::ForEachSamplePosition(n, NodeSeed(ctx, dgc::kDgcSalt),
                               [&](size_t j, size_t i) { sample_[j] = AbsBits(x[i]); });
    float threshold = dgc::SampleThreshold(sample_, ratio_);
    const double target = dgc::Target(ratio_, n);
    auto count_at_least = [x, n](float t) {
      return CountAtLeast(x, n, static_cast<int32_t>(dgc::ThresholdBits(t)));
    };
    size_t count = count_at_least(threshold);
    for (int step = 0; step < dgc::kMaxSteps && dgc::AdjustThreshold(count, target, &threshold);
         ++step) {
      count = count_at_least(threshold);
    }
    indices_.resize(count + kCompactSlack);
    const size_t k = Compact(x, n, dgc::ThresholdBits(threshold), out.data(), indices_.data());
    return FinishSparseMessage(out.data(), n, k, indices_.data());
  }

 private:
  double ratio_;
  std::vector<uint32_t> sample_;
};

}  // namespace

void RegisterDgcCodec(CodecRegistry& registry) {
  CodecSpec spec = RatioSpecOf<DgcCodec>(
      "dgc", "top-k by a threshold estimated from a 1% sample, count within 0.7-1.3 k");
  spec.facts = {.sparse = true,
                .gpu_kernel = true,
                .gpu_memories = {MemoryKind::kDgcMomentum},
                .encode_target = EncodeSpeedTarget::kSelection};
  MustRegister(registry, std::move(spec));
}

}  // namespace bytecomp::compress
