// Device tensors' stages (bytecomp_push_pull_device). Per operation, where the strategy and
// the device allow:
//   push: encode on the device (DeviceCodec, memory fused) -> copy the payload to pinned host
//         memory -> PUSH;  or copy the tensor to pinned host memory -> the host stages
//         (uncompressed push, or encode on the pool)
//   pull: copy the payload to the device -> decode there into the tensor;  or the host stages
//         (decode on the pool, or the uncompressed sum) -> copy the partition to the device
//   a two-round codec encoded on the device (DeviceTwoRound): payload 1 as above; the first
//         sum copied to the device -> EncodeSecond -> payload 2 pushed; the second sum copied
//         to the device -> DecodeSecond into the tensor
// Every device step is queued on the caller's stream, after the work that produced the
// gradient; the host steps that follow one start from DeviceBackend::WhenReached.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "bytecomp/cpu_offload.h"
#include "bytecomp/worker/device_backend.h"
#include "host_pipeline.h"
#include "stage_pipeline.h"

namespace bytecomp::worker {

class DevicePipeline : public StagePipeline {
 public:
  DevicePipeline(StageContext context, HostPipeline& host) : ctx_(context), host_(host) {}

  // Where the request's tensor lives: the process's device backend (made with the first
  // device tensor, so host-only jobs never touch CUDA) and the engine's pinned host memory.
  // Errors name the tensor: no backend, or a device that does not exist.
  absl::StatusOr<std::unique_ptr<DeviceWork>> WorkFor(const PushPullRequest& request)
      ABSL_LOCKS_EXCLUDED(mu_);

  void Start(const std::shared_ptr<Operation>& op) override;
  void Pulled(const std::shared_ptr<Operation>& op, int64_t partition, uint32_t stage,
              zmq::message_t payload, int server) override;
  // Copies the result to the device, then reports it.
  void ResultWritten(const std::shared_ptr<Operation>& op, int64_t partition) override {
    CopyResultToDevice(op, partition);
  }

  // DeviceBackend::WhenReached, counted so that shutdown can wait for the callbacks (they call
  // into the engine) before it goes.
  absl::Status AfterDevice(const DeviceWork& d, absl::AnyInvocable<void()> work)
      ABSL_LOCKS_EXCLUDED(mu_);
  void WaitForCallbacks(int64_t deadline_ms) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void EncodeOnDevice(const std::shared_ptr<Operation>& op, int64_t partition);
  void DecodeOnDevice(const std::shared_ptr<Operation>& op, int64_t partition,
                      zmq::message_t payload, int server);
  // A two-round codec on the device: the servers' stage 1 sum (encode stage 2, push it) or
  // stage 2 sum (decode into the tensor).
  void SumOnDevice(const std::shared_ptr<Operation>& op, int64_t partition, uint32_t stage,
                   zmq::message_t payload);
  // After a decode into the tensor was queued on the stream (`status`: whether it was): the
  // result reported once the stream has passed it (`staged`, the payload's pinned copy, held
  // until then), or the partition failed.
  void ReportDecodedOnDevice(const std::shared_ptr<Operation>& op, int64_t partition,
                             absl::Status status,
                             std::shared_ptr<cpu_offload::PinnedBuffer> staged);
  // `buffer` (holding `held` bytes) made at least `bytes` long on the device.
  static absl::Status EnsureDeviceBuffer(const DeviceWork& d, size_t bytes,
                                         DeviceAllocation& buffer, size_t& held);
  // A pulled payload copied into `staged` (pinned; keep it until the stream has passed the
  // copy) and from there to pc.device_pulled, queued on the stream.
  static absl::Status PayloadToDevice(const DeviceWork& d, PartitionCodec& pc,
                                      const zmq::message_t& payload,
                                      cpu_offload::PinnedBuffer& staged);
  // The device payload of `bytes` (pc.device_encoded) to a pinned buffer of the push, queued on
  // the stream.
  absl::Status CopyPushToHost(const DeviceWork& d, const PartitionCodec& pc, EncodedPush& push,
                              size_t bytes);
  // The partition's result is in the pinned host copy: copy it to the device, then report it.
  void CopyResultToDevice(const std::shared_ptr<Operation>& op, int64_t partition);
  // A plan with a collective scheme: summed in place on the device where SumsInPlace says so
  // (NCCL); otherwise through the tensor's pinned host copy, where the host stages encode, sum
  // (gloo) and decode it.
  void StartCollective(const std::shared_ptr<Operation>& op);
  // An uncompressed allreduce of an fp32, fp16 or bf16 tensor on a CUDA device, with
  // collectives that sum device memory (an engine built with NCCL).
  bool SumsInPlace(const Operation& op) const;
  // Fails every partition of an operation that could not start, pushing aborts so that the
  // round completes on the servers.
  void Abort(const std::shared_ptr<Operation>& op, const absl::Status& status);

  const StageContext ctx_;
  HostPipeline& host_;

  absl::Mutex mu_;
  DeviceBackend* backend_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::unique_ptr<cpu_offload::PinnedMemoryPool> pinned_ ABSL_GUARDED_BY(mu_);
  int64_t callbacks_ ABSL_GUARDED_BY(mu_) = 0;  // AfterDevice callbacks not yet run
  absl::CondVar callbacks_drained_;             // callbacks_ reached 0
};

}  // namespace bytecomp::worker
