// PowerSGD (Vogels et al. 2019) as a two-round codec (two_round.h), its aggregator
// ("two_round_sum") and its memory ("powersgd", residual error feedback).
//
// Matrix shape: the codec sees a partition of n elements and reads them row-major into a
// rows x cols matrix M. With the "cols" parameter (the layer's row length, which the nodes set
// from the tensor's declared shape: compress/strategy.h PlanFor; a partition is then whole rows
// of the layer) cols is that, as PyTorch's PowerSGD hook views a layer (shape[0], -1); without
// it (0, or more than n) cols = ceil(sqrt(n)), so that P and Q are both about sqrt(n) long.
// rows = ceil(n / cols), zero-padded at the end (rows * cols - n < cols padding zeros).
// rank_eff = min(rank, rows, cols).
//
// Round (per worker w, with the same ctx in all calls):
//   P_w = M_w Q                          payload 1: u32 1, rows * rank_eff f32 (column-major)
//   P^ = orthonormalise(sum_w P_w)       Gram-Schmidt in double, the same on every worker
//   Q_w = M_w^T P^                       payload 2: u32 2, cols * rank_eff f32 (column-major)
//   output = P^ (sum_w Q_w)^T            = sum_w P^ P^T M_w, the projection of the sum of the
//                                          inputs onto span(P^): n floats (padding dropped)
//   local approximation = P^ Q_w^T       for this worker's residual (memory "powersgd")
// Warm start: the next round's Q is this round's sum_w Q_w, each column scaled to unit length
// (only directions matter: the orthonormalisation removes column scales, and unit columns keep
// P's magnitude independent of the worker count and of past rounds). The first Q, and any
// column that became zero, is standard normal from CounterRandom(seed, key, round, node 0),
// the same on every worker. Payload sizes: 4 + 4 * rows * rank_eff and 4 + 4 * cols *
// rank_eff bytes; for n = 2^20, rank 1: 4 KiB each against 4 MiB of fp32.
//
// Shared with the CUDA codec (compress/cuda/src/lowrank_kernels.cu), so that both write the
// same bytes: the formats, the shape, the summation order of each product and the decode
// checks (format/powersgd_format.h), and everything done on the factors (the warm start, the
// orthonormalisation, the call order and its errors: powersgd_round.h).
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <vector>
#include "exact_float_math.h"  // first: see there

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/aggregator.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/format/powersgd_format.h"
#include "bytecomp/compress/memory.h"
#include "bytecomp/compress/memory_math.h"
#include "bytecomp/compress/params.h"
#include "bytecomp/compress/powersgd_round.h"
#include "bytecomp/compress/registry.h"
#include "bytecomp/compress/two_round.h"
#include "codec_checks.h"
#include "param_specs.h"
#include "simd_kernel.h"

namespace bytecomp::compress {
namespace {

constexpr absl::string_view kName = "powersgd";
using powersgd::Shape;

// memcpy that accepts the null pointers of empty vectors (n = 0 partitions).
void CopyBytes(void* to, const void* from, size_t bytes) {
  if (bytes != 0) std::memcpy(to, from, bytes);
}

// The loops below are powersgd_format.h's sums (the CUDA kernels' order), written so that the
// compiler vectorises them: each vector lane runs the scalar steps of one output.

// powersgd::Dot: 8 lanes.
BYTECOMP_SIMD_KERNEL(double, DotDouble, (const float* a, const float* b, size_t len), (a, b, len)) {
  return powersgd::Dot(a, b, len);
}

// acc[j] += a[j] * scale in double: one row's step of Q = M^T P^ for every column j.
BYTECOMP_SIMD_KERNEL(void, AxpyDouble,
                     (double* __restrict acc, const float* __restrict a, float scale, size_t len),
                     (acc, a, scale, len)) {
  size_t j = 0;
  for (; j + 8 <= len; j += 8) {
    for (size_t l = 0; l < 8; ++l) acc[j + l] = powersgd::AddProduct(acc[j + l], a[j + l], scale);
  }
  for (; j < len; ++j) acc[j] = powersgd::AddProduct(acc[j], a[j], scale);
}

// out[j] = sum_k p[k] * q[k * stride + j] for j < len: one row of P Q^T
// (powersgd::ProductEntry), eight columns at a time.
BYTECOMP_SIMD_KERNEL(void, RowOfProduct,
                     (const float* __restrict p_row_values, const float* __restrict q,
                      size_t stride, size_t rank, size_t len, float* __restrict out),
                     (p_row_values, q, stride, rank, len, out)) {
  size_t j = 0;
  for (; j + 8 <= len; j += 8) {
    double v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (size_t k = 0; k < rank; ++k) {
      const float* qk = q + k * stride + j;
      for (size_t l = 0; l < 8; ++l) v[l] = powersgd::AddProduct(v[l], p_row_values[k], qk[l]);
    }
    for (size_t l = 0; l < 8; ++l) out[j + l] = static_cast<float>(v[l]);
  }
  for (; j < len; ++j) {
    double v = 0;
    for (size_t k = 0; k < rank; ++k)
      v = powersgd::AddProduct(v, p_row_values[k], q[k * stride + j]);
    out[j] = static_cast<float>(v);
  }
}

// The powersgd memory's loops (memory_math.h).
BYTECOMP_SIMD_KERNEL(void, PowerSgdCompensateAll,
                     (const float* __restrict g, const float* __restrict r, size_t n,
                      float* __restrict out),
                     (g, r, n, out)) {
  for (size_t i = 0; i < n; ++i) out[i] = PowerSgdCompensate(g[i], r[i]);
}
BYTECOMP_SIMD_KERNEL(void, ResidualUpdateAll,
                     (const float* __restrict compensated, const float* __restrict approximation,
                      size_t n, float* __restrict out),
                     (compensated, approximation, n, out)) {
  for (size_t i = 0; i < n; ++i) out[i] = ResidualUpdate(compensated[i], approximation[i]);
}

class PowerSgdCodec final : public Codec, public TwoRoundCodec {
 public:
  PowerSgdCodec(size_t rank, size_t cols) : round_(rank, cols) {}

