// Device tensors (bytecomp_push_pull_device). Per operation, where the strategy and the device
// allow:
//   push: encode on the device (DeviceCodec, memory fused) -> copy the payload to pinned host
//         memory -> PUSH;  or copy the tensor to pinned host memory -> the host path
//         (uncompressed push, or encode on the pool)
//   pull: copy the payload to the device -> decode there into the tensor;  or the host path
//         (decode on the pool, or the uncompressed sum) -> copy the partition to the device
// Every device step is queued on the caller's stream, after the work that produced the
// gradient; the host steps that follow one start from DeviceBackend::WhenReached.
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/gpu_codecs.h"
#include "engine_impl.h"

namespace bytecomp::worker {
namespace {

// Why a stage cannot run on the device ("" when it can).
std::string EncodeOnDeviceBlocker(const Operation& op) {
  if (op.two_round) return absl::StrCat(op.plan.push.name(), " has no device kernels");
  if (!compress::HasGpuCodec(op.plan.push.name())) {
    return absl::StrCat("codec ", op.plan.push.name(), " has no device kernels");
  }
  if (!compress::GpuMemorySupported(op.plan.push.name(), op.plan.push.memory())) {
    return absl::StrCat("memory ", op.plan.push.memory(), " cannot be fused with ",
                        op.plan.push.name(), " on the device");
  }
  if (op.dtype != proto::DTYPE_FLOAT32) {
    return absl::StrCat(DTypeName(op.dtype), " tensors are converted to fp32 on the host");
  }
  return "";
}

std::string DecodeOnDeviceBlocker(const Operation& op) {
  if (!op.plan.two_way()) return "one-way: the server returns the fp32 sum";
  if (op.two_round) return absl::StrCat(op.plan.push.name(), " has no device kernels");
  if (!compress::HasGpuCodec(op.plan.pull.name())) {
    return absl::StrCat("codec ", op.plan.pull.name(), " has no device kernels");
  }
  if (op.average) return "averaging (BYTECOMP_FLAG_AVERAGE) is done on the host";
  if (op.dtype != proto::DTYPE_FLOAT32) {
    return absl::StrCat(DTypeName(op.dtype), " tensors are converted from fp32 on the host");
  }
  return "";
}

bool WantsDevice(proto::Placement placement) {
  // PLACEMENT_DEFAULT is the GPU for GPU tensors (strategy.proto).
  return placement == proto::PLACEMENT_DEFAULT || placement == proto::PLACEMENT_GPU;
}

}  // namespace

absl::StatusOr<DeviceBackend*> EngineImpl::DeviceBackendFor(const PushPullRequest& request) {
  std::lock_guard<std::mutex> lock(device_mu_);
  if (device_backend_ == nullptr) {
    absl::StatusOr<DeviceBackend*> backend = ProcessDeviceBackend();
    if (!backend.ok()) {
      return absl::Status(backend.status().code(),
                          absl::StrCat("tensor '", request.name, "' on device ", request.device,
                                       ": ", backend.status().message()));
    }
    cpu_offload::PinnedPoolOptions options;
    options.prefer_cuda_host = (*backend)->name() == "cuda";  // the emulation never calls CUDA
    pinned_ = std::make_unique<cpu_offload::PinnedMemoryPool>(options);
    device_backend_ = *backend;
  }
  if (request.device < 0 || request.device >= device_backend_->device_count()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", request.name, "': device ", request.device, " does not exist (the ",
        device_backend_->name(), " backend has ", device_backend_->device_count(),
        " devices)"));
  }
  return device_backend_;
}

absl::Status EngineImpl::AfterDevice(const DeviceWork& d, absl::AnyInvocable<void()> work) {
  {
    std::lock_guard<std::mutex> lock(device_mu_);
    ++device_callbacks_;
  }
  auto finished = [this] {
    std::lock_guard<std::mutex> lock(device_mu_);
    if (--device_callbacks_ == 0) device_cv_.notify_all();
  };
  absl::Status status = d.backend->WhenReached(
      d.device, d.stream, [work = std::move(work), finished]() mutable {
        work();
        finished();
      });
  if (!status.ok()) finished();
  return status;
}

void EngineImpl::WaitForDeviceCallbacks(int64_t deadline_ms) {
  std::unique_lock<std::mutex> lock(device_mu_);
  const bool drained = device_cv_.wait_for(
      lock, std::chrono::milliseconds(std::max<int64_t>(0, deadline_ms - MonotonicMs())),
      [&] { return device_callbacks_ == 0; });
  if (!drained) {
    BC_LOG_ERROR(device_callbacks_, " device stream callbacks still pending at shutdown: a "
                 "device stream did not reach the engine's copies");
  }
}

