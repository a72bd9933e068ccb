// Server-side aggregation of the workers' encoded pushes for one partition and round, the
// cheapest correct way for the codec:
//   summed_values  codecs with summable_encoded (randomk, fp16, bf16): the payloads' value
//                  vectors are summed in fp32 without decoding, expanded once in Finish.
//   sparse_add     sparse codecs (topk, threshold, dgc, adaq): each payload scatter-added.
//   decode_add     everything else: decode each payload and add, in fp32.
//   (a codec's own) CodecSpec::aggregator_factory: majority vote (signsgd, signum), two
//                  rounds (powersgd), block_sparse (blocksparse: work and memory follow the
//                  non-zero blocks; the sum is also available encoded, EncodedSum).
//
//   auto agg = CreateAggregator("topk", params);   // once per (codec, partition)
//   agg->Reset(n);                                 // each round
//   for each push: RETURN_IF_ERROR(agg->Add(payload, ctx));   // a bad payload changes nothing
//   absl::Span<const float> sum = *agg->Finish();  // fp32 sum of the decoded pushes
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "bytecomp/compress/codec.h"

namespace bytecomp::compress {

class Aggregator {
 public:
  virtual ~Aggregator() = default;

  // "summed_values", "sparse_add", "decode_add", "majority_vote", ...
  virtual absl::string_view name() const = 0;

  // Starts a round of n elements (buffers are kept across rounds).
  virtual void Reset(size_t n) = 0;

  // Adds one worker's payload. A malformed payload is an InvalidArgument error and leaves the
  // sum as it was (the payload is validated before anything is added). All payloads of one
  // round must carry the same key, round and seed in ctx (node may differ); otherwise
  // InvalidArgument.
  virtual absl::Status Add(absl::Span<const uint8_t> encoded, const CodecContext& ctx) = 0;

  // The fp32 sum of the decoded payloads added since Reset (zeros if none), valid until the
  // next Reset. FailedPrecondition before Reset. InvalidArgument, naming why, when payloads
  // that each passed Add disagree as a whole (only aggregators whose payloads refer to each
  // other: artopk's name the round's chooser, which must have pushed); the server then fails
  // the round for every worker with that message.
  virtual absl::StatusOr<absl::Span<const float>> Finish() = 0;

  // Payloads added since Reset.
  virtual size_t count() const = 0;

  // For codecs with properties().sum_in_push_format: the sum of the payloads added since Reset
  // in the codec's own format, lossless (what Encode of Finish()'s sum at threshold 0 would
  // write), built without a dense buffer; valid until the next Reset or Add. InvalidArgument,
  // naming the elements, when the sum is beyond fp32's range (finite pushes can overflow),
  // which Encode refuses too. Others: Unimplemented.
  virtual absl::StatusOr<absl::Span<const uint8_t>> EncodedSum();
};

// Takes ownership of codec (an instance made for this partition) and returns the cheapest
// correct aggregator for it (see the list above).
absl::StatusOr<std::unique_ptr<Aggregator>> CreateAggregator(std::unique_ptr<Codec> codec);
// Creates the codec by name and parameters first.
absl::StatusOr<std::unique_ptr<Aggregator>> CreateAggregator(absl::string_view codec_name,
                                                             const CodecParams& params = {});

// The generic ones, for codecs' own aggregator_factory and for tests.
std::unique_ptr<Aggregator> MakeDecodeAddAggregator(std::unique_ptr<Codec> codec);
std::unique_ptr<Aggregator> MakeSummedValuesAggregator(std::unique_ptr<Codec> codec);

// Checks that ctx matches the first payload's key, round and seed; helper for aggregators.
absl::Status CheckSameRound(const CodecContext& first, const CodecContext& ctx);

}  // namespace bytecomp::compress