  absl::string_view name() const override { return kName; }
  CodecProperties properties() const override {
    CodecProperties p;
    p.two_round = true;
    p.stateful = true;
    return p;
  }
  // The single payload (the largest of the three formats).
  size_t MaxEncodedBytes(size_t n) const override {
    return powersgd::SinglePayloadBytes(round_.ShapeOf(n));
  }

  // Single-payload mode, for the pull direction (the server re-encodes the round's sum) and
  // for one-worker use: this node's own round, P^ = orthonormalise(M Q), Q' = M^T P^, sent
  // together; decode = P^ Q'^T. The warm start is this instance's own Q'. Format: u32 0,
  // u32 n, rows * rank_eff f32 (P^), cols * rank_eff f32 (Q'). An instance is driven either
  // this way or through TwoRoundCodec, not both.
  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext& ctx,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    const size_t bytes = MaxEncodedBytes(n);
    if (auto s = codec_checks::CheckEncodeCall(kName, n, out.size(), bytes); !s.ok()) return s;
    std::vector<uint8_t> first(FirstRoundBytes(n));
    auto first_bytes = EncodeFirst(input, ctx, absl::MakeSpan(first));
    if (!first_bytes.ok()) return first_bytes.status();
    std::vector<float> p(powersgd::FirstRoundFloats(round_.shape()));
    CopyBytes(p.data(), first.data() + 4, 4 * p.size());
    std::vector<uint8_t> second(SecondRoundBytes(n));
    auto second_bytes = EncodeSecond(p, ctx, absl::MakeSpan(second));
    if (!second_bytes.ok()) return second_bytes.status();
    const std::vector<float>& p_hat = round_.p_hat();
    PutU32(out.data(), 0);
    PutU32(out.data() + 4, static_cast<uint32_t>(n));
    CopyBytes(out.data() + 8, p_hat.data(), 4 * p_hat.size());
    CopyBytes(out.data() + 8 + 4 * p_hat.size(), q_local_.data(), 4 * q_local_.size());
    round_.FinishSingle(q_local_);
    return bytes;
  }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                      absl::Span<float> output) override {
    const size_t n = output.size();
    const Shape sh = round_.ShapeOf(n);
    if (auto s = FormatErrorStatus(
            kName, powersgd::CheckSinglePayload(encoded.data(), encoded.size(), sh, n));
        !s.ok()) {
      return s;
    }
    std::vector<float> factors((sh.rows + sh.cols) * sh.rank);
    CopyBytes(factors.data(), encoded.data() + 8, 4 * factors.size());
    if (auto s = FormatErrorStatus(
            kName, powersgd::CheckFactors(MaxAbsBits(factors.data(), factors.size())));
        !s.ok()) {
      return s;
    }
    ProductOf(sh, n, factors.data(), factors.data() + sh.rows * sh.rank, output);
    return FormatErrorStatus(kName, powersgd::CheckProduct(MaxAbsBits(output.data(), n)));
  }

