// artopk::RoundState (artopk_round.h): the host side of an artopk round.
#include "bytecomp/compress/artopk_round.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/format/sparse_format.h"
#include "bytecomp/compress/two_round.h"

namespace bytecomp::compress::artopk {

absl::StatusOr<Params> ReadParams(const CodecParams& params) {
  ParamReader r(params);
  Params p;
  p.ratio = r.Double("ratio");
  p.chooser = r.String("chooser") == "largest_norm" ? Chooser::kLargestNorm : Chooser::kRoundRobin;
  p.norm_smoothing = r.Double("norm_smoothing");
  if (!r.ok()) return r.status();
  return p;
}

float NormFromSumOfSquares(double sum_of_squares) {
  const double norm = std::sqrt(sum_of_squares);
  return static_cast<float>(std::min<double>(norm, std::numeric_limits<float>::max()));
}

size_t RoundState::K(size_t n) const { return sparse::KeptCount(params_.ratio, n); }

FirstPush RoundState::Start(size_t n, float norm, const CodecContext& ctx) {
  if (uses_norm()) {
    const double s = params_.norm_smoothing;
    smoothed_norm_ = have_norm_ ? static_cast<float>(s * smoothed_norm_ + (1 - s) * norm) : norm;
    have_norm_ = true;
  }
  n_ = n;
  k_ = K(n);
  FirstPush h;
  h.n = static_cast<uint32_t>(n);
  h.k = static_cast<uint32_t>(k_);
  h.norm = smoothed_norm_;
  h.expected_chooser = next_known_ && next_key_ == ctx.key && next_round_ == ctx.round
                           ? next_chooser_
                           : kUnknownChooser;
  h.has_candidate =
      k_ > 0 && (h.expected_chooser == kUnknownChooser || h.expected_chooser == ctx.node);
  stage_ = 0;
  return h;
}

void RoundState::FinishFirst(const CodecContext& ctx) {
  stage_ = 1;
  round_key_ = ctx.key;
  round_ = ctx.round;
}

absl::Status RoundState::CheckStage(int expected, const CodecContext& ctx,
                                    absl::string_view call) const {
  return CheckTwoRoundStage("artopk", stage_, expected, round_key_, round_, ctx, call);
}

absl::Status RoundState::CheckLocalApproximation(size_t output_size) const {
  if (stage_ != 2) {
    return absl::FailedPreconditionError(
        "codec 'artopk': LocalApproximation before EncodeSecond of the round");
  }
  if (output_size != n_) {
    return absl::InvalidArgumentError(
        absl::StrCat("codec 'artopk': output has ", output_size, " elements, expected ", n_));
  }
  return absl::OkStatus();
}

absl::Status RoundState::CheckSecondReply(size_t reply_bytes, size_t output_size) const {
  if (reply_bytes != SecondReplyBytes(k_)) {
    return MalformedError("artopk", absl::StrCat("stage 2 reply of ", reply_bytes,
                                                 " bytes, expected ", SecondReplyBytes(k_)));
  }
  if (output_size != n_) {
    return absl::InvalidArgumentError(
        absl::StrCat("codec 'artopk': output has ", output_size, " elements, expected ", n_));
  }
  return absl::OkStatus();
}

void RoundState::FinishDecodeSecond(uint32_t next_chooser, const CodecContext& ctx) {
  next_chooser_ = next_chooser;
  next_key_ = ctx.key;
  next_round_ = ctx.round + 1;
  next_known_ = true;
  stage_ = 3;  // round over
}

}  // namespace bytecomp::compress::artopk
