// Memories (memory.h): registry, EncodeWithMemory, and the basic ones: none, residual,
// dgc_momentum.
#include "bytecomp/compress/memory.h"
#include "exact_float_math.h"  // first: see there

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/memory_math.h"
#include "bytecomp/compress/params.h"
#include "simd_kernel.h"

namespace bytecomp::compress {

const MemoryRegistry& MemoryRegistry::Global() {
  static const MemoryRegistry* const registry = BuildRegistry<MemoryRegistry>(
      {RegisterBasicMemories, RegisterSignMemories, RegisterLowRankMemories});
  return *registry;
}

absl::StatusOr<std::unique_ptr<Memory>> CreateMemory(absl::string_view name,
                                                     const CodecParams& params) {
  return MemoryRegistry::Global().Create(name, params);
}

absl::StatusOr<size_t> EncodeWithMemory(Codec& codec, Memory* memory, absl::Span<const float> input,
                                        const CodecContext& ctx, absl::Span<uint8_t> out,
                                        std::vector<float>& compensated,
                                        std::vector<float>& decoded) {
  if (memory == nullptr) return codec.Encode(input, ctx, out);
  compensated.resize(input.size());
  if (auto s = memory->Compensate(input, ctx, absl::MakeSpan(compensated)); !s.ok()) return s;
  auto bytes = codec.Encode(compensated, ctx, out);
  if (!bytes.ok()) return bytes.status();
  if (memory->needs_decoded()) {
    decoded.resize(input.size());
    if (auto s = codec.Decode(out.first(*bytes), ctx, absl::MakeSpan(decoded)); !s.ok()) return s;
  }
  if (auto s = memory->Update(compensated, decoded, ctx); !s.ok()) return s;
  return bytes;
}

namespace {

absl::Status SizeMismatch(absl::string_view memory, size_t have, size_t got) {
  return absl::InvalidArgumentError(absl::StrCat("memory '", memory, "' holds state for ", have,
                                                 " elements, called with ", got,
                                                 " (one memory instance per partition)"));
}

// The loops over memory_math.h's per-element updates (the CUDA kernels fuse the same ones).
// Element-wise, so an output may alias an input.
BYTECOMP_SIMD_KERNEL(void, ResidualCompensateAll,
                     (const float* input, const float* residual, float beta, float gamma,
                      float* compensated, size_t n),
                     (input, residual, beta, gamma, compensated, n)) {
  for (size_t i = 0; i < n; ++i) {
    compensated[i] = ResidualCompensate(input[i], residual[i], beta, gamma);
  }
}

BYTECOMP_SIMD_KERNEL(void, ResidualUpdateAll,
                     (const float* compensated, const float* decoded, float* residual, size_t n),
                     (compensated, decoded, residual, n)) {
  for (size_t i = 0; i < n; ++i) residual[i] = ResidualUpdate(compensated[i], decoded[i]);
}

// next_u = m * u + x; compensated = v + next_u.
BYTECOMP_SIMD_KERNEL(void, DgcMomentumAll,
                     (const float* input, const float* u, const float* v, float momentum,
                      float* next_u, float* compensated, size_t n),
                     (input, u, v, momentum, next_u, compensated, n)) {
  for (size_t i = 0; i < n; ++i) {
    const float un = DgcMomentumU(input[i], u[i], momentum);
    next_u[i] = un;
    compensated[i] = DgcMomentumV(v[i], un);
  }
}

// v = compensated and u kept where nothing was sent (decoded == 0); both zero where sent.
BYTECOMP_SIMD_KERNEL(void, MaskSent,
                     (const float* decoded, const float* compensated, float* u, float* v, size_t n),
                     (decoded, compensated, u, v, n)) {
  for (size_t i = 0; i < n; ++i) {
    const bool sent = decoded[i] != 0.0f;
    v[i] = sent ? 0.0f : compensated[i];
    u[i] = sent ? 0.0f : u[i];
  }
}

class NoMemory final : public Memory {
 public:
  absl::string_view name() const override { return "none"; }
  absl::Status Compensate(absl::Span<const float> input, const CodecContext&,
                          absl::Span<float> compensated) override {
    if (compensated.size() != input.size())
      return SizeMismatch(name(), input.size(), compensated.size());
    if (compensated.data() != input.data())
      std::copy(input.begin(), input.end(), compensated.begin());
    return absl::OkStatus();
  }
  absl::Status Update(absl::Span<const float>, absl::Span<const float>,
                      const CodecContext&) override {
    return absl::OkStatus();
  }
  bool needs_decoded() const override { return false; }
  void Reset() override {}
};

// Error feedback. GRACE's ResidualMemory and BytePS's vanilla error feedback:
//   compensated = beta * residual + gamma * input;  residual = compensated - decoded.
// (GRACE returns the input unchanged on the very first call; here the residual starts at zero,
// which is the same for gamma = 1.)
class ResidualMemory final : public Memory {
 public:
  ResidualMemory(float beta, float gamma) : beta_(beta), gamma_(gamma) {}
  absl::string_view name() const override { return "residual"; }

