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
#include "absl/types/span.h"
#include "bytecomp/compress/codec.h"

namespace bytecomp::compress {

class TwoRoundCodec {
 public:
  virtual ~TwoRoundCodec() = default;

  // f32 values in the stage payloads and sums, for an n-element partition.
  virtual size_t FirstRoundFloats(size_t n) const = 0;
  virtual size_t SecondRoundFloats(size_t n) const = 0;
  // Payload sizes in bytes: 4 + 4 * floats.
  size_t FirstRoundBytes(size_t n) const { return 4 + 4 * FirstRoundFloats(n); }
  size_t SecondRoundBytes(size_t n) const { return 4 + 4 * SecondRoundFloats(n); }

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

// The two-round side of a codec, or nullptr if it has none.
inline TwoRoundCodec* AsTwoRound(Codec& codec) { return dynamic_cast<TwoRoundCodec*>(&codec); }

}  // namespace bytecomp::compress
