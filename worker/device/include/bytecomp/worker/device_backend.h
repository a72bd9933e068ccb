// The worker engine's view of a device (GPU): memory, copies and host callbacks ordered on the
// caller's stream, and codecs that run on the device. Two implementations:
//   "cuda"      CUDA runtime + compress/cuda kernels (built with BYTECOMP_HAVE_CUDA; needs a GPU)
//   "emulated"  a test facility: "device memory" is host memory, a stream is a queue served by
//               one thread, device codecs are the CPU codecs run on that thread
//               (emulated_device.h). Chosen only by BYTECOMP_DEVICE_BACKEND=emulated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bytecomp/compress/codec.h"

namespace bytecomp::worker {

using DeviceStream = void*;  // cudaStream_t; null is the legacy default stream

// Device memory from DeviceBackend::Allocate; freed (by the backend) on destruction.
using DeviceAllocation = std::unique_ptr<uint8_t, std::function<void(uint8_t*)>>;

// The two rounds of a two-round codec (compress/two_round.h: PowerSGD's P, then Q) on the
// device, its error-feedback memory fused: EncodeFirst compensates the input and writes payload
// 1; EncodeSecond takes the servers' sum of payload 1 (f32 in device memory) and writes payload
// 2, updating the memory with this worker's own approximation; DecodeSecond takes the sum of
// payload 2 and writes the approximation of the workers' sum. Each returns once queued on
// stream (EncodeFirst and EncodeSecond: once the payload's size is known); errors as the CPU
// codec's. Not thread-safe (one task at a time).
class DeviceTwoRound {
 public:
  virtual ~DeviceTwoRound() = default;
  virtual size_t FirstRoundBytes(size_t n) const = 0;
  virtual size_t SecondRoundBytes(size_t n) const = 0;
  virtual absl::StatusOr<size_t> EncodeFirst(const float* input, size_t n,
                                             const compress::CodecContext& ctx, uint8_t* out,
                                             size_t capacity, DeviceStream stream) = 0;
  virtual absl::StatusOr<size_t> EncodeSecond(const float* summed_first, size_t floats,
                                              const compress::CodecContext& ctx, uint8_t* out,
                                              size_t capacity, DeviceStream stream) = 0;
  virtual absl::Status DecodeSecond(const float* summed_second, size_t floats,
                                    const compress::CodecContext& ctx, float* output, size_t n,
                                    DeviceStream stream) = 0;
};

// One partition's codec in one direction, running on the device, with its error-feedback
// memory fused (its state lives on the device). Not thread-safe (one task at a time).
class DeviceCodec {
 public:
  virtual ~DeviceCodec() = default;
  virtual size_t MaxEncodedBytes(size_t n) const = 0;
  // Encodes n floats at device pointer input into the device buffer out on stream, after the
  // work queued there before; returns the payload size once it is known (the caller's thread
  // waits for the stream). The payload is complete when the stream reaches this point.
  virtual absl::StatusOr<size_t> Encode(const float* input, size_t n,
                                        const compress::CodecContext& ctx, uint8_t* out,
                                        size_t capacity, DeviceStream stream) = 0;
  // Decodes a payload in device memory into n floats at device pointer output, on stream.
  virtual absl::Status Decode(const uint8_t* encoded, size_t bytes,
                              const compress::CodecContext& ctx, float* output, size_t n,
                              DeviceStream stream) = 0;
  // The codec's two rounds, for a two-round codec (the push goes through them); else null.
  virtual DeviceTwoRound* two_round() { return nullptr; }
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual absl::string_view name() const = 0;  // "cuda" or "emulated"
  virtual int device_count() const = 0;

  virtual absl::StatusOr<DeviceAllocation> Allocate(int device, size_t bytes) = 0;
  // Queue a copy on stream, after the work queued there before. The host memory (pinned) must
  // stay valid until the stream has passed the copy (see WhenReached).
  virtual absl::Status CopyToHost(int device, DeviceStream stream, void* host,
                                  const void* device_src, size_t bytes) = 0;
  virtual absl::Status CopyToDevice(int device, DeviceStream stream, void* device_dst,
                                    const void* host, size_t bytes) = 0;
  // Calls callback once the stream has done everything queued on it before this call. It runs
  // on the backend's own callback thread (never a driver or stream thread), in the order of
  // the WhenReached calls, so it may call the backend; it should be short (queue work).
  virtual absl::Status WhenReached(int device, DeviceStream stream,
                                   absl::AnyInvocable<void()> callback) = 0;
  // A device codec for `codec` with `memory` fused ("" or "none": no memory); NotFound when
  // the device has no kernels for it (compress/gpu_codecs.h lists those that do).
  virtual absl::StatusOr<std::unique_ptr<DeviceCodec>> CreateCodec(
      int device, absl::string_view codec, const compress::CodecParams& params,
      absl::string_view memory, const compress::CodecParams& memory_params) = 0;
};

// The backend that BYTECOMP_DEVICE_BACKEND names: "emulated" (the test facility), "cuda", or
// unset/"auto": CUDA when this build has it. Errors (InvalidArgument) say why there is none:
// a build without CUDA, no usable device (cudaGetDeviceCount's error), or an unknown name.
absl::StatusOr<std::unique_ptr<DeviceBackend>> MakeDeviceBackend(absl::string_view choice);

// Whether this library has the CUDA backend (built with CUDA).
bool CudaBackendBuilt();

// The process's backend, made on the first successful call (from BYTECOMP_DEVICE_BACKEND) and
// kept for the life of the process; failures are not remembered, so a later call retries.
absl::StatusOr<DeviceBackend*> ProcessDeviceBackend();

}  // namespace bytecomp::worker
