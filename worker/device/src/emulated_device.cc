#include "bytecomp/worker/emulated_device.h"

#include <cstdlib>
#include <cstring>
#include <future>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/compress.h"
#include "bytecomp/compress/gpu_codecs.h"
#include "bytecomp/compress/strategy.h"
#include "bytecomp/compress/two_round.h"

namespace bytecomp::worker {
namespace {

// The CPU codec and memory, called on the executor thread in stream order. A two-round codec's
// rounds run as the host pipeline runs them (memory Compensate, EncodeFirst; EncodeSecond,
// LocalApproximation, memory Update; DecodeSecond).
class EmulatedDeviceCodec : public DeviceCodec, public DeviceTwoRound {
 public:
  EmulatedDeviceCodec(EmulatedDeviceBackend* backend, int device,
                      std::unique_ptr<compress::Codec> codec,
                      std::unique_ptr<compress::Memory> memory)
      : backend_(backend),
        device_(device),
        codec_(std::move(codec)),
        memory_(std::move(memory)),
        two_(compress::AsTwoRound(*codec_)) {}

  DeviceTwoRound* two_round() override { return two_ != nullptr ? this : nullptr; }
  size_t FirstRoundBytes(size_t n) const override { return two_->FirstRoundBytes(n); }
  size_t SecondRoundBytes(size_t n) const override { return two_->SecondRoundBytes(n); }

  absl::StatusOr<size_t> EncodeFirst(const float* input, size_t n,
                                     const compress::CodecContext& ctx, uint8_t* out,
                                     size_t capacity, DeviceStream stream) override {
    backend_->CountCodecCall(true);
    absl::StatusOr<size_t> result = absl::InternalError("emulated encode did not run");
    absl::Status queued = backend_->RunAndWait(device_, stream, [&] {
      absl::Status s = absl::OkStatus();
      if (memory_ != nullptr) {
        compensated_.resize(n);
        s = memory_->Compensate(absl::MakeConstSpan(input, n), ctx, absl::MakeSpan(compensated_));
      } else {
        compensated_.assign(input, input + n);
      }
      result = s.ok() ? two_->EncodeFirst(compensated_, ctx, absl::MakeSpan(out, capacity))
                      : absl::StatusOr<size_t>(s);
    });
    if (!queued.ok()) return queued;
    return result;
  }

  absl::StatusOr<size_t> EncodeSecond(const float* summed_first, size_t floats,
                                      const compress::CodecContext& ctx, uint8_t* out,
                                      size_t capacity, DeviceStream stream) override {
    backend_->CountCodecCall(true);
    absl::StatusOr<size_t> result = absl::InternalError("emulated encode did not run");
    absl::Status queued = backend_->RunAndWait(device_, stream, [&] {
      result = two_->EncodeSecond(absl::MakeConstSpan(summed_first, floats), ctx,
                                  absl::MakeSpan(out, capacity));
      if (result.ok() && memory_ != nullptr) {
        decoded_.resize(compensated_.size());
        absl::Status s = two_->LocalApproximation(absl::MakeSpan(decoded_));
        if (s.ok()) s = memory_->Update(compensated_, decoded_, ctx);
        if (!s.ok()) result = s;
      }
    });
    if (!queued.ok()) return queued;
    return result;
  }

  absl::Status DecodeSecond(const float* summed_second, size_t floats,
                            const compress::CodecContext& ctx, float* output, size_t n,
                            DeviceStream stream) override {
    backend_->CountCodecCall(false);
    absl::Status result = absl::InternalError("emulated decode did not run");
    absl::Status queued = backend_->RunAndWait(device_, stream, [&] {
      result = two_->DecodeSecond(absl::MakeConstSpan(summed_second, floats), ctx,
                                  absl::MakeSpan(output, n));
    });
    return queued.ok() ? result : queued;
  }

  size_t MaxEncodedBytes(size_t n) const override { return codec_->MaxEncodedBytes(n); }

  absl::StatusOr<size_t> Encode(const float* input, size_t n, const compress::CodecContext& ctx,
                                uint8_t* out, size_t capacity, DeviceStream stream) override {
    backend_->CountCodecCall(true);
    absl::StatusOr<size_t> result = absl::InternalError("emulated encode did not run");
    absl::Status queued = backend_->RunAndWait(device_, stream, [&] {
      result =
          compress::EncodeWithMemory(*codec_, memory_.get(), absl::MakeConstSpan(input, n), ctx,
                                     absl::MakeSpan(out, capacity), compensated_, decoded_);
    });
    if (!queued.ok()) return queued;
    return result;
  }

  absl::Status Decode(const uint8_t* encoded, size_t bytes, const compress::CodecContext& ctx,
                      float* output, size_t n, DeviceStream stream) override {
    backend_->CountCodecCall(false);
    absl::Status result = absl::InternalError("emulated decode did not run");
    absl::Status queued = backend_->RunAndWait(device_, stream, [&] {
      result = codec_->Decode(absl::MakeConstSpan(encoded, bytes), ctx, absl::MakeSpan(output, n));
    });
    return queued.ok() ? result : queued;
  }

