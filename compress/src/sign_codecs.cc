// The sign codecs: signsgd, efsignsgd, signum, onebit, and the majority-vote aggregator of
// signsgd and signum (the efsignsgd memory is in sign_memory.cc). Their payloads are
// format/sign_format.h's, shared with the CUDA codecs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <new>
#include <vector>
#include "exact_float_math.h"  // first: see there

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/aggregator.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/sign_format.h"
#include "bytecomp/compress/params.h"
#include "bytecomp/compress/registry.h"
#include "codec_checks.h"
#include "param_specs.h"
#include "sign_bitpack.h"

namespace bytecomp::compress {
namespace {

using sign::SignValues;

// Cache-line aligned storage for a std::vector.
template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <typename U>
  explicit CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64)));
  }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  bool operator==(const CacheLineAllocator&) const { return true; }
};

bool SumsFinite(const SignSums& sums) {
  return std::isfinite(sums.non_negative) && std::isfinite(sums.negative);
}

// The four codecs share the payload: u32 n, `values` f32 header values, the sign bits.
class SignCodec : public Codec {
 public:
  explicit SignCodec(int values) : values_(values) {}

  size_t MaxEncodedBytes(size_t n) const override { return sign::PayloadBytes(values_, n); }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                      absl::Span<float> output) override {
    return Unpack<false>(encoded, output);
  }
  absl::Status DecodeAdd(absl::Span<const uint8_t> encoded, const CodecContext&,
                         absl::Span<float> accumulator) override {
    return Unpack<true>(encoded, accumulator);
  }

 protected:
  // The encode call's checks (buffer, size). The finite check rides along with the packing
  // pass (PackSignBits' result, or non-finite sums).
  absl::Status CheckEncode(absl::Span<const float> input, absl::Span<uint8_t> out) const {
    return codec_checks::CheckEncodeCall(*this, input.size(), out.size());
  }
  uint8_t* Bits(absl::Span<uint8_t> out) const { return out.data() + sign::HeaderBytes(values_); }
  absl::Status NonFinite(absl::Span<const float> input) const {
    return NonFiniteError(input, codec_checks::InputWhat(name()));
  }

 private:
  const uint8_t* EncodedBits(absl::Span<const uint8_t> encoded) const {
    return encoded.data() + sign::HeaderBytes(values_);
  }

  // out = (kAdd: +=) the decoded payload, once it is validated.
  template <bool kAdd>
  absl::Status Unpack(absl::Span<const uint8_t> encoded, absl::Span<float> out) const {
    auto values = Validate(encoded, out.size());
    if (!values.ok()) return values.status();
    const uint8_t* bits = EncodedBits(encoded);
    if constexpr (kAdd) {
      AddUnpackedSignBits(bits, out.size(), values->clear, values->set, out.data());
    } else {
      UnpackSignBits(bits, out.size(), values->clear, values->set, out.data());
    }
    return absl::OkStatus();
  }

  // Size, count, header values, padding; returns what the bits decode to.
  absl::StatusOr<SignValues> Validate(absl::Span<const uint8_t> encoded, size_t n) const {
    FormatError e = sign::CheckHeader(encoded.data(), encoded.size(), n, values_);
    if (e.ok()) e = sign::CheckPadding(EncodedBits(encoded), n);
    if (!e.ok()) return FormatErrorStatus(name(), e);
    return sign::ReadValues(encoded.data(), values_);
  }

  int values_;
};

// signsgd and signum share the payload (no header values) and the majority vote; signum adds
// momentum before taking signs.
class PlainSignCodec : public SignCodec {
 public:
  PlainSignCodec() : SignCodec(0) {}
  CodecProperties properties() const override {
    CodecProperties p;
    p.majority_vote = true;
    return p;
  }
};

class SignSgdCodec final : public PlainSignCodec {
 public:
  absl::string_view name() const override { return "signsgd"; }
  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext&,
                                absl::Span<uint8_t> out) override {
    if (auto s = CheckEncode(input, out); !s.ok()) return s;
    sign::WriteHeader(out.data(), static_cast<uint32_t>(input.size()), 0, SignValues());
    if (!PackSignBits(input.data(), input.size(), Bits(out))) return NonFinite(input);
    return MaxEncodedBytes(input.size());
  }
};