  size_t FirstRoundFloats(size_t n) const override {
    return powersgd::FirstRoundFloats(round_.ShapeOf(n));
  }
  size_t SecondRoundFloats(size_t n) const override {
    return powersgd::SecondRoundFloats(round_.ShapeOf(n));
  }

  absl::StatusOr<size_t> EncodeFirst(absl::Span<const float> input, const CodecContext& ctx,
                                     absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    const size_t bytes = FirstRoundBytes(n);
    if (auto s = codec_checks::CheckEncodeCall(kName, n, out.size(), bytes); !s.ok()) return s;
    if (auto s = CheckFinite(input, "codec 'powersgd' input"); !s.ok()) return s;
    round_.Start(n, ctx);
    const Shape& sh = round_.shape();
    const float* q = round_.q().data();
    m_.resize(sh.rows * sh.cols);
    // P_k[i] = M_row_i . Q_k, row by row: each row is copied into M (the last one zero-padded)
    // and used for its rank products while it is in cache, one pass over the input.
    std::vector<float> p(powersgd::FirstRoundFloats(sh));
    for (size_t i = 0; i < sh.rows; ++i) {
      float* row = m_.data() + i * sh.cols;
      const size_t len = std::min(sh.cols, n - i * sh.cols);
      std::copy(input.begin() + static_cast<std::ptrdiff_t>(i * sh.cols),
                input.begin() + static_cast<std::ptrdiff_t>(i * sh.cols + len), row);
      std::fill(row + len, row + sh.cols, 0.0f);
      for (size_t k = 0; k < sh.rank; ++k) {
        p[k * sh.rows + i] = static_cast<float>(DotDouble(row, q + k * sh.cols, sh.cols));
      }
    }
    if (auto s = round_.FinishFirst(MaxAbsBits(p.data(), p.size()), ctx); !s.ok()) return s;
    PutU32(out.data(), 1);
    CopyBytes(out.data() + 4, p.data(), 4 * p.size());
    return bytes;
  }

  absl::StatusOr<size_t> EncodeSecond(absl::Span<const float> summed_first, const CodecContext& ctx,
                                      absl::Span<uint8_t> out) override {
    if (auto s = round_.Orthonormalise(summed_first, ctx); !s.ok()) return s;
    const size_t bytes = SecondRoundBytes(round_.n());
    if (auto s = codec_checks::OutputFits(kName, out.size(), bytes); !s.ok()) return s;
    const Shape& sh = round_.shape();
    const std::vector<float>& p_hat = round_.p_hat();
    // Q_k = M^T P^_k, accumulated row by row in double: one pass over M, each row added to
    // every Q_k while it is in cache (each Q_k sums the rows in the same order as alone).
    std::vector<double> acc(sh.cols * sh.rank, 0.0);
    q_local_.resize(sh.cols * sh.rank);
    for (size_t i = 0; i < sh.rows; ++i) {
      const float* row = m_.data() + i * sh.cols;
      for (size_t k = 0; k < sh.rank; ++k) {
        const float p = p_hat[k * sh.rows + i];
        if (p != 0.0f) AxpyDouble(acc.data() + k * sh.cols, row, p, sh.cols);
      }
    }
    for (size_t j = 0; j < acc.size(); ++j) q_local_[j] = static_cast<float>(acc[j]);
    if (auto s = round_.FinishSecond(MaxAbsBits(q_local_.data(), q_local_.size())); !s.ok()) {
      return s;
    }
    PutU32(out.data(), 2);
    CopyBytes(out.data() + 4, q_local_.data(), 4 * q_local_.size());
    return bytes;
  }

  absl::Status LocalApproximation(absl::Span<float> output) const override {
    if (auto s = round_.CheckLocalApproximation(output.size()); !s.ok()) return s;
    ProductOf(round_.shape(), round_.n(), round_.p_hat().data(), q_local_.data(), output);
    return absl::OkStatus();
  }

  absl::Status DecodeSecond(absl::Span<const float> summed_second, const CodecContext& ctx,
                            absl::Span<float> output) override {
    if (auto s = round_.CheckDecodeSecond(summed_second, ctx, output.size()); !s.ok()) return s;
    const size_t n = round_.n();
    ProductOf(round_.shape(), n, round_.p_hat().data(), summed_second.data(), output);
    return round_.FinishDecodeSecond(summed_second, MaxAbsBits(output.data(), n));
  }

