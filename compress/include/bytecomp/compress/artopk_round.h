// The host side of an artopk round (two_round.h; the payloads in format/artopk_format.h), kept
// alike by the CPU codec (compress/src/sparse_artopk.cc) and the CUDA one
// (compress/cuda/src/artopk_kernels.cu): the parameters, who is expected to choose, the
// smoothed norm, the order of the calls, and the errors each step returns, word for word. The
// work on the n elements (the top-k selection, the values at the chosen indices, the scatter of
// the sums, the memory) is each codec's.
//
//   Start(n, norm, ctx)          EncodeFirst, after the input's finite check: the stage 1
//                                push's header fields (has_candidate: add the index section)
//   FinishFirst(ctx)             the push written: stage 1 open
//   CheckStage(2 or 1, ...)      the call order, for EncodeSecond and DecodeSecond
//   FinishSecond()               stage 2 (EncodeSecond wrote its payload)
//   CheckSecondReply(...)        DecodeSecond: the reply's size and the output's length
//   FinishDecodeSecond(next, ctx) the reply's next chooser kept; the round is over
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bytecomp/compress/codec.h"
#include "bytecomp/compress/format/artopk_format.h"
#include "bytecomp/compress/params.h"

namespace bytecomp::compress::artopk {

enum class Chooser { kRoundRobin, kLargestNorm };

struct Params {
  double ratio = 0.3;
  Chooser chooser = Chooser::kRoundRobin;
  double norm_smoothing = 0.9;
};

// DecodeSecond's error, after "codec 'artopk': malformed payload: ", for a reply whose sums
// hold NaN or Inf.
inline constexpr absl::string_view kSumsNotFinite = "the summed values hold NaN or Inf";

// From validated, defaults-filled codec parameters (the CPU codec's spec).
absl::StatusOr<Params> ReadParams(const CodecParams& params);

// ||x||_2 as a float from the sum of squares (in double), saturated at the largest float (a sum
// beyond it is still ordered, and the norm only ranks workers).
float NormFromSumOfSquares(double sum_of_squares);

class RoundState {
 public:
  explicit RoundState(const Params& params) : params_(params) {}

  const Params& params() const { return params_; }
  // largest_norm ranks workers by their smoothed norms; round_robin sends 0 and needs none.
  bool uses_norm() const { return params_.chooser == Chooser::kLargestNorm; }
  // k for n elements (sparse_format.h KeptCount), as topk keeps.
  size_t K(size_t n) const;

  // Starts ctx's round for n elements whose norm is `norm` (read only when uses_norm()):
  // smooths the norm and names the chooser this worker expects, which decides whether it sends
  // a candidate. The index fields are left for the caller.
  FirstPush Start(size_t n, float norm, const CodecContext& ctx);
  // Opens stage 1 once the push is written (a failed EncodeFirst leaves no stage open for it).
  void FinishFirst(const CodecContext& ctx);
  // FailedPrecondition unless `call` finds stage `expected` open for ctx's key and round.
  absl::Status CheckStage(int expected, const CodecContext& ctx, absl::string_view call) const;
  void FinishSecond() { stage_ = 2; }
  // LocalApproximation: valid after EncodeSecond, into n() elements.
  absl::Status CheckLocalApproximation(size_t output_size) const;
  // DecodeSecond's reply of reply_bytes bytes (artopk::SecondReplyBytes(k)) and its output.
  absl::Status CheckSecondReply(size_t reply_bytes, size_t output_size) const;
  // The reply's last word: the chooser of ctx.round + 1. The round is over.
  void FinishDecodeSecond(uint32_t next_chooser, const CodecContext& ctx);

  size_t n() const { return n_; }
  size_t k() const { return k_; }
  float smoothed_norm() const { return smoothed_norm_; }

 private:
  Params params_;
  size_t n_ = 0, k_ = 0;  // of the open round
  float smoothed_norm_ = 0.0f;
  bool have_norm_ = false;
  bool next_known_ = false;  // the chooser of (next_key_, next_round_) is next_chooser_
  uint64_t next_key_ = 0, next_round_ = 0;
  uint32_t next_chooser_ = 0;
  int stage_ = 0;  // 1 after EncodeFirst, 2 after EncodeSecond, 3 after DecodeSecond
  uint64_t round_key_ = 0, round_ = 0;
};

}  // namespace bytecomp::compress::artopk
