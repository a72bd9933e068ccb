// Codecs that need two aggregation round trips through the servers (PowerSGD: P, then Q).
//
// A two-round codec is a Codec with properties().two_round set that also implements
// TwoRoundCodec; AsTwoRound() finds that side. Pushes from workers go through the two rounds.
// Its plain Encode/Decode are a single-payload form without a shared basis (each node's own
// factors, decoded separately and added): that is what the server uses to re-encode a sum for
// pulls (two-way compression), and what a single node may use.
//
// The engine's sequence, per partition and training round, with the same ctx throughout:
//
//   memory->Compensate(gradient, ctx, compensated);          // memory "powersgd" (residual)
//   EncodeFirst(compensated, ctx, out)       -> payload 1    // push (round trip 1)
//   sum_1 = the servers' element-wise fp32 sum of the W workers' payload-1 vectors
//   EncodeSecond(sum_1, ctx, out)            -> payload 2    // push (round trip 2)
//   LocalApproximation(decoded); memory->Update(compensated, decoded, ctx);
//   sum_2 = the servers' fp32 sum of the payload-2 vectors
//   DecodeSecond(sum_2, ctx, output)         -> output: the approximation of the SUM of the
//                                               W workers' compensated gradients (n floats)
//
// Payload format (little-endian): u32 stage (1 or 2), then FirstRoundFloats(n) or
// SecondRoundFloats(n) f32 values. The server aggregates both stages alike: it checks the
// stage and length and sums the f32 vectors (the codec's aggregator_factory, "two_round_sum",
// does that and its Finish returns the summed vector, whose length is the stage's float count,
// not n). Pulls return that sum as plain f32, which is what EncodeSecond and DecodeSecond take.
//
// Every worker must see the same sums (they do: the servers send one sum to all), so that all
// derive the same orthonormal basis from sum_1; the codec computes that basis in double in a
// fixed order, so workers on the same build agree bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "bytecomp/compress/codec.h"

namespace bytecomp::compress {

// The stage payloads' sizes: TwoRoundCodec's, and compress/cuda's CudaTwoRoundCodec's.
class TwoRoundSizes {
 public:
  virtual ~TwoRoundSizes() = default;

  // f32 values in the stage payloads and sums, for an n-element partition.
  virtual size_t FirstRoundFloats(size_t n) const = 0;
  virtual size_t SecondRoundFloats(size_t n) const = 0;
  // Payload sizes in bytes: 4 + 4 * floats.
  size_t FirstRoundBytes(size_t n) const { return 4 + 4 * FirstRoundFloats(n); }
  size_t SecondRoundBytes(size_t n) const { return 4 + 4 * SecondRoundFloats(n); }
};

class TwoRoundCodec : public TwoRoundSizes {
 public:
  // Starts a round with this worker's (compensated) input; writes payload 1. Non-finite
  // input is an InvalidArgument error naming the index.
  virtual absl::StatusOr<size_t> EncodeFirst(absl::Span<const float> input, const CodecContext& ctx,
                                             absl::Span<uint8_t> out) = 0;
  // Takes the sum of all workers' payload-1 vectors; writes payload 2. FailedPrecondition
  // unless EncodeFirst ran for this round; InvalidArgument for a wrong length or NaN/Inf.
  virtual absl::StatusOr<size_t> EncodeSecond(absl::Span<const float> summed_first,
                                              const CodecContext& ctx, absl::Span<uint8_t> out) = 0;
  // This worker's own approximation of its input (n floats), for the error-feedback memory.
  // Valid after EncodeSecond.
  virtual absl::Status LocalApproximation(absl::Span<float> output) const = 0;
  // Takes the sum of all workers' payload-2 vectors; writes the approximation of the sum of
  // the workers' inputs and ends the round (the sum becomes the next round's warm start).
  virtual absl::Status DecodeSecond(absl::Span<const float> summed_second, const CodecContext& ctx,
                                    absl::Span<float> output) = 0;
};

// The call-order check of the two-round codecs (artopk, powersgd): FailedPrecondition unless
// `call` finds the stage it needs (expected: 1 after EncodeFirst, 2 after EncodeSecond) open,
// and for ctx's key and round (the open round's: open_key, open_round).
inline absl::Status CheckTwoRoundStage(absl::string_view codec, int stage, int expected,
                                       uint64_t open_key, uint64_t open_round,
                                       const CodecContext& ctx, absl::string_view call) {
  if (stage != expected) {
    return absl::FailedPreconditionError(absl::StrCat(
        "codec '", codec, "': ", call, " out of order (",
        expected == 1 ? "EncodeFirst" : "EncodeSecond", " of this round has not run)"));
  }
  if (ctx.key != open_key || ctx.round != open_round) {
    return absl::FailedPreconditionError(
        absl::StrCat("codec '", codec, "': ", call, " for key ", ctx.key, " round ", ctx.round,
                     " but the open round is key ", open_key, " round ", open_round));
  }
  return absl::OkStatus();
}

// The two-round side of a codec, or nullptr if it has none.
inline TwoRoundCodec* AsTwoRound(Codec& codec) { return dynamic_cast<TwoRoundCodec*>(&codec); }

}  // namespace bytecomp::compress
