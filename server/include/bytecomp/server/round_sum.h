// The sum of one key's accumulating round, and the result it answers pulls with. Which pushes
// belong to the round is KeyRounds' business (key_rounds.h); this class sums what it is given.
//
// Raw values: fp32 is summed in place, the round's first push becoming the sum (its receive
// buffer: no copy); fp16/bf16, and an fp32 frame that is not float-aligned, are summed in an
// fp32 buffer here and answered in the tensor's dtype. Compressed pushes wait until every
// pusher pushed and are then aggregated in worker-rank order with the codec's aggregator
// (majority vote, sparse add, summed values, decode-and-add), so a round's result does not
// depend on arrival order (bit-reproducible). The result is the fp32 sum, or for two-way
// compression its re-encoding with the pull codec and the server's error-feedback memory; the
// aggregator, the pull codec and the memory are kept across rounds while the strategy version
// (and stage, for the aggregator) stays. blocksparse answers with the block-sparse sum in its
// own format, one-way too (CodecProperties::sum_in_push_format): nothing dense on the way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bytecomp/compress.h"
#include "bytecomp/server/catalog.h"
#include "bytecomp/server/key_rounds.h"
#include "data.pb.h"
#include "zmq.hpp"

namespace bytecomp::server {

class RoundSum {
 public:
  // A raw push of `h.element_count()` values of `h.dtype()`; `first`: the round's first.
  void AddRaw(const proto::DataHeader& h, zmq::message_t payload, bool first);
  // A compressed push of worker `sender` (of `num_workers`), kept for FinishEncoded.
  void AddEncoded(int sender, int num_workers, zmq::message_t payload);

  // The raw round's sum in the dtype of `h` (the last push's header).
  RoundResult FinishRaw(const proto::DataHeader& h);
  // Aggregates the pushes of `pushers` (ascending ranks) with the codec that `h` (the last
  // push's header) names under `catalog`'s plan for the key; server `my_rank` re-encodes for
  // two-way compression. An error names what failed (a worker's push it could not add).
  absl::StatusOr<RoundResult> FinishEncoded(const proto::DataHeader& h, const Catalog& catalog,
                                            const std::vector<int>& pushers, int my_rank);
  // The round failed (an abort): what it was given is dropped.
  void Drop();

 private:
  // The key's codec objects, kept across rounds while version and stage stay.
  struct CodecState {
    uint64_t version = 0;
    uint32_t stage = 0;
    size_t elements = 0;
    std::unique_ptr<compress::Aggregator> aggregator;
    compress::TensorPlan plan;
    bool encoded_sum_answers = false;               // pulls get aggregator->EncodedSum()
    std::unique_ptr<compress::Codec> pull_codec;    // two-way
    std::unique_ptr<compress::Memory> pull_memory;  // the server's error feedback
    std::vector<float> compensated, decoded;        // scratch for EncodeWithMemory
  };

  absl::Status PrepareCodec(const proto::DataHeader& h, const Catalog& catalog);
  absl::StatusOr<RoundResult> Aggregate(const proto::DataHeader& h, const Catalog& catalog,
                                        const std::vector<int>& pushers, int my_rank);

  zmq::message_t accumulator_;   // raw fp32: the first push's buffer, summed in place
  std::vector<float> wide_sum_;  // raw fp16/bf16 (or misaligned fp32): summed in fp32 here
  std::unique_ptr<CodecState> codec_;
  // Compressed pushes by worker rank, until the round completes.
  std::vector<zmq::message_t> encoded_;
};

}  // namespace bytecomp::server
