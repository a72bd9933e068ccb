// The efsignsgd memory (EF-SignSGD error feedback), registered in the memory registry.
#include <algorithm>
#include <memory>
#include <vector>
#include "exact_float_math.h"  // first: see there

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/memory.h"
#include "bytecomp/compress/memory_math.h"
#include "bytecomp/compress/params.h"
#include "param_specs.h"
#include "simd_kernel.h"

namespace bytecomp::compress {
namespace {

// The loops over memory_math.h's EfSignCompensate and EfSignResidual (compensated may alias
// the input).
BYTECOMP_SIMD_KERNEL(void, CompensateAll,
                     (float* compensated, const float* input, const float* __restrict residual,
                      float inverse_lr, size_t n),
                     (compensated, input, residual, inverse_lr, n)) {
  for (size_t i = 0; i < n; ++i) {
    compensated[i] = EfSignCompensate(input[i], residual[i], inverse_lr);
  }
}
BYTECOMP_SIMD_KERNEL(void, ResidualAll,
                     (float* __restrict residual, const float* __restrict compensated,
                      const float* __restrict decoded, float lr, size_t n),
                     (residual, compensated, decoded, lr, n)) {
  for (size_t i = 0; i < n; ++i) residual[i] = EfSignResidual(compensated[i], decoded[i], lr);
}

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
      return absl::InvalidArgumentError(absl::StrCat("memory 'efsignsgd': compensated has ",
                                                     compensated.size(), " elements, input ", n));
    }
    if (!residual_.empty() && residual_.size() != n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "memory 'efsignsgd': holds state for ", residual_.size(), " elements, called with ", n));
    }
    lr_ = ctx.learning_rate > 0.0f ? ctx.learning_rate : default_lr_;
    if (residual_.empty()) {
      if (compensated.data() != input.data()) {
        std::copy(input.begin(), input.end(), compensated.begin());
      }
      return absl::OkStatus();
    }
    CompensateAll(compensated.data(), input.data(), residual_.data(), 1.0f / lr_, n);
    return absl::OkStatus();
  }

  absl::Status Update(absl::Span<const float> compensated, absl::Span<const float> decoded,
                      const CodecContext&) override {
    const size_t n = compensated.size();
    if (decoded.size() != n) {
      return absl::InvalidArgumentError(absl::StrCat("memory 'efsignsgd': decoded has ",
                                                     decoded.size(), " elements, compensated ", n));
    }
    residual_.resize(n);
    ResidualAll(residual_.data(), compensated.data(), decoded.data(), lr_, n);
    return absl::OkStatus();
  }

  void Reset() override { residual_.clear(); }
  std::vector<std::vector<float>*> StateVectors() override { return {&residual_}; }

 private:
  float default_lr_;
  float lr_ = 0.1f;
  std::vector<float> residual_;
};

}  // namespace

void RegisterSignMemories(MemoryRegistry& registry) {
  MemorySpec spec;
  spec.name = "efsignsgd";
  spec.summary = "EF-SignSGD error feedback: residual kept in learning-rate units";
  spec.kind = MemoryKind::kEfSignSgd;
  spec.params.push_back(param_specs::DoubleParam(
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