// GRACE's signum: m = (1 - momentum) * g + momentum * m_prev (m = g in the first round), then
// the signs of m. The momentum vector is this instance's state (one instance per partition).
class SignumCodec final : public PlainSignCodec {
 public:
  explicit SignumCodec(float momentum) : momentum_(momentum) {}
  absl::string_view name() const override { return "signum"; }
  CodecProperties properties() const override {
    CodecProperties p = PlainSignCodec::properties();
    p.stateful = true;
    return p;
  }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext&,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    if (auto s = CheckEncode(input, out); !s.ok()) return s;
    sign::WriteHeader(out.data(), static_cast<uint32_t>(n), 0, SignValues());
    // Another length means another partition layout (a new strategy): momentum restarts.
    const bool restart = momentum_vector_.size() != n;
    if (restart) {
      if (!PackSignBits(input.data(), n, Bits(out))) return NonFinite(input);
    } else {
      // The new momentum goes to a second buffer in the same pass that packs its signs; the
      // state changes (a swap) only when the whole input was finite. Finite momentum <=>
      // finite input: (1 - beta) > 0 times a NaN or Inf stays one. A momentum larger than
      // the caches is written around them (non-temporal stores), sparing the read of the
      // buffer's old lines.
      next_momentum_.resize(n);
      const bool stream = n * sizeof(float) >= kStreamBytes;
      const bool finite =
          BlendAndPackSignBits(input.data(), momentum_vector_.data(), n, 1.0f - momentum_,
                               momentum_, stream, next_momentum_.data(), Bits(out));
      if (!finite) return NonFinite(input);
    }
    if (restart) {
      momentum_vector_.assign(input.begin(), input.end());
    } else {
      momentum_vector_.swap(next_momentum_);
    }
    return MaxEncodedBytes(n);
  }

 private:
  // Momentum vectors from this size up are written with non-temporal stores.
  static constexpr size_t kStreamBytes = size_t{16} << 20;

  float momentum_;
  // 64-byte aligned: the non-temporal stores need 32.
  std::vector<float, CacheLineAllocator<float>> momentum_vector_;
  std::vector<float, CacheLineAllocator<float>> next_momentum_;
};

// EF-SignSGD's compressor: mean magnitude and signs. Its error feedback is the efsignsgd
// memory (sign_memory.cc).
class EfSignSgdCodec final : public SignCodec {
 public:
  EfSignSgdCodec() : SignCodec(1) {}
  absl::string_view name() const override { return "efsignsgd"; }
  CodecProperties properties() const override { return {}; }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext&,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    if (auto s = CheckEncode(input, out); !s.ok()) return s;
    const SignSums sums = PackSignBitsWithSums(input.data(), n, Bits(out));
    if (!SumsFinite(sums)) return NonFinite(input);
    const float scale = sign::EfSignScale(sums, n);
    sign::WriteHeader(out.data(), static_cast<uint32_t>(n), 1, SignValues{scale, -scale});
    return MaxEncodedBytes(n);
  }
};

class OnebitCodec final : public SignCodec {
 public:
  explicit OnebitCodec(sign::OnebitScaling scaling) : SignCodec(2), scaling_(scaling) {}
  absl::string_view name() const override { return "onebit"; }
  CodecProperties properties() const override { return {}; }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext&,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    if (auto s = CheckEncode(input, out); !s.ok()) return s;
    SignValues values;  // +-1: scaling none
    if (scaling_ == sign::OnebitScaling::kNone) {
      if (!PackSignBits(input.data(), n, Bits(out))) return NonFinite(input);
    } else {
      const SignSums sums = PackSignBitsWithSums(input.data(), n, Bits(out));
      if (!SumsFinite(sums)) return NonFinite(input);
      values = sign::OnebitValues(scaling_, sums, n);
    }
    sign::WriteHeader(out.data(), static_cast<uint32_t>(n), 2, values);
    return MaxEncodedBytes(n);
  }

 private:
  sign::OnebitScaling scaling_;
};

// Majority vote (signsgd, signum): each push adds its +-1 votes; Finish returns
// count * sign(vote sum), ties to +1 (GRACE's `sum >= 0`). The result has the scale of a sum of
// `count` decoded pushes that all agree with the majority, so a caller that divides the sum by
// the worker count gets +-1 as with any other codec.
class MajorityVoteAggregator final : public Aggregator {
 public:
  explicit MajorityVoteAggregator(std::unique_ptr<Codec> codec) : codec_(std::move(codec)) {}
  absl::string_view name() const override { return "majority_vote"; }

  void Reset(size_t n) override {
    votes_.assign(n, 0.0f);
    result_.resize(n);
    count_ = 0;
    started_ = true;
  }