 private:
  // output = P^ q^T, the first n entries of the rows x cols product.
  static void ProductOf(const Shape& sh, size_t n, const float* p_hat, const float* q,
                        absl::Span<float> output) {
    std::vector<float> row(std::max<size_t>(sh.rank, 1));
    for (size_t i = 0; i < sh.rows; ++i) {
      for (size_t k = 0; k < sh.rank; ++k) row[k] = p_hat[k * sh.rows + i];
      const size_t begin = i * sh.cols;
      const size_t len = std::min(sh.cols, n - begin);
      RowOfProduct(row.data(), q, sh.cols, sh.rank, len, output.data() + begin);
    }
  }

  powersgd::RoundState round_;  // shape, warm start, P^, the call order
  std::vector<float> m_;        // this round's input, rows x cols, zero-padded
  std::vector<float> q_local_;  // cols x rank: M^T P^
};

// Sums the stage payloads of one round as f32 vectors (stages 1 and 2 alike; Finish returns
// the stage's float count). Single payloads (stage 0, Codec::Encode) are decoded and added:
// Finish returns n floats. One round holds one stage.
class TwoRoundSumAggregator final : public Aggregator {
 public:
  explicit TwoRoundSumAggregator(std::unique_ptr<Codec> codec)
      : codec_(std::move(codec)), two_round_(AsTwoRound(*codec_)) {}
  absl::string_view name() const override { return "two_round_sum"; }

  void Reset(size_t n) override {
    n_ = n;
    // Not zero-filled here: a stage 1 or 2 round sums only its factors (rows or cols x rank
    // floats), and zeroing n floats every round was an eighth of a PowerSGD server's time.
    sum_.clear();
    count_ = 0;
    stage_ = 0;
    started_ = true;
  }

  absl::Status Add(absl::Span<const uint8_t> encoded, const CodecContext& ctx) override {
    if (!started_) return absl::FailedPreconditionError("two_round_sum: Add before Reset");
    if (encoded.size() < 4) {
      return MalformedError(kName, absl::StrCat(encoded.size(), " bytes, no stage field"));
    }
    const uint32_t stage = GetU32(encoded.data());
    if (stage > 2) return MalformedError(kName, absl::StrCat("stage ", stage));
    if (count_ > 0 && stage != stage_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "two_round_sum: stage ", stage, " payload added to a stage ", stage_, " round"));
    }
    if (stage == 0) {  // single payloads: decode and add, n floats
      if (count_ == 0) sum_.assign(n_, 0.0f);
      if (auto s = CheckRound(ctx); !s.ok()) return s;
      if (auto s = codec_->DecodeAdd(encoded, ctx, absl::MakeSpan(sum_)); !s.ok()) return s;
      if (count_ == 0) first_ctx_ = ctx;
      stage_ = 0;
      ++count_;
      return absl::OkStatus();
    }
    const size_t floats =
        stage == 1 ? two_round_->FirstRoundFloats(n_) : two_round_->SecondRoundFloats(n_);
    if (encoded.size() != 4 + 4 * floats) {
      return MalformedError(
          kName, absl::StrCat("stage ", stage, " payload of ", encoded.size(), " bytes for ", n_,
                              " elements (expected ", 4 + 4 * floats, ")"));
    }
    if (auto s = CheckRound(ctx); !s.ok()) return s;
    scratch_.resize(floats);
    CopyBytes(scratch_.data(), encoded.data() + 4, 4 * floats);
    if (auto s = CheckFinite(scratch_, "two_round_sum payload"); !s.ok()) return s;
    if (count_ == 0) {
      sum_.assign(floats, 0.0f);
      stage_ = stage;
      first_ctx_ = ctx;
    }
    for (size_t i = 0; i < floats; ++i) sum_[i] += scratch_[i];
    ++count_;
    return absl::OkStatus();
  }

  absl::StatusOr<absl::Span<const float>> Finish() override {
    if (!started_) return absl::FailedPreconditionError("two_round_sum: Finish before Reset");
    if (count_ == 0) sum_.assign(n_, 0.0f);  // zeros until a payload is added, as every Finish
    return absl::MakeConstSpan(sum_);
  }

  size_t count() const override { return count_; }

  absl::Status CheckRound(const CodecContext& ctx) const {
    if (count_ == 0 || (ctx.key == first_ctx_.key && ctx.round == first_ctx_.round &&
                        ctx.seed == first_ctx_.seed)) {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat("two_round_sum: payload for key ", ctx.key, " round ", ctx.round,
                     " added to the round of key ", first_ctx_.key, " round ", first_ctx_.round));
  }

  // The stage of the payloads added since Reset (0 if none).
  uint32_t stage() const { return stage_; }

 private:
  std::unique_ptr<Codec> codec_;
  TwoRoundCodec* two_round_;
  size_t n_ = 0;
  std::vector<float> sum_;
  std::vector<float> scratch_;
  size_t count_ = 0;
  uint32_t stage_ = 0;
  bool started_ = false;
  CodecContext first_ctx_;
};