 private:
  EmulatedDeviceBackend* backend_;
  int device_;
  std::unique_ptr<compress::Codec> codec_;
  std::unique_ptr<compress::Memory> memory_;
  compress::TwoRoundCodec* two_;  // codec_'s two-round side, or null
  std::vector<float> compensated_, decoded_;
};

cpu_offload::ThreadPoolOptions OneThread(const char* name) {
  cpu_offload::ThreadPoolOptions options;
  options.num_threads = 1;
  options.name = name;
  return options;
}

}  // namespace

EmulatedDeviceBackend::EmulatedDeviceBackend()
    : executor_(std::make_unique<cpu_offload::PriorityThreadPool>(OneThread("bc-emu-stream"))),
      callbacks_(std::make_unique<cpu_offload::PriorityThreadPool>(OneThread("bc-emu-callback"))) {}

EmulatedDeviceBackend::~EmulatedDeviceBackend() {
  executor_->Shutdown();  // runs every queued stream task, which may queue callbacks
  callbacks_->Shutdown();
}

absl::Status EmulatedDeviceBackend::CheckDevice(int device) const {
  if (device < 0 || device >= kDevices) {
    return absl::InvalidArgumentError(absl::StrCat(
        "emulated device ", device, " does not exist (devices 0..", kDevices - 1, ")"));
  }
  return absl::OkStatus();
}

absl::Status EmulatedDeviceBackend::QueueWork(int device, DeviceStream /*stream*/,
                                              absl::AnyInvocable<void()> work) {
  if (absl::Status s = CheckDevice(device); !s.ok()) return s;
  // One priority: the pool is FIFO among equals, and its single thread keeps that order.
  return executor_->Submit(0, [work = std::move(work)](absl::Status status) mutable {
    if (status.ok()) work();
  });
}

absl::Status EmulatedDeviceBackend::RunAndWait(int device, DeviceStream stream,
                                               absl::AnyInvocable<void()> work) {
  std::promise<void> done;
  std::future<void> finished = done.get_future();
  absl::Status queued = QueueWork(device, stream, [&work, &done] {
    work();
    done.set_value();
  });
  if (!queued.ok()) return queued;
  finished.wait();
  return absl::OkStatus();
}

EmulatedDeviceStats EmulatedDeviceBackend::stats() const {
  EmulatedDeviceStats s;
  s.encodes = encodes_.load();
  s.decodes = decodes_.load();
  s.copies = copies_.load();
  return s;
}

absl::StatusOr<DeviceAllocation> EmulatedDeviceBackend::Allocate(int device, size_t bytes) {
  if (absl::Status s = CheckDevice(device); !s.ok()) return s;
  // Rounded up to 256 bytes, the alignment cudaMalloc gives.
  void* p = std::aligned_alloc(256, std::max<size_t>(256, (bytes + 255) / 256 * 256));
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("emulated device ", device, ": allocating ", bytes, " bytes failed"));
  }
  return DeviceAllocation(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

absl::Status EmulatedDeviceBackend::CopyToHost(int device, DeviceStream stream, void* host,
                                               const void* device_src, size_t bytes) {
  ++copies_;
  return QueueWork(device, stream, [=] { std::memcpy(host, device_src, bytes); });
}

absl::Status EmulatedDeviceBackend::CopyToDevice(int device, DeviceStream stream, void* device_dst,
                                                 const void* host, size_t bytes) {
  ++copies_;
  return QueueWork(device, stream, [=] { std::memcpy(device_dst, host, bytes); });
}

absl::Status EmulatedDeviceBackend::WhenReached(int device, DeviceStream stream,
                                                absl::AnyInvocable<void()> callback) {
  cpu_offload::PriorityThreadPool* callbacks = callbacks_.get();
  return QueueWork(device, stream, [callbacks, callback = std::move(callback)]() mutable {
    // Like the CUDA backend: the stream goes on while the callback runs elsewhere.
    callbacks->Submit(0, [callback = std::move(callback)](absl::Status) mutable { callback(); })
        .IgnoreError();  // a refused task was run with Cancelled: the callback ran
  });
}

absl::StatusOr<std::unique_ptr<DeviceCodec>> EmulatedDeviceBackend::CreateCodec(
    int device, absl::string_view codec, const compress::CodecParams& params,
    absl::string_view memory, const compress::CodecParams& memory_params) {
  if (absl::Status s = CheckDevice(device); !s.ok()) return s;
  // The GPU's offer, so a strategy that works here places codecs as it would on a GPU.
  if (!compress::HasGpuCodec(codec)) {
    return absl::NotFoundError(absl::StrCat("no device kernels for codec '", codec, "'"));
  }
  if (!compress::GpuMemorySupported(codec, memory)) {
    return absl::NotFoundError(
        absl::StrCat("device codec '", codec, "' cannot fuse memory '", memory, "'"));
  }
  absl::StatusOr<std::unique_ptr<compress::Codec>> cpu = compress::CreateCodec(codec, params);
  if (!cpu.ok()) return cpu.status();
  std::unique_ptr<compress::Memory> cpu_memory;
  if (!compress::IsNoneName(memory)) {
    absl::StatusOr<std::unique_ptr<compress::Memory>> m =
        compress::CreateMemory(memory, memory_params);
    if (!m.ok()) return m.status();
    cpu_memory = *std::move(m);
  }
  return std::unique_ptr<DeviceCodec>(
      new EmulatedDeviceCodec(this, device, *std::move(cpu), std::move(cpu_memory)));
}

}  // namespace bytecomp::worker