  absl::Status Add(absl::Span<const uint8_t> encoded, const CodecContext& ctx) override {
    if (!started_) return absl::FailedPreconditionError("majority_vote: Add before Reset");
    if (count_ > 0 && (ctx.key != first_ctx_.key || ctx.round != first_ctx_.round ||
                       ctx.seed != first_ctx_.seed)) {
      return absl::InvalidArgumentError(
          absl::StrCat("majority_vote: payload for key ", ctx.key, " round ", ctx.round, " seed ",
                       ctx.seed, " added to the round of key ", first_ctx_.key, " round ",
                       first_ctx_.round, " seed ", first_ctx_.seed));
    }
    // The codec's DecodeAdd validates the whole payload before adding anything.
    if (auto s = codec_->DecodeAdd(encoded, ctx, absl::MakeSpan(votes_)); !s.ok()) return s;
    if (count_ == 0) first_ctx_ = ctx;
    ++count_;
    return absl::OkStatus();
  }

  absl::StatusOr<absl::Span<const float>> Finish() override {
    if (!started_) return absl::FailedPreconditionError("majority_vote: Finish before Reset");
    const float weight = static_cast<float>(count_);
    for (size_t i = 0; i < votes_.size(); ++i) {
      result_[i] = count_ == 0 ? 0.0f : weight * MajoritySign(votes_[i]);
    }
    return absl::MakeConstSpan(result_);
  }

  size_t count() const override { return count_; }

 private:
  std::unique_ptr<Codec> codec_;
  std::vector<float> votes_;
  std::vector<float> result_;
  size_t count_ = 0;
  bool started_ = false;
  CodecContext first_ctx_;
};

}  // namespace

void RegisterSignCodecs(CodecRegistry& registry) {
  auto majority = [](std::unique_ptr<Codec> codec) -> absl::StatusOr<std::unique_ptr<Aggregator>> {
    return std::unique_ptr<Aggregator>(new MajorityVoteAggregator(std::move(codec)));
  };
  // Every sign codec has GPU kernels (compress/cuda sign_kernels.cu), coded element by element.
  auto sign_facts = [](std::vector<MemoryKind> gpu_memories) {
    CodecFacts facts;
    facts.gpu_kernel = true;
    facts.gpu_memories = std::move(gpu_memories);
    facts.encode_target = EncodeSpeedTarget::kElementwise;
    return facts;
  };
  {
    CodecSpec spec = ParameterlessSpec<SignSgdCodec>(
        "signsgd", "signs, 1 bit each; the server takes a majority vote");
    spec.aggregator_factory = majority;
    spec.facts = sign_facts({MemoryKind::kResidual});
    MustRegister(registry, std::move(spec));
  }
  {
    CodecSpec spec = ParameterlessSpec<EfSignSgdCodec>(
        "efsignsgd", "mean magnitude and signs, 1 bit each; use with the efsignsgd memory (lr)");
    spec.facts = sign_facts({MemoryKind::kResidual, MemoryKind::kEfSignSgd});
    MustRegister(registry, std::move(spec));
  }
  {
    CodecSpec spec;
    spec.name = "signum";
    spec.summary = "signs of a momentum-smoothed gradient, 1 bit each; majority vote";
    CodecParamSpec momentum = param_specs::DoubleParam(
        "momentum", "0.9", "momentum factor, in [0, 1)", 0.0, /*min_exclusive=*/false);
    momentum.max_value = 1.0;
    momentum.max_exclusive = true;
    spec.params.push_back(momentum);
    spec.factory = [](const CodecParams& params) -> absl::StatusOr<std::unique_ptr<Codec>> {
      ParamReader r(params);
      const double momentum = r.Double("momentum");
      if (!r.ok()) return r.status();
      return std::unique_ptr<Codec>(new SignumCodec(static_cast<float>(momentum)));
    };
    spec.aggregator_factory = majority;
    spec.facts = sign_facts({});  // its momentum is fused; no memory besides
    MustRegister(registry, std::move(spec));
  }
  {
    CodecSpec spec;
    spec.name = "onebit";
    spec.summary = "sign mask and two values (the means of the non-negative and negative parts)";
    spec.params.push_back(param_specs::ChoiceParam(
        "scaling", "means",
        "means: mean of each sign's part (GRACE); l1: +-mean |x| (BytePS scaling); none: +-1",
        {"means", "l1", "none"}));
    spec.factory = [](const CodecParams& params) -> absl::StatusOr<std::unique_ptr<Codec>> {
      ParamReader r(params);
      const sign::OnebitScaling scaling = sign::OnebitScalingNamed(r.String("scaling"));
      if (!r.ok()) return r.status();
      return std::unique_ptr<Codec>(new OnebitCodec(scaling));
    };
    spec.facts = sign_facts({MemoryKind::kResidual});
    MustRegister(registry, std::move(spec));
  }
}

}  // namespace bytecomp::compress