void EngineImpl::StartDeviceLocked(const std::shared_ptr<Operation>& op, TensorEntry& tensor,
                                   Deferred* deferred) {
  DeviceWork& d = *op->device;
  const bool compressed = op->plan.compressed();
  if (compressed) {
    const std::string encode_blocker = EncodeOnDeviceBlocker(*op);
    const std::string decode_blocker = DecodeOnDeviceBlocker(*op);
    d.encode_on_device = WantsDevice(op->plan.compress_on) && encode_blocker.empty();
    d.decode_on_device = WantsDevice(op->plan.decompress_on) && decode_blocker.empty();
    const bool encode_refused = op->plan.compress_on == proto::PLACEMENT_GPU && !d.encode_on_device;
    const bool decode_refused = op->plan.decompress_on == proto::PLACEMENT_GPU &&
                                !d.decode_on_device && op->plan.two_way();
    if ((encode_refused || decode_refused) && !tensor.placement_logged) {
      tensor.placement_logged = true;
      BC_LOG_WARNING("tensor '", tensor.name, "': the strategy places its ",
                     encode_refused ? "encode" : "decode", " on the GPU, but ",
                     encode_refused ? encode_blocker : decode_blocker,
                     ", so it runs on the CPU pool (through pinned host memory)");
    }
  }
  const size_t bytes = static_cast<size_t>(op->element_count) * DTypeSize(op->dtype);
  if (!compressed || !d.encode_on_device || !d.decode_on_device) {
    absl::StatusOr<cpu_offload::PinnedBuffer> host = pinned_->Acquire(bytes);
    if (!host.ok()) {
      AbortDeviceOperation(op, absl::Status(host.status().code(),
                                            absl::StrCat("pinned host copy of '", op->name,
                                                         "': ", host.status().message())));
      return;
    }
    d.host = *std::move(host);
  }
  if (compressed && d.encode_on_device) {
    StartEncodes(op, deferred);  // each encode is queued on the stream behind the gradient
    return;
  }
  absl::Status status = d.backend->CopyToHost(d.device, d.stream, d.host.data(), op->data, bytes);
  if (status.ok()) {
    status = AfterDevice(d, [this, op, compressed] {
      if (compressed) {
        StartEncodes(op, nullptr);
      } else {
        data_queue_.Push(StartOperation{op});
      }
    });
  }
  if (!status.ok()) {
    AbortDeviceOperation(op, absl::Status(status.code(),
                                          absl::StrCat("copying '", op->name, "' from device ",
                                                       d.device, ": ", status.message())));
  }
}

void EngineImpl::AbortDeviceOperation(const std::shared_ptr<Operation>& op,
                                      const absl::Status& status) {
  const int64_t parts = op->layout.num_partitions();
  // An uncompressed partition has a second event, ZeroMQ releasing its payload, which an abort
  // does not have.
  if (!op->plan.compressed()) FinishEvents(op, parts);
  for (int64_t p = 0; p < parts; ++p) {
    PushEncodeFailure(EncodedPush::For(op, p), status);
  }
}

void EngineImpl::EncodePartitionOnDevice(const std::shared_ptr<Operation>& op,
                                         int64_t partition) {
  DeviceWork& d = *op->device;
  PartitionCodec& pc = op->tensor->codecs[partition];
  const PartitionRange range = op->layout.range(partition);
  const size_t n = static_cast<size_t>(range.count);
  std::shared_ptr<EncodedPush> push = EncodedPush::For(op, partition);
  absl::Status status = EnsureCodecs(pc, *op, &op->tensor->pending_state[partition]);
  absl::StatusOr<size_t> bytes = size_t{0};
  if (status.ok()) {
    const size_t capacity = pc.device_push->MaxEncodedBytes(n);
    if (pc.device_encoded == nullptr || pc.device_encoded_bytes < capacity) {
      absl::StatusOr<DeviceAllocation> buffer = d.backend->Allocate(d.device, capacity);
      if (buffer.ok()) {
        pc.device_encoded = *std::move(buffer);
        pc.device_encoded_bytes = capacity;
      }
      status = buffer.status();
    }
    if (status.ok()) {
      const float* input = reinterpret_cast<const float*>(static_cast<const char*>(op->data) +
                                                          range.offset * sizeof(float));
      bytes = pc.device_push->Encode(input, n, ContextFor(*op, partition, info.rank),
                                     pc.device_encoded.get(), capacity, d.stream);
      status = bytes.status();
    }
  }
  if (status.ok()) {
    absl::StatusOr<cpu_offload::PinnedBuffer> pinned = pinned_->Acquire(std::max<size_t>(*bytes, 1));
    status = pinned.status();
    if (status.ok()) {
      push->pinned = *std::move(pinned);
      push->pinned_bytes = *bytes;
      status = d.backend->CopyToHost(d.device, d.stream, push->pinned.data(),
                                     pc.device_encoded.get(), *bytes);
    }
  }
  if (status.ok()) {
    status = AfterDevice(d, [this, push] { data_queue_.Push(push); });
  }
  CountPush(status.ok() ? static_cast<int64_t>(*bytes) : 0, static_cast<int64_t>(n * sizeof(float)));
  if (!status.ok()) {
    // A copy that was queued may still be writing the pinned buffer: keep it with the op.
    PushEncodeFailure(push, absl::Status(status.code(), absl::StrCat("on device ", d.device, ": ",
                                                                     status.message())));
  }
}

