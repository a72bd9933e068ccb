// artopk (AR-Topk): one worker's top-k indices, every worker's values at them, summed by the
// servers as a dense k-vector; on the engine's two-round path (two_round.h). The payloads, the
// replies and the chooser rules are in format/artopk_format.h; its aggregator
// ("artopk_choose_sum") is here. Error feedback: memory "residual" (the engine updates it with
// LocalApproximation, the compensated input at the chosen indices).
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bytecomp/compress/aggregator.h"
#include "bytecomp/compress/artopk_round.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/format/artopk_format.h"
#include "bytecomp/compress/format/sparse_format.h"
#include "bytecomp/compress/two_round.h"
#include "codec_checks.h"
#include "index_section.h"
#include "quant_kernels.h"
#include "sparse_codecs.h"

namespace bytecomp::compress {
namespace {

constexpr absl::string_view kName = "artopk";

using artopk::Chooser;
using ArtopkParams = artopk::Params;

// The 4-byte words of a reply (the engine hands a pulled sum over as floats) as bytes.
absl::Span<const uint8_t> BytesOf(absl::Span<const float> words) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(words.data()), 4 * words.size());
}

class ArtopkCodec final : public Codec, public TwoRoundCodec {
 public:
  ArtopkCodec(const ArtopkParams& params, std::unique_ptr<Codec> topk)
      : round_state_(params), topk_(std::move(topk)) {}

  absl::string_view name() const override { return kName; }
  const ArtopkParams& params() const { return round_state_.params(); }
  CodecProperties properties() const override {
    CodecProperties p;
    p.two_round = true;
    p.stateful = true;  // the next round's chooser and the smoothed norm
    return p;
  }
  size_t MaxEncodedBytes(size_t n) const override { return topk_->MaxEncodedBytes(n); }

  // The single payload: this node's own top k, topk's message (format header).
  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext& ctx,
                                absl::Span<uint8_t> out) override {
    return topk_->Encode(input, ctx, out);
  }
  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext& ctx,
                      absl::Span<float> output) override {
    return topk_->Decode(encoded, ctx, output);
  }
  absl::Status DecodeAdd(absl::Span<const uint8_t> encoded, const CodecContext& ctx,
                         absl::Span<float> accumulator) override {
    return topk_->DecodeAdd(encoded, ctx, accumulator);
  }

  size_t FirstRoundFloats(size_t n) const override {
    return (artopk::MaxFirstPushBytes(round_state_.K(n)) - 4) / 4;
  }
  size_t SecondRoundFloats(size_t n) const override {
    return (artopk::SecondPushBytes(round_state_.K(n)) - 4) / 4;
  }

  absl::StatusOr<size_t> EncodeFirst(absl::Span<const float> input, const CodecContext& ctx,
                                     absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    if (auto s = codec_checks::CheckEncodeCall(kName, n, out.size(), FirstRoundBytes(n)); !s.ok()) {
      return s;
    }
    if (!IsFiniteBits(MaxAbsBits(input.data(), n))) {
      return NonFiniteError(input, codec_checks::InputWhat(kName));
    }
    x_.assign(input.begin(), input.end());  // stage 2 sends its values at the chosen indices
    const float norm =
        round_state_.uses_norm() ? artopk::NormFromSumOfSquares(SumOfSquares(x_.data(), n)) : 0.0f;
    artopk::FirstPush h = round_state_.Start(n, norm, ctx);
    if (h.has_candidate) {
      // topk's own selection: its message's index section is the candidate.
      message_.resize(topk_->MaxEncodedBytes(n));
      absl::StatusOr<size_t> bytes = topk_->Encode(x_, ctx, absl::MakeSpan(message_));
      if (!bytes.ok()) return bytes.status();
      const sparse::Header m = sparse::ReadHeader(message_.data());
      h.encoding = m.encoding;
      h.width = m.width;
      h.index_bytes = m.index_bytes;
      std::memcpy(out.data() + artopk::kFirstPushHeaderBytes,
                  message_.data() + sparse::kHeaderBytes + 4 * size_t{m.k}, m.index_bytes);
    }
    artopk::WriteFirstPushHeader(out.data(), h);
    round_state_.FinishFirst(ctx);
    return artopk::kFirstPushHeaderBytes + h.index_bytes;
  }

  absl::StatusOr<size_t> EncodeSecond(absl::Span<const float> summed_first, const CodecContext& ctx,
                                      absl::Span<uint8_t> out) override {
    if (auto s = round_state_.CheckStage(1, ctx, "EncodeSecond"); !s.ok()) return s;
    const size_t n = round_state_.n(), k = round_state_.k();
    const absl::Span<const uint8_t> reply = BytesOf(summed_first);
    if (auto s = FormatErrorStatus(kName, artopk::CheckFirstReply(reply.data(), reply.size(), k));
        !s.ok()) {
      return s;
    }
    const artopk::FirstReply h = artopk::ReadFirstReplyHeader(reply.data());
    if (auto s = sparse::ReadIndices(kName, reply.data() + artopk::kFirstReplyHeaderBytes,
                                     h.index_bytes, k, n, h.encoding, h.width, indices_);
        !s.ok()) {
      return s;
    }
    const size_t bytes = artopk::SecondPushBytes(k);
    if (auto s = codec_checks::OutputFits(kName, out.size(), bytes); !s.ok()) return s;
    PutU32(out.data(), 2);
    PutF32(out.data() + 4, round_state_.smoothed_norm());
    uint8_t* values = out.data() + artopk::kSecondPushHeaderBytes;
    for (size_t j = 0; j < k; ++j) PutF32(values + 4 * j, x_[indices_[j]]);
    round_state_.FinishSecond();
    return bytes;
  }

  absl::Status LocalApproximation(absl::Span<float> output) const override {
    if (auto s = round_state_.CheckLocalApproximation(output.size()); !s.ok()) return s;
    std::fill(output.begin(), output.end(), 0.0f);
    for (uint32_t i : indices_) output[i] = x_[i];
    return absl::OkStatus();
  }

  absl::Status DecodeSecond(absl::Span<const float> summed_second, const CodecContext& ctx,
                            absl::Span<float> output) override {
    if (auto s = round_state_.CheckStage(2, ctx, "DecodeSecond"); !s.ok()) return s;
    const size_t k = round_state_.k();
    if (auto s = round_state_.CheckSecondReply(4 * summed_second.size(), output.size()); !s.ok()) {
      return s;
    }
    if (!IsFiniteBits(MaxAbsBits(summed_second.data(), k))) {
      return MalformedError(kName, artopk::kSumsNotFinite);
    }
    std::fill(output.begin(), output.end(), 0.0f);
    for (size_t j = 0; j < k; ++j) output[indices_[j]] = summed_second[j];
    round_state_.FinishDecodeSecond(GetU32(BytesOf(summed_second).data() + 4 * k), ctx);
    return absl::OkStatus();
  }

 private:
  artopk::RoundState round_state_;
  std::unique_ptr<Codec> topk_;    // selects the candidate; the single payload's codec
  std::vector<float> x_;           // this round's input
  std::vector<uint8_t> message_;   // topk's message of the candidate
  std::vector<uint32_t> indices_;  // this round's chosen indices
};

