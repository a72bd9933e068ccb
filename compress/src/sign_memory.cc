// The efsignsgd memory (EF-SignSGD error feedback), registered in the memory registry.
// elementwise.h needs fp-contract off for identical rounding in every variant; -O2 keeps
// GCC 12 to its "very cheap" vectoriser cost model, which refuses the codec loops; and
// no-trapping-math (results unchanged) lets it if-convert selects around divisions.
#pragma GCC optimize("fp-contract=off", "vect-cost-model=dynamic", "no-trapping-math")
#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/memory.h"
#include "bytecomp/compress/params.h"
#include "quant_util.h"

namespace bytecomp::compress {
namespace {

// EF-SignSGD's memory (Karimireddy et al.; GRACE EFSignSGDMemory): the residual e is kept in
// learning-rate units, p = lr * g + e is what the paper compresses, e' = p - lr * decoded.
// This memory hands the codec p / lr (gradient units, so the server's sum stays a gradient
// sum): compensated = g + e / lr, and e' = lr * (compensated - decoded). With a constant lr
// that is plain error feedback; when lr changes (ctx.learning_rate > 0 overrides the lr
// parameter), the carried error keeps its size in parameter space, as in the paper.
// Invariant: decoded + e'/lr == g + e/lr.
class EfSignSgdMemory final : public Memory {
 public:
  explicit EfSignSgdMemory(float lr) : default_lr_(lr) {}
  absl::string_view name() const override { return "efsignsgd"; }

  absl::Status Compensate(absl::Span<const float> input, const CodecContext& ctx,
                          absl::Span<float> compensated) override {
    const size_t n = input.size();
    if (compensated.size() != n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "memory 'efsignsgd': compensated has ", compensated.size(), " elements, input ", n));
    }
    if (!residual_.empty() && residual_.size() != n) {
      return absl::InvalidArgumentError(absl::StrCat("memory 'efsignsgd': holds state for ",
                                                     residual_.size(), " elements, called with ",
                                                     n));
    }
    lr_ = ctx.learning_rate > 0.0f ? ctx.learning_rate : default_lr_;
    if (residual_.empty()) {
      if (compensated.data() != input.data()) {
        std::copy(input.begin(), input.end(), compensated.begin());
      }
      return absl::OkStatus();
    }
    AddScaled(compensated.data(), input.data(), residual_.data(), 1.0f / lr_, n);
    return absl::OkStatus();
  }

  absl::Status Update(absl::Span<const float> compensated, absl::Span<const float> decoded,
                      const CodecContext&) override {
    const size_t n = compensated.size();
    if (decoded.size() != n) {
      return absl::InvalidArgumentError(absl::StrCat("memory 'efsignsgd': decoded has ",
                                                     decoded.size(), " elements, compensated ",
                                                     n));
    }
    residual_.resize(n);
    ScaledDifference(residual_.data(), compensated.data(), decoded.data(), lr_, n);
    return absl::OkStatus();
  }

  void Reset() override { residual_.clear(); }
  std::vector<std::vector<float>*> StateVectors() override { return {&residual_}; }

 private:
  // out = a + scale * b (out may alias a).
  __attribute__((target_clones("avx2", "default"))) static void AddScaled(
      float* out, const float* a, const float* __restrict b, float scale, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = a[i] + scale * b[i];
  }
  // out = scale * (a - b).
  __attribute__((target_clones("avx2", "default"))) static void ScaledDifference(
      float* __restrict out, const float* __restrict a, const float* __restrict b, float scale,
      size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = scale * (a[i] - b[i]);
  }

  float default_lr_;
  float lr_ = 0.1f;
  std::vector<float> residual_;
};

}  // namespace

void RegisterSignMemories(MemoryRegistry& registry) {
  MemorySpec spec;
  spec.name = "efsignsgd";
  spec.summary = "EF-SignSGD error feedback: residual kept in learning-rate units";
  spec.params.push_back(codec_checks::DoubleParam(
      "lr", "0.1", "learning rate, > 0 (CodecContext::learning_rate overrides it when set)", 0.0,
      /*min_exclusive=*/true));
  spec.factory = [](const CodecParams& params) -> absl::StatusOr<std::unique_ptr<Memory>> {
    ParamReader r(params);
    const double lr = r.Double("lr");
    if (!r.ok()) return r.status();
    return std::unique_ptr<Memory>(new EfSignSgdMemory(static_cast<float>(lr)));
  };
  MustRegisterMemory(registry, std::move(spec));
}

}  // namespace bytecomp::compress