void EngineImpl::DecodePartitionOnDevice(const std::shared_ptr<Operation>& op, int64_t partition,
                                         zmq::message_t payload, int server) {
  DeviceWork& d = *op->device;
  PartitionCodec& pc = op->tensor->codecs[partition];
  const PartitionRange range = op->layout.range(partition);
  const size_t n = static_cast<size_t>(range.count);
  CountPull(static_cast<int64_t>(payload.size()), static_cast<int64_t>(n * sizeof(float)));
  absl::Status status = EnsureCodecs(pc, *op, &op->tensor->pending_state[partition]);
  cpu_offload::PinnedBuffer staged;
  if (status.ok()) {
    absl::StatusOr<cpu_offload::PinnedBuffer> pinned =
        pinned_->Acquire(std::max<size_t>(payload.size(), 1));
    status = pinned.status();
    if (status.ok()) {
      staged = *std::move(pinned);
      std::memcpy(staged.data(), payload.data(), payload.size());
    }
  }
  if (status.ok() && (pc.device_pulled == nullptr || pc.device_pulled_bytes < payload.size())) {
    absl::StatusOr<DeviceAllocation> buffer = d.backend->Allocate(d.device, payload.size());
    if (buffer.ok()) {
      pc.device_pulled = *std::move(buffer);
      pc.device_pulled_bytes = payload.size();
    }
    status = buffer.status();
  }
  if (status.ok()) {
    status = d.backend->CopyToDevice(d.device, d.stream, pc.device_pulled.get(), staged.data(),
                                     payload.size());
  }
  if (status.ok()) {
    float* output = reinterpret_cast<float*>(static_cast<char*>(op->data) +
                                             range.offset * sizeof(float));
    status = pc.device_pull->Decode(pc.device_pulled.get(), payload.size(),
                                    ContextFor(*op, partition, static_cast<uint32_t>(server)),
                                    output, n, d.stream);
  }
  if (status.ok()) {
    status = AfterDevice(d, [this, op, staged = std::move(staged)]() mutable {
      staged.Reset();
      FinishEvents(op, 1);
    });
    if (status.ok()) return;
  }
  op->RecordError(absl::Status(status.code(),
                               absl::StrCat("decoding '", op->name, "' partition ", partition,
                                            " on device ", d.device, ": ", status.message())));
  FinishEvents(op, 1);
}

void EngineImpl::DeliverPartition(const std::shared_ptr<Operation>& op, int64_t partition) {
  if (op->device == nullptr) {
    FinishEvents(op, 1);
    return;
  }
  DeviceWork& d = *op->device;
  const PartitionRange range = op->layout.range(partition);
  const size_t elem = DTypeSize(op->dtype);
  const size_t offset = static_cast<size_t>(range.offset) * elem;
  absl::Status status =
      d.backend->CopyToDevice(d.device, d.stream, static_cast<char*>(op->data) + offset,
                              d.host.data() + offset, static_cast<size_t>(range.count) * elem);
  if (status.ok()) {
    status = AfterDevice(d, [this, op] { FinishEvents(op, 1); });
    if (status.ok()) return;
  }
  op->RecordError(absl::Status(status.code(),
                               absl::StrCat("copying '", op->name, "' partition ", partition,
                                            " to device ", d.device, ": ", status.message())));
  FinishEvents(op, 1);
}

void EngineImpl::SubmitDecode(const std::shared_ptr<Operation>& op, int64_t partition,
                              uint32_t stage, zmq::message_t payload, int server) {
  if (op->device != nullptr && op->device->decode_on_device && stage == 0) {
    SubmitToPool(op->priority, proto::PLACEMENT_CPU_POOL,
                 [this, op, partition, server, p = std::move(payload)]() mutable {
                   DecodePartitionOnDevice(op, partition, std::move(p), server);
                 },
                 op, nullptr);
    return;
  }
  SubmitToPool(op->priority, op->device != nullptr ? proto::PLACEMENT_CPU_POOL : op->plan.decompress_on,
               [this, op, partition, stage, server, p = std::move(payload)]() mutable {
                 DecodePartition(op, partition, stage, std::move(p), server);
               },
               op, nullptr);
}

}  // namespace bytecomp::worker