// The servers' side: stage 1 picks the chooser's index section, stage 2 sums the value vectors
// in the order the pushes are added (rank order on the servers) and names the next chooser.
// Single payloads (stage 0: Codec::Encode, topk messages) are decoded and added. Every payload
// is checked in full before anything is kept.
class ArtopkAggregator final : public Aggregator {
 public:
  ArtopkAggregator(const ArtopkParams& params, std::unique_ptr<Codec> codec)
      : params_(params), codec_(std::move(codec)) {}
  absl::string_view name() const override { return "artopk_choose_sum"; }

  void Reset(size_t n) override {
    n_ = n;
    k_ = sparse::KeptCount(params_.ratio, n);
    count_ = 0;
    stage_ = 0;
    pushes_.clear();
    sum_.assign(n, 0.0f);
    started_ = true;
  }

  absl::Status Add(absl::Span<const uint8_t> encoded, const CodecContext& ctx) override {
    if (!started_) return absl::FailedPreconditionError("artopk_choose_sum: Add before Reset");
    if (encoded.size() < 4) {
      return MalformedError(kName, absl::StrCat(encoded.size(), " bytes, no stage field"));
    }
    const uint32_t stage = GetU32(encoded.data());
    if (stage > 2) {
      return FormatErrorStatus(kName, MakeFormatError(FormatErrorCode::kWrongStage, stage, 2));
    }
    if (count_ > 0) {
      if (stage != stage_) {
        return absl::InvalidArgumentError(absl::StrCat(
            "artopk_choose_sum: stage ", stage, " payload added to a stage ", stage_, " round"));
      }
      if (auto s = CheckSameRound(first_ctx_, ctx); !s.ok()) return s;
    }
    absl::Status added = stage == 0   ? AddSingle(encoded, ctx)
                         : stage == 1 ? AddFirst(encoded, ctx)
                                      : AddSecond(encoded, ctx);
    if (!added.ok()) return added;
    if (count_ == 0) {
      stage_ = stage;
      first_ctx_ = ctx;
    }
    ++count_;
    return absl::OkStatus();
  }

