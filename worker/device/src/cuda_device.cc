// The CUDA device backend: built only with BYTECOMP_HAVE_CUDA, and compile-checked only (no
// GPU where ByteComp's CI runs). Copies are cudaMemcpyAsync on the caller's stream;
// WhenReached is cudaLaunchHostFunc, whose function (on the driver's thread, where CUDA may not
// be called) only queues the callback on this backend's callback thread.
#include "cuda_device.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/cuda_codecs.h"
#include "bytecomp/cpu_offload/thread_pool.h"

namespace bytecomp::worker {
namespace {

absl::Status CudaError(absl::string_view what, cudaError_t rc) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(rc)));
}

// Makes `device` current for the scope and restores the caller's device (a training thread
// may be working on another one).
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    status_ = cudaSetDevice(device);
  }
  ~ScopedDevice() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  cudaError_t status() const { return status_; }

 private:
  int previous_ = -1;
  cudaError_t status_ = cudaSuccess;
};

class CudaDeviceCodec : public DeviceCodec, public DeviceTwoRound {
 public:
  CudaDeviceCodec(int device, std::unique_ptr<compress::cuda::CudaCodec> codec)
      : device_(device), codec_(std::move(codec)), two_(compress::cuda::AsCudaTwoRound(*codec_)) {}

  // A two-round codec's rounds: compress/cuda's CudaTwoRoundCodec, its memory fused.
  DeviceTwoRound* two_round() override { return two_ != nullptr ? this : nullptr; }
  size_t FirstRoundBytes(size_t n) const override { return two_->FirstRoundBytes(n); }
  size_t SecondRoundBytes(size_t n) const override { return two_->SecondRoundBytes(n); }
  absl::StatusOr<size_t> EncodeFirst(const float* input, size_t n,
                                     const compress::CodecContext& ctx, uint8_t* out,
                                     size_t capacity, DeviceStream stream) override {
    return OnDevice([&] {
      return two_->EncodeFirst(input, n, ctx, out, capacity, static_cast<cudaStream_t>(stream));
    });
  }
  absl::StatusOr<size_t> EncodeSecond(const float* summed_first, size_t floats,
                                      const compress::CodecContext& ctx, uint8_t* out,
                                      size_t capacity, DeviceStream stream) override {
    return OnDevice([&] {
      return two_->EncodeSecond(summed_first, floats, ctx, out, capacity,
                                static_cast<cudaStream_t>(stream));
    });
  }
  absl::Status DecodeSecond(const float* summed_second, size_t floats,
                            const compress::CodecContext& ctx, float* output, size_t n,
                            DeviceStream stream) override {
    return OnDevice([&] {
      return two_->DecodeSecond(summed_second, floats, ctx, output, n,
                                static_cast<cudaStream_t>(stream));
    });
  }
  size_t MaxEncodedBytes(size_t n) const override { return codec_->MaxEncodedBytes(n); }
  absl::StatusOr<size_t> Encode(const float* input, size_t n, const compress::CodecContext& ctx,
                                uint8_t* out, size_t capacity, DeviceStream stream) override {
    return OnDevice([&] {
      return codec_->Encode(input, n, ctx, out, capacity, static_cast<cudaStream_t>(stream));
    });
  }
  absl::Status Decode(const uint8_t* encoded, size_t bytes, const compress::CodecContext& ctx,
                      float* output, size_t n, DeviceStream stream) override {
    return OnDevice([&] {
      return codec_->Decode(encoded, bytes, ctx, output, n, static_cast<cudaStream_t>(stream));
    });
  }

 private:
  // `call` with the codec's device current (its result, or why the device could not be set).
  template <typename Call>
  auto OnDevice(Call call) -> decltype(call()) {
    ScopedDevice scoped(device_);
    if (scoped.status() != cudaSuccess) return CudaError("cudaSetDevice", scoped.status());
    return call();
  }

  int device_;
  std::unique_ptr<compress::cuda::CudaCodec> codec_;
  compress::cuda::CudaTwoRoundCodec* two_;  // codec_'s two-round side, or null
};

class CudaDeviceBackend : public DeviceBackend {
 public:
  explicit CudaDeviceBackend(int devices) : devices_(devices) {
    cpu_offload::ThreadPoolOptions options;
    options.num_threads = 1;
    options.name = "bc-cuda-callback";
    callbacks_ = std::make_unique<cpu_offload::PriorityThreadPool>(options);
  }

