// The sign codecs: signsgd, efsignsgd, signum, onebit, and the majority-vote aggregator of
// signsgd and signum (the efsignsgd memory is in sign_memory.cc).
//
// Wire formats (little-endian). Each starts with u32 n, the element count, which Decode checks
// against the output length (the padded bit stream alone cannot tell n from n - 1).
//   signsgd, signum  u32 n, then ceil(n/8) bytes of sign bits: bit 1 = x < 0 (decoded -1),
//                    bit 0 = x >= 0 (decoded +1); element i is bit i % 8 of byte i / 8; the
//                    padding bits of the last byte are 0. Size: 4 + ceil(n/8).
//   efsignsgd        u32 n, f32 scale = mean |x| (sum in double), then the sign bits as
//                    above; decoded: +-scale. Size: 8 + ceil(n/8).
//   onebit           u32 n, f32 value of bit 0, f32 value of bit 1, then the sign bits.
//                    scaling=means (GRACE): the means of the non-negative and of the negative
//                    elements (0 for an empty part); scaling=l1 (BytePS with scaling): +-mean
//                    |x|; scaling=none (BytePS without scaling): +-1. Size: 12 + ceil(n/8).
// Decode rejects a payload of the wrong size, non-zero padding bits, and non-finite or
// wrongly signed header values.
// elementwise.h needs fp-contract off for identical rounding in every variant; -O2 keeps
// GCC 12 to its "very cheap" vectoriser cost model, which refuses the codec loops; and
// no-trapping-math (results unchanged) lets it if-convert selects around divisions.
#pragma GCC optimize("fp-contract=off", "vect-cost-model=dynamic", "no-trapping-math")
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/aggregator.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/params.h"
#include "bytecomp/compress/registry.h"
#include "quant_util.h"
#include "sign_bitpack.h"

namespace bytecomp::compress {
namespace {

using codec_checks::HeaderFloatOk;
using codec_checks::InputWhat;
using codec_checks::OutputFits;
using codec_checks::CheckCount;
using codec_checks::PayloadSizeIs;

// Validates the encode call (buffer, size). The finite check rides along with the packing
// pass (PackSignBits' result, or non-finite sums), except signum's, which must check its input
// before it enters the momentum.
absl::Status CheckEncode(absl::string_view codec, absl::Span<const float> input,
                         absl::Span<uint8_t> out, size_t need) {
  if (auto s = OutputFits(codec, out.size(), need); !s.ok()) return s;
  return codec_checks::InputSizeSupported(codec, input.size());
}

bool SumsFinite(const SignSums& sums) {
  return std::isfinite(sums.non_negative) && std::isfinite(sums.negative);
}

absl::Status CheckSignBits(absl::string_view codec, const uint8_t* bits, size_t n) {
  if (SignPaddingIsZero(bits, n)) return absl::OkStatus();
  return MalformedError(codec, absl::StrCat("padding bits after element ", n, " are not zero"));
}

// signsgd and signum share the payload; signum adds momentum before taking signs.
class PlainSignCodec : public Codec {
 public:
  CodecProperties properties() const override {
    CodecProperties p;
    p.majority_vote = true;
    return p;
  }
  size_t MaxEncodedBytes(size_t n) const override { return 4 + SignBytes(n); }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                      absl::Span<float> output) override {
    if (auto s = Validate(encoded, output.size()); !s.ok()) return s;
    UnpackSignBits(encoded.data() + 4, output.size(), 1.0f, -1.0f, output.data());
    return absl::OkStatus();
  }

  absl::Status DecodeAdd(absl::Span<const uint8_t> encoded, const CodecContext&,
                         absl::Span<float> accumulator) override {
    if (auto s = Validate(encoded, accumulator.size()); !s.ok()) return s;
    AddUnpackedSignBits(encoded.data() + 4, accumulator.size(), 1.0f, -1.0f, accumulator.data());
    return absl::OkStatus();
  }