  absl::StatusOr<absl::Span<const float>> Finish() override {
    if (!started_) return absl::FailedPreconditionError("artopk_choose_sum: Finish before Reset");
    if (count_ == 0 || stage_ == 0) return absl::MakeConstSpan(sum_);
    // Rank order, whatever order the pushes came in.
    std::stable_sort(pushes_.begin(), pushes_.end(),
                     [](const Push& a, const Push& b) { return a.node < b.node; });
    absl::StatusOr<size_t> chosen = stage_ == 1 ? ChooserOfThisRound() : NextChooser();
    if (!chosen.ok()) return chosen.status();
    const Push& c = pushes_[*chosen];
    if (stage_ == 1) {
      reply_.assign(artopk::FirstReplyBytes(c.section.size()) / 4, 0.0f);
      uint8_t* out = reinterpret_cast<uint8_t*>(reply_.data());
      artopk::WriteFirstReplyHeader(out, {.chooser = c.node,
                                          .k = static_cast<uint32_t>(k_),
                                          .encoding = c.encoding,
                                          .width = c.width,
                                          .index_bytes = static_cast<uint32_t>(c.section.size())});
      if (!c.section.empty()) {
        std::memcpy(out + artopk::kFirstReplyHeaderBytes, c.section.data(), c.section.size());
      }
    } else {
      reply_.resize(k_ + 1);
      std::copy(sum_.begin(), sum_.begin() + k_, reply_.begin());
      PutU32(reinterpret_cast<uint8_t*>(reply_.data() + k_), c.node);
    }
    return absl::MakeConstSpan(reply_);
  }

  size_t count() const override { return count_; }

 private:
  struct Push {
    uint32_t node = 0;
    float norm = 0.0f;
    uint32_t expected = artopk::kUnknownChooser;  // stage 1
    uint8_t encoding = 0, width = 0;
    std::vector<uint8_t> section;  // stage 1: the candidate's index section
  };

  absl::Status AddSingle(absl::Span<const uint8_t> encoded, const CodecContext& ctx) {
    return codec_->DecodeAdd(encoded, ctx, absl::MakeSpan(sum_));
  }

  absl::Status AddFirst(absl::Span<const uint8_t> encoded, const CodecContext& ctx) {
    const uint8_t* p = encoded.data();
    if (auto s = FormatErrorStatus(kName, artopk::CheckFirstPush(p, encoded.size(), n_, k_));
        !s.ok()) {
      return s;
    }
    const artopk::FirstPush h = artopk::ReadFirstPushHeader(p);
    if (h.has_candidate) {
      if (auto s = sparse::ReadIndices(kName, p + artopk::kFirstPushHeaderBytes, h.index_bytes, k_,
                                       n_, h.encoding, h.width, scratch_);
          !s.ok()) {
        return s;
      }
    }
    // Every push of a round expects the same chooser; a known one alone sends a candidate,
    // an unknown one makes every worker send one.
    if (count_ > 0 && h.expected_chooser != pushes_[0].expected) {
      return absl::InvalidArgumentError(
          absl::StrCat("artopk_choose_sum: worker ", ctx.node, " expects chooser ",
                       ChooserName(h.expected_chooser), ", worker ", pushes_[0].node, " expects ",
                       ChooserName(pushes_[0].expected)));
    }
    const bool should_send =
        k_ > 0 && (h.expected_chooser == artopk::kUnknownChooser || h.expected_chooser == ctx.node);
    if (h.has_candidate != should_send) {
      return absl::InvalidArgumentError(absl::StrCat(
          "artopk_choose_sum: worker ", ctx.node, h.has_candidate ? " sent" : " did not send",
          " a candidate while the chooser is ", ChooserName(h.expected_chooser)));
    }
    Push push{.node = ctx.node,
              .norm = h.norm,
              .expected = h.expected_chooser,
              .encoding = h.encoding,
              .width = h.width};
    const uint8_t* section = p + artopk::kFirstPushHeaderBytes;
    push.section.assign(section, section + h.index_bytes);
    pushes_.push_back(std::move(push));
    return absl::OkStatus();
  }

  absl::Status AddSecond(absl::Span<const uint8_t> encoded, const CodecContext& ctx) {
    const uint8_t* p = encoded.data();
    FormatError e = CheckPayloadSize(encoded.size(), artopk::SecondPushBytes(k_), n_);
    if (e.ok()) e = artopk::CheckNorm(GetF32(p + 4));
    if (e.ok() && !sparse::ValuesFinite(p + artopk::kSecondPushHeaderBytes, k_)) {
      e = MakeFormatError(FormatErrorCode::kValuesNotFinite);
    }
    if (auto s = FormatErrorStatus(kName, e); !s.ok()) return s;
    const uint8_t* values = p + artopk::kSecondPushHeaderBytes;
    for (size_t j = 0; j < k_; ++j) sum_[j] += GetF32(values + 4 * j);
    pushes_.push_back(Push{.node = ctx.node, .norm = GetF32(p + 4)});
    return absl::OkStatus();
  }