  absl::string_view name() const override { return "cuda"; }
  int device_count() const override { return devices_; }

  absl::StatusOr<DeviceAllocation> Allocate(int device, size_t bytes) override {
    ScopedDevice scoped(device);
    if (scoped.status() != cudaSuccess) return CudaError("cudaSetDevice", scoped.status());
    void* p = nullptr;
    if (cudaError_t rc = cudaMalloc(&p, std::max<size_t>(bytes, 1)); rc != cudaSuccess) {
      return CudaError(absl::StrCat("cudaMalloc of ", bytes, " bytes on device ", device), rc);
    }
    return DeviceAllocation(static_cast<uint8_t*>(p), [device](uint8_t* q) {
      ScopedDevice on(device);
      cudaFree(q);
    });
  }

  absl::Status CopyToHost(int device, DeviceStream stream, void* host, const void* device_src,
                          size_t bytes) override {
    return Copy(device, stream, host, device_src, bytes, cudaMemcpyDeviceToHost);
  }
  absl::Status CopyToDevice(int device, DeviceStream stream, void* device_dst, const void* host,
                            size_t bytes) override {
    return Copy(device, stream, device_dst, host, bytes, cudaMemcpyHostToDevice);
  }

  absl::Status WhenReached(int device, DeviceStream stream,
                           absl::AnyInvocable<void()> callback) override {
    ScopedDevice scoped(device);
    if (scoped.status() != cudaSuccess) return CudaError("cudaSetDevice", scoped.status());
    auto* pending = new Pending{callbacks_.get(), std::move(callback)};
    cudaError_t rc = cudaLaunchHostFunc(static_cast<cudaStream_t>(stream), &OnReached, pending);
    if (rc != cudaSuccess) {
      delete pending;
      return CudaError("cudaLaunchHostFunc", rc);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<DeviceCodec>> CreateCodec(
      int device, absl::string_view codec, const compress::CodecParams& params,
      absl::string_view memory, const compress::CodecParams& memory_params) override {
    ScopedDevice scoped(device);
    if (scoped.status() != cudaSuccess) return CudaError("cudaSetDevice", scoped.status());
    absl::StatusOr<std::unique_ptr<compress::cuda::CudaCodec>> made =
        compress::cuda::CudaCodec::Create(codec, params, memory.empty() ? "none" : memory,
                                          memory_params);
    if (!made.ok()) return made.status();
    return std::unique_ptr<DeviceCodec>(new CudaDeviceCodec(device, *std::move(made)));
  }

 private:
  struct Pending {
    cpu_offload::PriorityThreadPool* callbacks;
    absl::AnyInvocable<void()> callback;
  };
  // On the driver's callback thread: no CUDA calls here, only hand the callback on.
  static void CUDART_CB OnReached(void* raw) {
    std::unique_ptr<Pending> pending(static_cast<Pending*>(raw));
    pending->callbacks
        ->Submit(0, [callback = std::move(pending->callback)](absl::Status) mutable { callback(); })
        .IgnoreError();
  }

  absl::Status Copy(int device, DeviceStream stream, void* dst, const void* src, size_t bytes,
                    cudaMemcpyKind kind) {
    ScopedDevice scoped(device);
    if (scoped.status() != cudaSuccess) return CudaError("cudaSetDevice", scoped.status());
    if (cudaError_t rc = cudaMemcpyAsync(dst, src, bytes, kind, static_cast<cudaStream_t>(stream));
        rc != cudaSuccess) {
      return CudaError("cudaMemcpyAsync", rc);
    }
    return absl::OkStatus();
  }

  int devices_;
  std::unique_ptr<cpu_offload::PriorityThreadPool> callbacks_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceBackend>> MakeCudaDeviceBackend() {
  int devices = 0;
  const cudaError_t rc = cudaGetDeviceCount(&devices);
  if (rc != cudaSuccess || devices < 1) {
    cudaGetLastError();  // clear the sticky error for later CUDA calls in the process
    return absl::InvalidArgumentError(
        absl::StrCat("no usable CUDA device for a device tensor (cudaGetDeviceCount: ",
                     rc != cudaSuccess ? cudaGetErrorString(rc) : "0 devices",
                     "); pass a host tensor to bytecomp_push_pull instead"));
  }
  return std::unique_ptr<DeviceBackend>(new CudaDeviceBackend(devices));
}

}  // namespace bytecomp::worker