  absl::Status Compensate(absl::Span<const float> input, const CodecContext&,
                          absl::Span<float> compensated) override {
    const size_t n = input.size();
    if (compensated.size() != n) return SizeMismatch(name(), n, compensated.size());
    if (residual_.empty()) residual_.assign(n, 0.0f);
    if (residual_.size() != n) return SizeMismatch(name(), residual_.size(), n);
    ResidualCompensateAll(input.data(), residual_.data(), beta_, gamma_, compensated.data(), n);
    return absl::OkStatus();
  }

  absl::Status Update(absl::Span<const float> compensated, absl::Span<const float> decoded,
                      const CodecContext&) override {
    const size_t n = compensated.size();
    if (residual_.size() != n) return SizeMismatch(name(), residual_.size(), n);
    if (decoded.size() != n) return SizeMismatch(name(), n, decoded.size());
    ResidualUpdateAll(compensated.data(), decoded.data(), residual_.data(), n);
    return absl::OkStatus();
  }

  void Reset() override { residual_.clear(); }
  std::vector<std::vector<float>*> StateVectors() override { return {&residual_}; }

 private:
  float beta_, gamma_;
  std::vector<float> residual_;
};

// DGC momentum correction with masking (GRACE's DgcMemory, without its gradient clipping):
//   u = momentum * u + input;  v = v + u;  compensated = v;
//   after encode, u and v are zeroed where the coordinate was transmitted (decoded != 0).
// Compensate computes the new u aside and Update commits it, so a failed encode in between
// leaves the state as it was.
class DgcMomentumMemory final : public Memory {
 public:
  explicit DgcMomentumMemory(float momentum) : momentum_(momentum) {}
  absl::string_view name() const override { return "dgc_momentum"; }

  absl::Status Compensate(absl::Span<const float> input, const CodecContext&,
                          absl::Span<float> compensated) override {
    const size_t n = input.size();
    if (compensated.size() != n) return SizeMismatch(name(), n, compensated.size());
    if (u_.empty()) {
      u_.assign(n, 0.0f);
      v_.assign(n, 0.0f);
    }
    if (u_.size() != n) return SizeMismatch(name(), u_.size(), n);
    next_u_.resize(n);
    DgcMomentumAll(input.data(), u_.data(), v_.data(), momentum_, next_u_.data(),
                   compensated.data(), n);
    pending_ = true;
    return absl::OkStatus();
  }

  absl::Status Update(absl::Span<const float> compensated, absl::Span<const float> decoded,
                      const CodecContext&) override {
    const size_t n = compensated.size();
    if (!pending_)
      return absl::FailedPreconditionError("memory 'dgc_momentum': Update before Compensate");
    if (u_.size() != n) return SizeMismatch(name(), u_.size(), n);
    if (decoded.size() != n) return SizeMismatch(name(), n, decoded.size());
    pending_ = false;
    u_.swap(next_u_);
    MaskSent(decoded.data(), compensated.data(), u_.data(), v_.data(), n);
    return absl::OkStatus();
  }

  void Reset() override {
    u_.clear();
    v_.clear();
    pending_ = false;
  }
  std::vector<std::vector<float>*> StateVectors() override { return {&u_, &v_}; }

