// Server-side aggregators (aggregator.h).
#include "bytecomp/compress/aggregator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/registry.h"

namespace bytecomp::compress {

absl::Status CheckSameRound(const CodecContext& first, const CodecContext& ctx) {
  if (first.key == ctx.key && first.round == ctx.round && first.seed == ctx.seed) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "payload for key ", ctx.key, " round ", ctx.round, " seed ", ctx.seed,
      " added to an aggregation of key ", first.key, " round ", first.round, " seed ", first.seed));
}

absl::StatusOr<absl::Span<const uint8_t>> Aggregator::EncodedSum() {
  return absl::UnimplementedError(
      absl::StrCat("aggregator '", name(), "' has no encoded sum; Finish gives the fp32 sum"));
}

namespace {

// State shared by the generic aggregators: the round's length, the first payload's context,
// the count.
class AggregatorBase : public Aggregator {
 public:
  explicit AggregatorBase(std::unique_ptr<Codec> codec) : codec_(std::move(codec)) {}

  void Reset(size_t n) override {
    n_ = n;
    sum_.assign(n, 0.0f);
    count_ = 0;
    started_ = true;
  }
  size_t count() const override { return count_; }

 protected:
  // Checks Reset and the round; remembers the first context.
  absl::Status Admit(const CodecContext& ctx) {
    if (!started_) return absl::FailedPreconditionError("Aggregator::Add before Reset");
    if (count_ > 0) return CheckSameRound(first_, ctx);
    first_ = ctx;
    return absl::OkStatus();
  }

  std::unique_ptr<Codec> codec_;
  size_t n_ = 0;
  std::vector<float> sum_;
  CodecContext first_;
  size_t count_ = 0;
  bool started_ = false;
};

// decode_add / sparse_add: Codec::DecodeAdd validates the whole payload before it adds (the
// sparse codecs scatter-add; the default decodes into a scratch buffer first).
class DecodeAddAggregator final : public AggregatorBase {
 public:
  using AggregatorBase::AggregatorBase;
  absl::string_view name() const override {
    return codec_->properties().sparse ? "sparse_add" : "decode_add";
  }
  absl::Status Add(absl::Span<const uint8_t> encoded, const CodecContext& ctx) override {
    if (auto s = Admit(ctx); !s.ok()) return s;
    if (auto s = codec_->DecodeAdd(encoded, ctx, absl::MakeSpan(sum_)); !s.ok()) return s;
    ++count_;
    return absl::OkStatus();
  }
  absl::StatusOr<absl::Span<const float>> Finish() override {
    if (!started_) return absl::FailedPreconditionError("Aggregator::Finish before Reset");
    return absl::MakeConstSpan(sum_);
  }
};

// summed_values: the payloads' dense value vectors add up in fp32 without decoding; one
// expansion at the end (randomk: one scatter of k values instead of one per worker).
class SummedValuesAggregator final : public AggregatorBase {
 public:
  using AggregatorBase::AggregatorBase;
  absl::string_view name() const override { return "summed_values"; }

  void Reset(size_t n) override {
    AggregatorBase::Reset(n);
    values_.clear();
    expanded_ = false;
  }

  absl::Status Add(absl::Span<const uint8_t> encoded, const CodecContext& ctx) override {
    if (auto s = Admit(ctx); !s.ok()) return s;
    if (count_ == 0) values_.assign(codec_->SummedLength(n_, ctx), 0.0f);
    if (auto s = codec_->AddEncodedValues(encoded, ctx, n_, absl::MakeSpan(values_)); !s.ok()) {
      return s;
    }
    ++count_;
    expanded_ = false;
    return absl::OkStatus();
  }

  absl::StatusOr<absl::Span<const float>> Finish() override {
    if (!started_) return absl::FailedPreconditionError("Aggregator::Finish before Reset");
    if (count_ > 0 && !expanded_) {
      if (auto s = codec_->ExpandSum(values_, first_, absl::MakeSpan(sum_)); !s.ok()) return s;
      expanded_ = true;
    }
    return absl::MakeConstSpan(sum_);
  }

 private:
  std::vector<float> values_;
  bool expanded_ = false;
};

}  // namespace

std::unique_ptr<Aggregator> MakeDecodeAddAggregator(std::unique_ptr<Codec> codec) {
  return std::make_unique<DecodeAddAggregator>(std::move(codec));
}

std::unique_ptr<Aggregator> MakeSummedValuesAggregator(std::unique_ptr<Codec> codec) {
  return std::make_unique<SummedValuesAggregator>(std::move(codec));
}

absl::StatusOr<std::unique_ptr<Aggregator>> CreateAggregator(std::unique_ptr<Codec> codec) {
  if (codec == nullptr) return absl::InvalidArgumentError("CreateAggregator: null codec");
  const CodecSpec* spec = CodecRegistry::Global().Find(codec->name());
  if (spec != nullptr && spec->aggregator_factory)
    return spec->aggregator_factory(std::move(codec));
  const CodecProperties p = codec->properties();
  if (p.majority_vote || p.two_round) {
    return absl::UnimplementedError(
        absl::StrCat("codec '", codec->name(),
                     "' needs its own aggregator (majority vote or two rounds), "
                     "but its CodecSpec has no aggregator_factory"));
  }
  if (p.summable_encoded) return MakeSummedValuesAggregator(std::move(codec));
  return MakeDecodeAddAggregator(std::move(codec));
}

absl::StatusOr<std::unique_ptr<Aggregator>> CreateAggregator(absl::string_view codec_name,
                                                             const CodecParams& params) {
  auto codec = CreateCodec(codec_name, params);
  if (!codec.ok()) return codec.status();
  return CreateAggregator(std::move(*codec));
}

}  // namespace bytecomp::compress