 protected:
  absl::Status Validate(absl::Span<const uint8_t> encoded, size_t n) const {
    if (auto s = PayloadSizeIs(name(), encoded.size(), 4 + SignBytes(n), n); !s.ok()) return s;
    if (auto s = CheckCount(name(), encoded, n); !s.ok()) return s;
    return CheckSignBits(name(), encoded.data() + 4, n);
  }
};

class SignSgdCodec final : public PlainSignCodec {
 public:
  absl::string_view name() const override { return "signsgd"; }
  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext&,
                                absl::Span<uint8_t> out) override {
    const size_t bytes = 4 + SignBytes(input.size());
    if (auto s = CheckEncode(name(), input, out, bytes); !s.ok()) return s;
    PutU32(out.data(), static_cast<uint32_t>(input.size()));
    if (!PackSignBits(input.data(), input.size(), out.data() + 4)) {
      return NonFiniteError(input, InputWhat(name()));
    }
    return bytes;
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
    const size_t bytes = 4 + SignBytes(n);
    if (auto s = CheckEncode(name(), input, out, bytes); !s.ok()) return s;
    PutU32(out.data(), static_cast<uint32_t>(n));
    // Another length means another partition layout (a new strategy): momentum restarts.
    const bool restart = momentum_vector_.size() != n;
    if (restart) {
      if (!PackSignBits(input.data(), n, out.data() + 4)) {
        return NonFiniteError(input, InputWhat(name()));
      }
    } else {
      // The new momentum goes to a second buffer in L1-sized blocks, each packed right after
      // it is blended; the state changes (a swap) only when the whole input was finite.
      // Finite momentum <=> finite input: (1 - beta) > 0 times a NaN or Inf stays one.
      next_momentum_.resize(n);
      constexpr size_t kBlock = 2048;  // a multiple of 8: blocks start on a byte
      bool finite = true;
      for (size_t begin = 0; begin < n; begin += kBlock) {
        const size_t len = std::min(kBlock, n - begin);
        Blend(next_momentum_.data() + begin, input.data() + begin,
              momentum_vector_.data() + begin, len, momentum_);
        finite &= PackSignBits(next_momentum_.data() + begin, len, out.data() + 4 + begin / 8);
      }
      if (!finite) return NonFiniteError(input, InputWhat(name()));
    }
    if (restart) {
      momentum_vector_.assign(input.begin(), input.end());
    } else {
      momentum_vector_.swap(next_momentum_);
    }
    return bytes;
  }

 private:
  // next = (1 - beta) * g + beta * m
  __attribute__((target_clones("avx2", "default"))) static void Blend(
      float* __restrict next, const float* __restrict g, const float* __restrict m, size_t n,
      float beta) {
    const float keep = 1.0f - beta;
    for (size_t i = 0; i < n; ++i) next[i] = keep * g[i] + beta * m[i];
  }

  float momentum_;
  std::vector<float> momentum_vector_;
  std::vector<float> next_momentum_;
};

// EF-SignSGD's compressor: mean magnitude and signs. Its error feedback is the efsignsgd
// memory below.
class EfSignSgdCodec final : public Codec {
 public:
  absl::string_view name() const override { return "efsignsgd"; }
  CodecProperties properties() const override { return {}; }
  size_t MaxEncodedBytes(size_t n) const override { return 8 + SignBytes(n); }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext&,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    const size_t bytes = 8 + SignBytes(n);
    if (auto s = CheckEncode(name(), input, out, bytes); !s.ok()) return s;
    const SignSums sums = PackSignBitsWithSums(input.data(), n, out.data() + 8);
    if (!SumsFinite(sums)) return NonFiniteError(input, InputWhat(name()));
    const float scale =
        n == 0 ? 0.0f : static_cast<float>((sums.non_negative - sums.negative) / n);
    PutU32(out.data(), static_cast<uint32_t>(n));
    PutF32(out.data() + 4, scale);
    return bytes;
  }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                      absl::Span<float> output) override {
    auto scale = Validate(encoded, output.size());
    if (!scale.ok()) return scale.status();
    UnpackSignBits(encoded.data() + 8, output.size(), *scale, -*scale, output.data());
    return absl::OkStatus();
  }

  absl::Status DecodeAdd(absl::Span<const uint8_t> encoded, const CodecContext&,
                         absl::Span<float> accumulator) override {
    auto scale = Validate(encoded, accumulator.size());
    if (!scale.ok()) return scale.status();
    AddUnpackedSignBits(encoded.data() + 8, accumulator.size(), *scale, -*scale,
                        accumulator.data());
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<float> Validate(absl::Span<const uint8_t> encoded, size_t n) const {
    if (auto s = PayloadSizeIs(name(), encoded.size(), 8 + SignBytes(n), n); !s.ok()) return s;
    if (auto s = CheckCount(name(), encoded, n); !s.ok()) return s;
    const float scale = GetF32(encoded.data() + 4);
    if (auto s = HeaderFloatOk(name(), scale, "scale", true); !s.ok()) return s;
    if (auto s = CheckSignBits(name(), encoded.data() + 8, n); !s.ok()) return s;
    return scale;
  }
};

enum class OnebitScaling { kMeans, kL1, kNone };

