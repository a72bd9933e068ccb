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
#include "collective_exchange.h"
#include "data_commands.h"
#include "partition_codec.h"
#include "stage_pipeline.h"

namespace bytecomp::worker {

class HostPipeline : public StagePipeline {
 public:
  explicit HostPipeline(StageContext context) : ctx_(context) {}
  // The engine's collectives (ClusterConfig.collectives), set before the first operation;
  // null: operations whose plan names a collective scheme fail.
  void SetCollectives(CollectiveExchange* collectives) { collectives_ = collectives; }

  void Start(const std::shared_ptr<Operation>& op) override;
  void Pulled(const std::shared_ptr<Operation>& op, int64_t partition, uint32_t stage,
              zmq::message_t payload, int server) override;
  void ResultWritten(const std::shared_ptr<Operation>& op, int64_t partition) override;

  // The host stages (each on one partition, one task at a time):
  // Encodes the partition with its error-feedback memory and queues the push (or its abort).
  void Encode(const std::shared_ptr<Operation>& op, int64_t partition);
  // Two-round codecs (two_round.h: PowerSGD, artopk), the reply to stage 1 (PowerSGD: the sum
  // of the workers' P; artopk: the chosen indices): encodes stage 2, updates the memory and
  // queues stage 2's push (or its abort).
  void EncodeSecondRound(const std::shared_ptr<Operation>& op, int64_t partition,
                         zmq::message_t payload);
  // The same with the sum in hand (the collectives').
  void EncodeSecondRound(const std::shared_ptr<Operation>& op, int64_t partition,
                         absl::Span<const float> summed_first);
  // Writes the pulled partition into host_data(): decoded (an fp32 sum that is not averaged
  // straight into the tensor), or the raw sum copied; averaged when asked. The error names the
  // tensor and partition.
  absl::Status WriteResult(const Operation& op, int64_t partition, uint32_t stage,
                           const zmq::message_t& payload, int server);
  // Whether the collectives sum device memory in place (CollectiveExchange::sums_device_memory:
  // NCCL), so that DevicePipeline may give a device tensor's partitions as they are.
  bool SumsDeviceMemory() const {
    return collectives_ != nullptr && collectives_->sums_device_memory();
  }
  // A device tensor's partition for an uncompressed allreduce, summed in place on the device;
  // its result is reported from there (no copy back).
  void SubmitDeviceCollective(const std::shared_ptr<Operation>& op, int64_t partition,
                              DeviceValues values);
  // A partition that could not be encoded: the round still has to complete on the server for
  // the other workers, so push an abort, whose error every worker then receives for this round.
  void PushEncodeFailure(const std::shared_ptr<EncodedPush>& push, const absl::Status& status);

 private:
  // An encoded push (or its abort) leaves: to the data thread, or, when the plan names a
  // collective scheme, to the collectives (SubmitCollective).
  void Send(const std::shared_ptr<EncodedPush>& push);
  // --- Collectives (collective_exchange.h): the partition's contribution (allreduce: its
  // values that sum; allgather: its payload), and its result written into the tensor.
  void StartCollective(const std::shared_ptr<Operation>& op);
  // `item` brings the contribution (values, source or payload; its wire type; aborted); the
  // rest is filled in here.
  void SubmitCollective(const std::shared_ptr<Operation>& op, int64_t partition, uint32_t stage,
                        CollectiveItem item);
  absl::Status WriteCollectiveResult(const std::shared_ptr<Operation>& op, int64_t partition,
                                     uint32_t stage, const CollectiveResult& result);
  // The partition's fp32 sum in `out` (the tensor itself when fp32, else pc.output): averaged
  // there, or stored into the tensor's dtype and averaged.
  void FinishSum(const Operation& op, int64_t partition, absl::Span<float> out) const;
  // Adaptive ratio (ratio_windows.h): the energy of what the memory was updated with, the
  // compensated gradient and what was sent of it, into pc (-1: not measured).
  void MeasureKeptEnergy(const Operation& op, PartitionCodec& pc, size_t n);
  // fp32 `sum` of the partition -> the tensor's dtype in host_data(), averaged when asked.
  void StoreSum(const Operation& op, int64_t partition, const float* sum) const;

  const StageContext ctx_;
  CollectiveExchange* collectives_ = nullptr;
};

}  // namespace bytecomp::worker
