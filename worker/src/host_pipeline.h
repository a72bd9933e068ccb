// Host tensors' stages. A host tensor's path through the engine:
//   Start: uncompressed -> the data thread pushes straight from the caller's memory;
//          compressed   -> Encode each partition (codec pool, or inline on the calling thread
//                          when the strategy says INLINE) -> an EncodedPush to the data thread
//   Pulled (from the data thread) -> codec pool -> WriteResult into the caller's memory
//          (decoded, or the raw sum copied; averaged if asked) -> the partition's result is in
// Two-round codecs (PowerSGD, artopk): stage 1's reply goes to EncodeSecondRound, which pushes
// stage 2; the result comes with stage 2's reply.
//
// The device pipeline runs the same host stages for the parts of a device tensor that run on
// the host: they read and write op->host_data(), the pinned host copy for a device tensor.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "data_commands.h"
#include "partition_codec.h"
#include "stage_pipeline.h"

namespace bytecomp::worker {

class HostPipeline : public StagePipeline {
 public:
  explicit HostPipeline(StageContext context) : ctx_(context) {}

  void Start(const std::shared_ptr<Operation>& op) override;
  void Pulled(const std::shared_ptr<Operation>& op, int64_t partition, uint32_t stage,
              zmq::message_t payload, int server) override;

  // The host stages (each on one partition, one task at a time):
  // Encodes the partition with its error-feedback memory and queues the push (or its abort).
  void Encode(const std::shared_ptr<Operation>& op, int64_t partition);
  // Two-round codecs (two_round.h: PowerSGD, artopk), the reply to stage 1 (PowerSGD: the sum
  // of the workers' P; artopk: the chosen indices): encodes stage 2, updates the memory and
  // queues stage 2's push (or its abort).
  void EncodeSecondRound(const std::shared_ptr<Operation>& op, int64_t partition,
                         zmq::message_t payload);
  // Writes the pulled partition into host_data(): decoded (an fp32 sum that is not averaged
  // straight into the tensor), or the raw sum copied; averaged when asked. The error names the
  // tensor and partition.
  absl::Status WriteResult(const Operation& op, int64_t partition, uint32_t stage,
                           const zmq::message_t& payload, int server);
  // A partition that could not be encoded: the round still has to complete on the server for
  // the other workers, so push an abort, whose error every worker then receives for this round.
  void PushEncodeFailure(const std::shared_ptr<EncodedPush>& push, const absl::Status& status);

 private:
  // Adaptive ratio (ratio_windows.h): the energy of what the memory was updated with, the
  // compensated gradient and what was sent of it, into pc (-1: not measured).
  void MeasureKeptEnergy(const Operation& op, PartitionCodec& pc, size_t n);
  // fp32 `sum` of the partition -> the tensor's dtype in host_data(), averaged when asked.
  void StoreSum(const Operation& op, int64_t partition, const float* sum) const;

  const StageContext ctx_;
};

}  // namespace bytecomp::worker