  // Stage 1: the position of the push whose candidate is the round's indices.
  absl::StatusOr<size_t> ChooserOfThisRound() const {
    const uint32_t expected = pushes_[0].expected;
    if (expected == artopk::kUnknownChooser) return ByPolicy(first_ctx_.round);
    for (size_t i = 0; i < pushes_.size(); ++i) {
      if (pushes_[i].node == expected) return i;
    }
    return absl::InvalidArgumentError(absl::StrCat("artopk_choose_sum: the workers expect worker ",
                                                   expected,
                                                   " to choose, which did not push this round"));
  }

  // Stage 2: the position of round + 1's chooser.
  absl::StatusOr<size_t> NextChooser() const { return ByPolicy(first_ctx_.round + 1); }

  size_t ByPolicy(uint64_t round) const {
    if (params_.chooser == Chooser::kRoundRobin) {
      return artopk::RoundRobinPosition(round, first_ctx_.key, pushes_.size());
    }
    std::vector<float> norms;
    for (const Push& p : pushes_) norms.push_back(p.norm);
    return artopk::LargestNormPosition(norms.data(), norms.size());
  }

  static std::string ChooserName(uint32_t chooser) {
    return chooser == artopk::kUnknownChooser ? std::string("unknown (every worker a candidate)")
                                              : absl::StrCat("worker ", chooser);
  }

  const ArtopkParams params_;
  std::unique_ptr<Codec> codec_;  // single payloads
  size_t n_ = 0, k_ = 0, count_ = 0;
  uint32_t stage_ = 0;
  bool started_ = false;
  CodecContext first_ctx_;
  std::vector<Push> pushes_;
  std::vector<float> sum_;    // stage 0: n floats; stage 2: the first k are the sums
  std::vector<float> reply_;  // what Finish returns for stages 1 and 2
  std::vector<uint32_t> scratch_;
};

absl::StatusOr<std::unique_ptr<Codec>> MakeArtopk(const CodecParams& params) {
  absl::StatusOr<ArtopkParams> p = artopk::ReadParams(params);
  if (!p.ok()) return p.status();
  // %.17g: the ratio reaches topk exactly, so both keep the same k.
  absl::StatusOr<std::unique_ptr<Codec>> topk =
      CreateCodec("topk", {{"ratio", absl::StrFormat("%.17g", p->ratio)}});
  if (!topk.ok()) return topk.status();
  return std::unique_ptr<Codec>(new ArtopkCodec(*p, *std::move(topk)));
}

}  // namespace

void RegisterArtopkCodec(CodecRegistry& registry) {
  CodecSpec spec;
  spec.name = std::string(kName);
  spec.summary =
      "AR-Topk: one worker's top-k indices (round robin or largest smoothed norm), every "
      "worker's values there, summed as a dense k-vector; two rounds (format/artopk_format.h)";
  spec.params = {
      param_specs::RatioParam(),
      param_specs::ChoiceParam("chooser", "round_robin",
                               "who picks the indices: round_robin or largest_norm",
                               {"round_robin", "largest_norm"}),
      param_specs::InRange(
          param_specs::Param("norm_smoothing", CodecParamSpec::Type::kDouble, "0.9",
                             "largest_norm: weight of the previous smoothed "
                             "norm, in [0, 1)"),
          0.0, 1.0),
  };
  spec.params.back().max_exclusive = true;
  spec.factory = MakeArtopk;
  spec.aggregator_factory =
      [](std::unique_ptr<Codec> codec) -> absl::StatusOr<std::unique_ptr<Aggregator>> {
    if (codec->name() != kName) {
      return absl::InvalidArgumentError("artopk_choose_sum needs an artopk codec");
    }
    const ArtopkCodec& artopk = static_cast<const ArtopkCodec&>(*codec);
    return std::unique_ptr<Aggregator>(new ArtopkAggregator(artopk.params(), std::move(codec)));
  };
  // Its two stages are one exchange of summed indices, not a second round trip of the sum; it
  // keeps what topk keeps.
  spec.facts = {.exchange = CodecExchange::kSummedIndices,
                .two_round = true,
                .selection = "top-k",
                .gpu_kernel = true,
                .gpu_memories = {MemoryKind::kResidual}};
  MustRegister(registry, std::move(spec));
}

}  // namespace bytecomp::compress
