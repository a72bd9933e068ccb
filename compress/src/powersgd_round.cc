// powersgd::RoundState (powersgd_round.h): the host side of a PowerSGD round.
#include "exact_float_math.h"  // first: see there (powersgd_round.h defines Orthonormalise)

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/powersgd_round.h"
#include "bytecomp/compress/two_round.h"

namespace bytecomp::compress::powersgd {

void RoundState::Start(size_t n, const CodecContext& ctx) {
  // Another length means another partition layout (a new strategy): the state restarts.
  if (n_ != n) {
    n_ = 0;
    have_warm_ = false;
  }
  if (n_ == 0) {
    n_ = n;
    shape_ = ShapeOf(n);
    q_warm_.assign(SecondRoundFloats(shape_), 0.0f);
  }
  PrepareWarmStart(q_warm_.data(), shape_, have_warm_,
                   MakeCounterRandom(ctx.seed, ctx.key, ctx.round, 0));
}

absl::Status RoundState::FinishFirst(uint32_t p_max_abs_bits, const CodecContext& ctx) {
  if (!IsFiniteBits(p_max_abs_bits)) {
    return absl::InvalidArgumentError(
        "codec 'powersgd': input magnitudes overflow the float range in P = M Q");
  }
  stage_ = 1;
  round_key_ = ctx.key;
  round_ = ctx.round;
  return absl::OkStatus();
}

absl::Status RoundState::Orthonormalise(absl::Span<const float> summed_first,
                                        const CodecContext& ctx) {
  if (auto s = CheckStage(1, ctx, "EncodeSecond"); !s.ok()) return s;
  const size_t floats = FirstRoundFloats(shape_);
  if (auto s = CheckSum(summed_first, floats, "summed P"); !s.ok()) return s;
  basis_.resize(floats);
  p_hat_.resize(floats);
  powersgd::Orthonormalise(summed_first.data(), shape_, basis_.data(), p_hat_.data());
  return absl::OkStatus();
}

absl::Status RoundState::FinishSecond(uint32_t q_max_abs_bits) {
  if (!IsFiniteBits(q_max_abs_bits)) {
    return absl::InvalidArgumentError(
        "codec 'powersgd': input magnitudes overflow the float range in Q = M^T P");
  }
  stage_ = 2;
  return absl::OkStatus();
}

absl::Status RoundState::CheckLocalApproximation(size_t output_size) const {
  if (stage_ != 2) {
    return absl::FailedPreconditionError(
        "codec 'powersgd': LocalApproximation before EncodeSecond of the round");
  }
  return CheckOutput(output_size);
}

absl::Status RoundState::CheckDecodeSecond(absl::Span<const float> summed_second,
                                           const CodecContext& ctx, size_t output_size) const {
  if (auto s = CheckStage(2, ctx, "DecodeSecond"); !s.ok()) return s;
  if (auto s = CheckSum(summed_second, SecondRoundFloats(shape_), "summed Q"); !s.ok()) return s;
  return CheckOutput(output_size);
}

absl::Status RoundState::FinishDecodeSecond(absl::Span<const float> summed_second,
                                            uint32_t output_max_abs_bits) {
  if (!IsFiniteBits(output_max_abs_bits)) {
    return absl::InvalidArgumentError(
        "codec 'powersgd': the approximation of the summed gradients overflows the float "
        "range");
  }
  q_warm_.assign(summed_second.begin(), summed_second.end());
  have_warm_ = true;
  stage_ = 3;  // round over; LocalApproximation is no longer valid
  return absl::OkStatus();
}

void RoundState::FinishSingle(absl::Span<const float> q_local) {
  q_warm_.assign(q_local.begin(), q_local.end());
  have_warm_ = true;
  stage_ = 3;
}

absl::Status RoundState::CheckStage(int expected, const CodecContext& ctx,
                                    absl::string_view call) const {
  return CheckTwoRoundStage("powersgd", stage_, expected, round_key_, round_, ctx, call);
}

absl::Status RoundState::CheckSum(absl::Span<const float> sum, size_t expected,
                                  absl::string_view what) const {
  if (sum.size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat("codec 'powersgd': ", what, " has ", sum.size(),
                                                   " values, expected ", expected));
  }
  return CheckFinite(sum, absl::StrCat("codec 'powersgd' ", what));
}

absl::Status RoundState::CheckOutput(size_t output_size) const {
  if (output_size == n_) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("codec 'powersgd': output has ", output_size, " elements, expected ", n_));
}

}  // namespace bytecomp::compress::powersgd
