// The host side of a PowerSGD round (two_round.h), kept alike by the CPU codec
// (compress/src/lowrank_powersgd.cc) and the CUDA one (compress/cuda/src/lowrank_kernels.cu):
// the matrix shape, the warm-start Q, the orthonormal basis P^, the order of the calls, and the
// errors each step returns, word for word. The work on the n elements (P = M Q, Q = M^T P^,
// P^ Q^T, the memory) is each codec's, in format/powersgd_format.h's order; what is done here
// is on rows * rank or cols * rank values.
//
//   Start(n, ctx)                      EncodeFirst, after the input's finite check: q() is the
//                                      round's Q (unit columns)
//   FinishFirst(max |P| bits)          stage 1 open
//   Orthonormalise(summed P, ctx)      EncodeSecond: checks, then p_hat()
//   FinishSecond(max |Q| bits)         stage 2
//   CheckDecodeSecond(summed Q, ...)   DecodeSecond: checks, then the product P^ (sum Q)^T
//   FinishDecodeSecond(summed Q, ...)  the sum is the next warm start; the round is over
//   FinishSingle(Q')                   the single payload's end (Codec::Encode)
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "bytecomp/compress/codec.h"
#include "bytecomp/compress/format/powersgd_format.h"

namespace bytecomp::compress::powersgd {

class RoundState {
 public:
  // rank: the parameter (the effective rank is the shape's); cols: 0 for the near-square matrix.
  RoundState(size_t rank, size_t cols) : rank_(rank), cols_(cols) {}

  Shape ShapeOf(size_t n) const { return ShapeFor(n, rank_, cols_); }

  void Start(size_t n, const CodecContext& ctx);
  absl::Status FinishFirst(uint32_t p_max_abs_bits, const CodecContext& ctx);
  absl::Status Orthonormalise(absl::Span<const float> summed_first, const CodecContext& ctx);
  absl::Status FinishSecond(uint32_t q_max_abs_bits);
  // LocalApproximation: valid after EncodeSecond of the round.
  absl::Status CheckLocalApproximation(size_t output_size) const;
  absl::Status CheckDecodeSecond(absl::Span<const float> summed_second, const CodecContext& ctx,
                                 size_t output_size) const;
  absl::Status FinishDecodeSecond(absl::Span<const float> summed_second,
                                  uint32_t output_max_abs_bits);
  void FinishSingle(absl::Span<const float> q_local);

  size_t n() const { return n_; }
  const Shape& shape() const { return shape_; }
  const std::vector<float>& q() const { return q_warm_; }
  const std::vector<float>& p_hat() const { return p_hat_; }

 private:
  absl::Status CheckStage(int expected, const CodecContext& ctx, absl::string_view call) const;
  absl::Status CheckOutput(size_t output_size) const;
  // A summed stage vector (what: "summed P", "summed Q"): its length, then NaN/Inf.
  absl::Status CheckSum(absl::Span<const float> sum, size_t expected, absl::string_view what) const;

  size_t rank_;
  size_t cols_;
  size_t n_ = 0;
  Shape shape_;
  std::vector<float> q_warm_;  // cols x rank, column-major
  bool have_warm_ = false;
  std::vector<double> basis_;  // Orthonormalise's scratch
  std::vector<float> p_hat_;   // rows x rank, orthonormal columns
  int stage_ = 0;              // 1 after EncodeFirst, 2 after EncodeSecond, 3 after decode
  uint64_t round_key_ = 0;
  uint64_t round_ = 0;
};

}  // namespace bytecomp::compress::powersgd
