// artopk (AR-Topk): one worker's top-k indices, every worker's values at them, summed by the
// servers as a dense k-vector; on the engine's two-round path (two_round.h). The payloads, the
// replies and the chooser rules are in format/artopk_format.h; its aggregator
// ("artopk_choose_sum") is here. Error feedback: memory "residual" (the engine updates it with
// LocalApproximation, the compensated input at the chosen indices).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bytecomp/compress/aggregator.h"
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

enum class Chooser { kRoundRobin, kLargestNorm };

struct ArtopkParams {
  double ratio = 0.3;
  Chooser chooser = Chooser::kRoundRobin;
  double norm_smoothing = 0.9;
};

// The 4-byte words of a reply (the engine hands a pulled sum over as floats) as bytes.
absl::Span<const uint8_t> BytesOf(absl::Span<const float> words) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(words.data()), 4 * words.size());
}

// ||x||_2 as a float, saturated at the largest float (a sum of squares beyond it is still
// ordered, and the norm only ranks workers).
float NormOf(const float* x, size_t n) {
  const double norm = std::sqrt(SumOfSquares(x, n));
  return static_cast<float>(std::min<double>(norm, std::numeric_limits<float>::max()));
}

class ArtopkCodec final : public Codec, public TwoRoundCodec {
 public:
  ArtopkCodec(const ArtopkParams& params, std::unique_ptr<Codec> topk)
      : params_(params), topk_(std::move(topk)) {}

  absl::string_view name() const override { return kName; }
  const ArtopkParams& params() const { return params_; }
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
    return (artopk::MaxFirstPushBytes(K(n)) - 4) / 4;
  }
  size_t SecondRoundFloats(size_t n) const override {
    return (artopk::SecondPushBytes(K(n)) - 4) / 4;
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
    const size_t k = K(n);
    x_.assign(input.begin(), input.end());  // stage 2 sends its values at the chosen indices
    if (params_.chooser == Chooser::kLargestNorm) {
      const float norm = NormOf(x_.data(), n);
      const double s = params_.norm_smoothing;
      smoothed_norm_ = have_norm_ ? static_cast<float>(s * smoothed_norm_ + (1 - s) * norm) : norm;
      have_norm_ = true;
    }
    artopk::FirstPush h;
    h.n = static_cast<uint32_t>(n);
    h.k = static_cast<uint32_t>(k);
    h.norm = smoothed_norm_;
    h.expected_chooser = next_known_ && next_key_ == ctx.key && next_round_ == ctx.round
                             ? next_chooser_
                             : artopk::kUnknownChooser;
    h.has_candidate =
        k > 0 && (h.expected_chooser == artopk::kUnknownChooser || h.expected_chooser == ctx.node);
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
    stage_ = 1;
    round_key_ = ctx.key;
    round_ = ctx.round;
    return artopk::kFirstPushHeaderBytes + h.index_bytes;
  }

  absl::StatusOr<size_t> EncodeSecond(absl::Span<const float> summed_first, const CodecContext& ctx,
                                      absl::Span<uint8_t> out) override {
    if (auto s = CheckStage(1, ctx, "EncodeSecond"); !s.ok()) return s;
    const size_t n = x_.size(), k = K(n);
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
    PutF32(out.data() + 4, smoothed_norm_);
    uint8_t* values = out.data() + artopk::kSecondPushHeaderBytes;
    for (size_t j = 0; j < k; ++j) PutF32(values + 4 * j, x_[indices_[j]]);
    stage_ = 2;
    return bytes;
  }

  absl::Status LocalApproximation(absl::Span<float> output) const override {
    if (stage_ != 2) {
      return absl::FailedPreconditionError(
          "codec 'artopk': LocalApproximation before EncodeSecond of the round");
    }
    if (output.size() != x_.size()) {
      return absl::InvalidArgumentError(absl::StrCat("codec 'artopk': output has ", output.size(),
                                                     " elements, expected ", x_.size()));
    }
    std::fill(output.begin(), output.end(), 0.0f);
    for (uint32_t i : indices_) output[i] = x_[i];
    return absl::OkStatus();
  }

  absl::Status DecodeSecond(absl::Span<const float> summed_second, const CodecContext& ctx,
                            absl::Span<float> output) override {
    if (auto s = CheckStage(2, ctx, "DecodeSecond"); !s.ok()) return s;
    const size_t n = x_.size(), k = indices_.size();
    if (4 * summed_second.size() != artopk::SecondReplyBytes(k)) {
      return MalformedError(kName, absl::StrCat("stage 2 reply of ", 4 * summed_second.size(),
                                                " bytes, expected ", artopk::SecondReplyBytes(k)));
    }
    if (!IsFiniteBits(MaxAbsBits(summed_second.data(), k))) {
      return MalformedError(kName, "the summed values hold NaN or Inf");
    }
    if (output.size() != n) {
      return absl::InvalidArgumentError(
          absl::StrCat("codec 'artopk': output has ", output.size(), " elements, expected ", n));
    }
    std::fill(output.begin(), output.end(), 0.0f);
    for (size_t j = 0; j < k; ++j) output[indices_[j]] = summed_second[j];
    next_chooser_ = GetU32(BytesOf(summed_second).data() + 4 * k);
    next_key_ = ctx.key;
    next_round_ = ctx.round + 1;
    next_known_ = true;
    stage_ = 3;  // round over
    return absl::OkStatus();
  }

 private:
  size_t K(size_t n) const { return sparse::KeptCount(params_.ratio, n); }

  absl::Status CheckStage(int expected, const CodecContext& ctx, absl::string_view call) const {
    return CheckTwoRoundStage("artopk", stage_, expected, round_key_, round_, ctx, call);
  }

  const ArtopkParams params_;
  std::unique_ptr<Codec> topk_;    // selects the candidate; the single payload's codec
  std::vector<float> x_;           // this round's input
  std::vector<uint8_t> message_;   // topk's message of the candidate
  std::vector<uint32_t> indices_;  // this round's chosen indices
  float smoothed_norm_ = 0.0f;
  bool have_norm_ = false;
  bool next_known_ = false;  // the chooser of (next_key_, next_round_) is next_chooser_
  uint64_t next_key_ = 0, next_round_ = 0;
  uint32_t next_chooser_ = 0;
  int stage_ = 0;  // 1 after EncodeFirst, 2 after EncodeSecond, 3 after DecodeSecond
  uint64_t round_key_ = 0, round_ = 0;
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

absl::StatusOr<ArtopkParams> ReadParams(const CodecParams& params) {
  ParamReader r(params);
  ArtopkParams p;
  p.ratio = r.Double("ratio");
  p.chooser = r.String("chooser") == "largest_norm" ? Chooser::kLargestNorm : Chooser::kRoundRobin;
  p.norm_smoothing = r.Double("norm_smoothing");
  if (!r.ok()) return r.status();
  return p;
}

absl::StatusOr<std::unique_ptr<Codec>> MakeArtopk(const CodecParams& params) {
  absl::StatusOr<ArtopkParams> p = ReadParams(params);
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
  spec.facts = {.exchange = CodecExchange::kSummedIndices, .two_round = true, .selection = "top-k"};
  MustRegister(registry, std::move(spec));
}

}  // namespace bytecomp::compress