 private:
  float momentum_;
  std::vector<float> u_, v_, next_u_;
  bool pending_ = false;
};

}  // namespace

void RegisterBasicMemories(MemoryRegistry& registry) {
  MustRegisterMemory(registry,
                     {.name = "none",
                      .summary = "no state: the input is encoded as it is",
                      .kind = MemoryKind::kNone,
                      .params = {},
                      .factory = [](const CodecParams&) -> absl::StatusOr<std::unique_ptr<Memory>> {
                        return std::make_unique<NoMemory>();
                      }});
  MustRegisterMemory(
      registry,
      {.name = "residual",
       .summary = "error feedback: compensated = beta * residual + gamma * input; residual = "
                  "compensated - decoded",
       .kind = MemoryKind::kResidual,
       .params = {{.name = "beta",
                   .type = CodecParamSpec::Type::kDouble,
                   .default_value = "1.0",
                   .help = "weight of the carried residual",
                   .min_value = 0},
                  {.name = "gamma",
                   .type = CodecParamSpec::Type::kDouble,
                   .default_value = "1.0",
                   .help = "weight of the new input (e.g. the learning rate)",
                   .min_value = 0}},
       .factory = [](const CodecParams& params) -> absl::StatusOr<std::unique_ptr<Memory>> {
         ParamReader r(params);
         const double beta = r.Double("beta"), gamma = r.Double("gamma");
         if (!r.ok()) return r.status();
         return std::make_unique<ResidualMemory>(static_cast<float>(beta),
                                                 static_cast<float>(gamma));
       }});
  MustRegisterMemory(
      registry,
      {.name = "dgc_momentum",
       .summary =
           "DGC momentum correction: u = m*u + input, v += u, send v; zero u and v where sent",
       .kind = MemoryKind::kDgcMomentum,
       .params = {{.name = "momentum",
                   .type = CodecParamSpec::Type::kDouble,
                   .default_value = "0.9",
                   .help = "momentum of the correction",
                   .min_value = 0,
                   .max_value = 1,
                   .max_exclusive = true}},
       .factory = [](const CodecParams& params) -> absl::StatusOr<std::unique_ptr<Memory>> {
         ParamReader r(params);
         const double momentum = r.Double("momentum");
         if (!r.ok()) return r.status();
         return std::make_unique<DgcMomentumMemory>(static_cast<float>(momentum));
       }});
}

std::string SaveMemoryState(Memory& memory) {
  std::string out;
  auto put = [&out](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  const std::vector<std::vector<float>*> vectors = memory.StateVectors();
  const uint32_t count = static_cast<uint32_t>(vectors.size());
  put(&count, 4);
  for (const std::vector<float>* v : vectors) {
    const uint64_t n = v->size();
    put(&n, 8);
    put(v->data(), n * sizeof(float));
  }
  return out;
}

absl::Status LoadMemoryState(Memory& memory, absl::string_view state) {
  const std::vector<std::vector<float>*> vectors = memory.StateVectors();
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("state of memory '", memory.name(), "': ", why));
  };
  size_t pos = 0;
  auto take = [&](void* p, size_t n) {
    if (state.size() - pos < n) return false;
    if (n > 0) std::memcpy(p, state.data() + pos, n);  // an empty vector's data() may be null
    pos += n;
    return true;
  };
  uint32_t count = 0;
  if (!take(&count, 4)) return bad("truncated");
  if (count != vectors.size()) {
    return bad(absl::StrCat(count, " vectors, expected ", vectors.size()));
  }
  std::vector<std::vector<float>> loaded(count);
  for (uint32_t i = 0; i < count; ++i) {
    uint64_t n = 0;
    if (!take(&n, 8) || n > (state.size() - pos) / sizeof(float)) return bad("truncated");
    loaded[i].resize(n);
    take(loaded[i].data(), n * sizeof(float));
    for (float x : loaded[i]) {
      if (!std::isfinite(x)) return bad("non-finite value");
    }
  }
  if (pos != state.size()) return bad(absl::StrCat(state.size() - pos, " trailing bytes"));
  for (uint32_t i = 0; i < count; ++i) vectors[i]->swap(loaded[i]);
  return absl::OkStatus();
}

}  // namespace bytecomp::compress