// PowerSGD's error feedback: compensated = input + residual; residual = compensated - decoded,
// where decoded is the worker's LocalApproximation (two_round.h), not the decoded sum.
class PowerSgdMemory final : public Memory {
 public:
  absl::string_view name() const override { return "powersgd"; }
  absl::Status Compensate(absl::Span<const float> input, const CodecContext&,
                          absl::Span<float> compensated) override {
    const size_t n = input.size();
    if (compensated.size() != n || (!residual_.empty() && residual_.size() != n)) {
      return absl::InvalidArgumentError(absl::StrCat("memory 'powersgd': input has ", n,
                                                     " elements, compensated ", compensated.size(),
                                                     ", state ", residual_.size()));
    }
    if (residual_.empty()) {
      CopyBytes(compensated.data(), input.data(), n * sizeof(float));
    } else {
      PowerSgdCompensateAll(input.data(), residual_.data(), n, compensated.data());
    }
    return absl::OkStatus();
  }
  absl::Status Update(absl::Span<const float> compensated, absl::Span<const float> decoded,
                      const CodecContext&) override {
    if (decoded.size() != compensated.size()) {
      return absl::InvalidArgumentError(
          "memory 'powersgd': decoded and compensated differ in size");
    }
    residual_.resize(compensated.size());
    ResidualUpdateAll(compensated.data(), decoded.data(), compensated.size(), residual_.data());
    return absl::OkStatus();
  }
  void Reset() override { residual_.clear(); }
  std::vector<std::vector<float>*> StateVectors() override { return {&residual_}; }

 private:
  std::vector<float> residual_;
};

}  // namespace

void RegisterLowRankCodecs(CodecRegistry& registry) {
  CodecSpec spec;
  spec.name = std::string(kName);
  spec.summary = "low-rank P and Q, two aggregation rounds, warm-started Q (two_round.h)";
  spec.params = {
      param_specs::IntParam("rank", 1, "rank of the approximation, in [1, 64]", 1, 64),
      param_specs::IntParam("cols", 0,
                            "row length of the matrix a partition is read into; the nodes set "
                            "it to the layer's (shape[1] * shape[2] * ...) when the tensor was "
                            "declared with its shape; 0: a near-square matrix",
                            0, int64_t{1} << 40)};
  spec.factory = [](const CodecParams& params) -> absl::StatusOr<std::unique_ptr<Codec>> {
    ParamReader r(params);
    const int64_t rank = r.Int("rank");
    const int64_t cols = r.Int("cols");
    if (!r.ok()) return r.status();
    return std::unique_ptr<Codec>(
        new PowerSgdCodec(static_cast<size_t>(rank), static_cast<size_t>(cols)));
  };
  spec.aggregator_factory =
      [](std::unique_ptr<Codec> codec) -> absl::StatusOr<std::unique_ptr<Aggregator>> {
    if (AsTwoRound(*codec) == nullptr) {
      return absl::InvalidArgumentError("two_round_sum needs a two-round codec");
    }
    return std::unique_ptr<Aggregator>(new TwoRoundSumAggregator(std::move(codec)));
  };
  spec.facts.two_round = true;  // P, then Q; with its memory, compensated
  // compress/cuda/src/lowrank_kernels.cu, with the powersgd memory fused.
  spec.facts.gpu_kernel = true;
  spec.facts.gpu_memories = {MemoryKind::kPowerSgd};
  MustRegister(registry, std::move(spec));
}

void RegisterLowRankMemories(MemoryRegistry& registry) {
  MustRegisterMemory(registry,
                     {.name = "powersgd",
                      .summary = "PowerSGD residual error feedback: residual = compensated - "
                                 "the worker's local low-rank approximation",
                      .kind = MemoryKind::kPowerSgd,
                      .params = {},
                      .factory = [](const CodecParams&) -> absl::StatusOr<std::unique_ptr<Memory>> {
                        return std::unique_ptr<Memory>(new PowerSgdMemory());
                      }});
}

}  // namespace bytecomp::compress
