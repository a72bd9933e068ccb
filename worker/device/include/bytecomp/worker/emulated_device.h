// The emulated device, a test facility (BYTECOMP_DEVICE_BACKEND=emulated): it runs the worker
// engine's device path (stream ordering, staging copies, device codecs, copies back) on a
// machine without a GPU.
//   - "Device memory" is ordinary host memory: a device pointer is a host pointer.
//   - Every stream's work (copies, codec calls, QueueWork) runs on one executor thread in the
//     order it was queued. That keeps each stream's order (and orders streams against each
//     other, which CUDA does not).
//   - WhenReached callbacks run on a second thread, in order, once the executor passed them.
//   - Device codecs are the CPU codecs (compress::CreateCodec + EncodeWithMemory, Decode), run
//     on the executor; the codecs and memories offered are the GPU's (compress/gpu_codecs.h).
//     So the emulation checks the engine's plumbing, not the CUDA kernels.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "bytecomp/cpu_offload/thread_pool.h"
#include "bytecomp/worker/device_backend.h"

namespace bytecomp::worker {

// What the emulated device ran, so that tests can tell the device path from the host one.
struct EmulatedDeviceStats {
  int64_t encodes = 0;  // DeviceCodec::Encode calls
  int64_t decodes = 0;
  int64_t copies = 0;  // both directions
};

class EmulatedDeviceBackend : public DeviceBackend {
 public:
  static constexpr int kDevices = 8;
  EmulatedDeviceBackend();
  ~EmulatedDeviceBackend() override;  // runs what is queued, then stops the threads

  absl::string_view name() const override { return "emulated"; }
  int device_count() const override { return kDevices; }
  absl::StatusOr<DeviceAllocation> Allocate(int device, size_t bytes) override;
  absl::Status CopyToHost(int device, DeviceStream stream, void* host, const void* device_src,
                          size_t bytes) override;
  absl::Status CopyToDevice(int device, DeviceStream stream, void* device_dst, const void* host,
                            size_t bytes) override;
  absl::Status WhenReached(int device, DeviceStream stream,
                           absl::AnyInvocable<void()> callback) override;
  absl::StatusOr<std::unique_ptr<DeviceCodec>> CreateCodec(
      int device, absl::string_view codec, const compress::CodecParams& params,
      absl::string_view memory, const compress::CodecParams& memory_params) override;

  // Queues work on a stream as a framework's kernel would (tests: the work that produces a
  // gradient). Runs on the executor thread.
  absl::Status QueueWork(int device, DeviceStream stream, absl::AnyInvocable<void()> work);
  // Queues work and waits for it (what a device codec's synchronising call does).
  absl::Status RunAndWait(int device, DeviceStream stream, absl::AnyInvocable<void()> work);

  EmulatedDeviceStats stats() const;
  void CountCodecCall(bool encode) { ++(encode ? encodes_ : decodes_); }

 private:
  absl::Status CheckDevice(int device) const;
  std::unique_ptr<cpu_offload::PriorityThreadPool> executor_;   // the streams
  std::unique_ptr<cpu_offload::PriorityThreadPool> callbacks_;  // WhenReached
  std::atomic<int64_t> encodes_{0}, decodes_{0}, copies_{0};
};

}  // namespace bytecomp::worker