class OnebitCodec final : public Codec {
 public:
  explicit OnebitCodec(OnebitScaling scaling) : scaling_(scaling) {}
  absl::string_view name() const override { return "onebit"; }
  CodecProperties properties() const override { return {}; }
  size_t MaxEncodedBytes(size_t n) const override { return 12 + SignBytes(n); }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext&,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    const size_t bytes = 12 + SignBytes(n);
    if (auto s = CheckEncode(name(), input, out, bytes); !s.ok()) return s;
    float clear_value = 1.0f, set_value = -1.0f;
    if (scaling_ == OnebitScaling::kNone) {
      if (!PackSignBits(input.data(), n, out.data() + 12)) {
        return NonFiniteError(input, InputWhat(name()));
      }
    } else {
      const SignSums sums = PackSignBitsWithSums(input.data(), n, out.data() + 12);
      if (!SumsFinite(sums)) return NonFiniteError(input, InputWhat(name()));
      if (scaling_ == OnebitScaling::kMeans) {
        const size_t non_negative_count = n - sums.negative_count;
        clear_value = non_negative_count == 0
                          ? 0.0f
                          : static_cast<float>(sums.non_negative / non_negative_count);
        set_value = sums.negative_count == 0
                        ? 0.0f
                        : static_cast<float>(sums.negative / sums.negative_count);
      } else {
        clear_value = n == 0 ? 0.0f : static_cast<float>((sums.non_negative - sums.negative) / n);
        set_value = -clear_value;
      }
    }
    PutU32(out.data(), static_cast<uint32_t>(n));
    PutF32(out.data() + 4, clear_value);
    PutF32(out.data() + 8, set_value);
    return bytes;
  }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                      absl::Span<float> output) override {
    if (auto s = Validate(encoded, output.size()); !s.ok()) return s;
    UnpackSignBits(encoded.data() + 12, output.size(), GetF32(encoded.data() + 4),
                   GetF32(encoded.data() + 8), output.data());
    return absl::OkStatus();
  }

  absl::Status DecodeAdd(absl::Span<const uint8_t> encoded, const CodecContext&,
                         absl::Span<float> accumulator) override {
    if (auto s = Validate(encoded, accumulator.size()); !s.ok()) return s;
    AddUnpackedSignBits(encoded.data() + 12, accumulator.size(), GetF32(encoded.data() + 4),
                        GetF32(encoded.data() + 8), accumulator.data());
    return absl::OkStatus();
  }

 private:
  absl::Status Validate(absl::Span<const uint8_t> encoded, size_t n) const {
    if (auto s = PayloadSizeIs(name(), encoded.size(), 12 + SignBytes(n), n); !s.ok()) return s;
    if (auto s = CheckCount(name(), encoded, n); !s.ok()) return s;
    const float clear_value = GetF32(encoded.data() + 4);
    const float set_value = GetF32(encoded.data() + 8);
    if (auto s = HeaderFloatOk(name(), clear_value, "value of non-negative elements", true);
        !s.ok()) {
      return s;
    }
    if (auto s = HeaderFloatOk(name(), -set_value, "value of negative elements (negated)", true);
        !s.ok()) {
      return s;
    }
    return CheckSignBits(name(), encoded.data() + 12, n);
  }

  OnebitScaling scaling_;
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
      return absl::InvalidArgumentError(absl::StrCat(
          "majority_vote: payload for key ", ctx.key, " round ", ctx.round, " seed ", ctx.seed,
          " added to the round of key ", first_ctx_.key, " round ", first_ctx_.round, " seed ",
          first_ctx_.seed));
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
  auto majority = [](std::unique_ptr<Codec> codec)
      -> absl::StatusOr<std::unique_ptr<Aggregator>> {
    return std::unique_ptr<Aggregator>(new MajorityVoteAggregator(std::move(codec)));
  };
  {
    CodecSpec spec = ParameterlessSpec<SignSgdCodec>(
        "signsgd", "signs, 1 bit each; the server takes a majority vote");
    spec.aggregator_factory = majority;
    MustRegister(registry, std::move(spec));
  }
  MustRegister(registry, ParameterlessSpec<EfSignSgdCodec>(
      "efsignsgd", "mean magnitude and signs, 1 bit each; use with the efsignsgd memory (lr)"));
  {
    CodecSpec spec;
    spec.name = "signum";
    spec.summary = "signs of a momentum-smoothed gradient, 1 bit each; majority vote";
    CodecParamSpec momentum = codec_checks::DoubleParam(
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
    MustRegister(registry, std::move(spec));
  }
  {
    CodecSpec spec;
    spec.name = "onebit";
    spec.summary = "sign mask and two values (the means of the non-negative and negative parts)";
    spec.params.push_back(codec_checks::ChoiceParam(
        "scaling", "means",
        "means: mean of each sign's part (GRACE); l1: +-mean |x| (BytePS scaling); none: +-1",
        {"means", "l1", "none"}));
    spec.factory = [](const CodecParams& params) -> absl::StatusOr<std::unique_ptr<Codec>> {
      ParamReader r(params);
      const std::string scaling = r.String("scaling");
      if (!r.ok()) return r.status();
      const OnebitScaling mode = scaling == "l1"     ? OnebitScaling::kL1
                                 : scaling == "none" ? OnebitScaling::kNone
                                                     : OnebitScaling::kMeans;
      return std::unique_ptr<Codec>(new OnebitCodec(mode));
    };
    MustRegister(registry, std::move(spec));
  }
}

}  // namespace bytecomp::compress
