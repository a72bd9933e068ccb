#include "device_pipeline.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "bytecomp/common.h"
#include "bytecomp/compress/gpu_codecs.h"
#include "partition_codec.h"

namespace bytecomp::worker {
namespace {

constexpr absl::string_view kAveragedOnHost =
    "averaging (BYTECOMP_FLAG_AVERAGE) is done on the host";

// Why a stage cannot run on the device ("" when it can). A two-round codec's rounds and its
// decode run where its first round does (the device codec holds the round).
std::string EncodeOnDeviceBlocker(const Operation& op) {
  const compress::TensorPlan& plan = op.plan();
  if (!compress::HasGpuCodec(plan.push.name())) {
    return absl::StrCat("codec ", plan.push.name(), " has no device kernels");
  }
  if (!compress::GpuMemorySupported(plan.push.name(), plan.push.memory())) {
    return absl::StrCat("memory ", plan.push.memory(), " cannot be fused with ", plan.push.name(),
                        " on the device");
  }
  if (op.dtype() != proto::DTYPE_FLOAT32) {
    return absl::StrCat(DTypeName(op.dtype()), " tensors are converted to fp32 on the host");
  }
  if (op.two_round() && op.request.average) {
    return absl::StrCat(plan.push.name(), " is two-round, its decode follows its encode, and ",
                        kAveragedOnHost);
  }
  return "";
}

std::string DecodeOnDeviceBlocker(const Operation& op) {
  const compress::TensorPlan& plan = op.plan();
  if (!plan.two_way()) return "one-way: the server returns the fp32 sum";
  if (!compress::HasGpuCodec(plan.pull.name())) {
    return absl::StrCat("codec ", plan.pull.name(), " has no device kernels");
  }
  if (op.request.average) return std::string(kAveragedOnHost);
  if (op.dtype() != proto::DTYPE_FLOAT32) {
    return absl::StrCat(DTypeName(op.dtype()), " tensors are converted from fp32 on the host");
  }
  return "";
}

bool WantsDevice(proto::Placement placement) {
  // PLACEMENT_DEFAULT is the GPU for GPU tensors (strategy.proto).
  return placement == proto::PLACEMENT_DEFAULT || placement == proto::PLACEMENT_GPU;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceWork>> DevicePipeline::WorkFor(
    const PushPullRequest& request) {
  absl::MutexLock lock(&mu_);
  if (backend_ == nullptr) {
    absl::StatusOr<DeviceBackend*> backend = ProcessDeviceBackend();
    if (!backend.ok()) {
      return absl::Status(backend.status().code(),
                          absl::StrCat("tensor '", request.name, "' on device ", request.device,
                                       ": ", backend.status().message()));
    }
    cpu_offload::PinnedPoolOptions options;
    options.prefer_cuda_host = (*backend)->name() == "cuda";  // the emulation never calls CUDA
    pinned_ = std::make_unique<cpu_offload::PinnedMemoryPool>(options);
    backend_ = *backend;
  }
  if (request.device < 0 || request.device >= backend_->device_count()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", request.name, "': device ", request.device, " does not exist (the ",
        backend_->name(), " backend has ", backend_->device_count(), " devices)"));
  }
  auto work = std::make_unique<DeviceWork>();
  work->backend = backend_;
  work->pinned = pinned_.get();
  work->device = request.device;
  work->stream = request.stream;
  return work;
}

absl::Status DevicePipeline::AfterDevice(const DeviceWork& d, absl::AnyInvocable<void()> work) {
  {
    absl::MutexLock lock(&mu_);
    ++callbacks_;
  }
  auto finished = [this] {
    absl::MutexLock lock(&mu_);
    if (--callbacks_ == 0) callbacks_drained_.SignalAll();
  };
  absl::Status status =
      d.backend->WhenReached(d.device, d.stream, [work = std::move(work), finished]() mutable {
        work();
        finished();
      });
  if (!status.ok()) finished();
  return status;
}

void DevicePipeline::WaitForCallbacks(int64_t deadline_ms) {
  absl::MutexLock lock(&mu_);
  for (int64_t left = deadline_ms - MonotonicMs(); callbacks_ > 0 && left > 0;
       left = deadline_ms - MonotonicMs()) {
    callbacks_drained_.WaitWithTimeout(&mu_, absl::Milliseconds(left));
  }
  if (callbacks_ > 0) {
    BC_LOG_ERROR(callbacks_,
                 " device stream callbacks still pending at shutdown: a device "
                 "stream did not reach the engine's copies");
  }
}

void DevicePipeline::Start(const std::shared_ptr<Operation>& op) {
  if (op->plan().collective()) {
    StartCollective(op);
    return;
  }
  DeviceWork& d = *op->device;
  const bool compressed = op->plan().compressed();
  if (compressed) {
    const std::string encode_blocker = EncodeOnDeviceBlocker(*op);
    const std::string decode_blocker = DecodeOnDeviceBlocker(*op);
    d.encode_on_device = WantsDevice(op->plan().compress_on) && encode_blocker.empty();
    d.decode_on_device = op->two_round()
                             ? d.encode_on_device
                             : WantsDevice(op->plan().decompress_on) && decode_blocker.empty();
    const bool encode_refused =
        op->plan().compress_on == proto::PLACEMENT_GPU && !d.encode_on_device;
    const bool decode_refused = op->plan().decompress_on == proto::PLACEMENT_GPU &&
                                !d.decode_on_device && op->plan().two_way() && !op->two_round();
    if ((encode_refused || decode_refused) && !op->codecs()->placement_logged.exchange(true)) {
      BC_LOG_WARNING("tensor '", op->request.name, "': the strategy places its ",
                     encode_refused ? "encode" : "decode", " on the GPU, but ",
                     encode_refused ? encode_blocker : decode_blocker,
                     ", so it runs on the CPU pool (through pinned host memory)");
    }
  }
  const size_t bytes = static_cast<size_t>(op->request.element_count) * DTypeSize(op->dtype());
  if (!compressed || !d.encode_on_device || !d.decode_on_device) {
    absl::StatusOr<cpu_offload::PinnedBuffer> host = d.pinned->Acquire(bytes);
    if (!host.ok()) {
      Abort(op, absl::Status(host.status().code(),
                             absl::StrCat("pinned host copy of '", op->request.name,
                                          "': ", host.status().message())));
      return;
    }
    d.host = *std::move(host);
  }
  if (compressed && d.encode_on_device) {
    // Each encode is queued on the stream behind the gradient.
    for (int64_t p = 0; p < op->layout().num_partitions(); ++p) {
      ctx_.RunOnPool(op, p, [this, op, p] { EncodeOnDevice(op, p); });
    }
    return;
  }
  absl::Status status =
      d.backend->CopyToHost(d.device, d.stream, d.host.data(), op->request.data, bytes);
  if (status.ok()) {
    // The host copy is ready on the backend's callback thread: the host stages start from there.
    status = AfterDevice(d, [this, op, compressed] {
      if (!compressed) {
        ctx_.to_data_thread->Push(StartOperation{op});
        return;
      }
      for (int64_t p = 0; p < op->layout().num_partitions(); ++p) {
        ctx_.RunOnPool(op, p, [this, op, p] { host_.Encode(op, p); });
      }
    });
  }
  if (!status.ok()) {
    Abort(op,
          absl::Status(status.code(), absl::StrCat("copying '", op->request.name, "' from device ",
                                                   d.device, ": ", status.message())));
  }
}

void DevicePipeline::StartCollective(const std::shared_ptr<Operation>& op) {
  DeviceWork& d = *op->device;
  if (SumsInPlace(*op)) {
    // NCCL sums each partition in place on the device, queued behind the gradient's writes on
    // the tensor's stream.
    const size_t elem = DTypeSize(op->dtype());
    for (int64_t p = 0; p < op->layout().num_partitions(); ++p) {
      const PartitionRange range = op->layout().range(p);
      DeviceValues values;
      values.data = static_cast<char*>(op->request.data) + static_cast<size_t>(range.offset) * elem;
      values.count = static_cast<size_t>(range.count);
      values.dtype = op->dtype();
      values.device = d.device;
      values.stream = d.stream;
      values.average = op->request.average;
      host_.SubmitDeviceCollective(op, p, values);
    }
    return;
  }
  d.encode_on_device = false;
  d.decode_on_device = false;
  const compress::TensorPlan& plan = op->plan();
  if (plan.compressed() &&
      (plan.compress_on == proto::PLACEMENT_GPU || plan.decompress_on == proto::PLACEMENT_GPU) &&
      !op->codecs()->placement_logged.exchange(true)) {
    BC_LOG_WARNING("tensor '", op->request.name,
                   "': the strategy places its compression on the "
                   "GPU, but its scheme ",
                   proto::Scheme_Name(plan.scheme),
                   " sums in host memory (gloo), so it is encoded and decoded on the CPU pool "
                   "through a pinned copy");
  }
  const size_t bytes = static_cast<size_t>(op->request.element_count) * DTypeSize(op->dtype());
  absl::StatusOr<cpu_offload::PinnedBuffer> host = d.pinned->Acquire(bytes);
  if (!host.ok()) {
    Abort(op,
          absl::Status(host.status().code(), absl::StrCat("pinned host copy of '", op->request.name,
                                                          "': ", host.status().message())));
    return;
  }
  d.host = *std::move(host);
  absl::Status status =
      d.backend->CopyToHost(d.device, d.stream, d.host.data(), op->request.data, bytes);
  // From the host copy on, the host stages: the collectives' contribution, then (through
  // ResultWritten) the copy back.
  if (status.ok()) status = AfterDevice(d, [this, op] { host_.Start(op); });
  if (!status.ok()) {
    Abort(op,
          absl::Status(status.code(), absl::StrCat("copying '", op->request.name, "' from device ",
                                                   d.device, ": ", status.message())));
  }
}

bool DevicePipeline::SumsInPlace(const Operation& op) const {
  const compress::TensorPlan& plan = op.plan();
  const proto::DType dtype = op.dtype();
  return !plan.compressed() && plan.scheme == proto::SCHEME_ALLREDUCE &&
         op.device->backend->name() == "cuda" && host_.SumsDeviceMemory() &&
         (dtype == proto::DTYPE_FLOAT32 || dtype == proto::DTYPE_FLOAT16 ||
          dtype == proto::DTYPE_BFLOAT16);
}

void DevicePipeline::Abort(const std::shared_ptr<Operation>& op, const absl::Status& status) {
  const int64_t parts = op->layout().num_partitions();
  for (int64_t p = 0; p < parts; ++p) {
    // An uncompressed partition's zero-copy payload will never go out.
    if (!op->plan().compressed()) ctx_.tracker->PayloadReleased(op, p);
    host_.PushEncodeFailure(EncodedPush::For(op, p), status);
  }
}

void DevicePipeline::EncodeOnDevice(const std::shared_ptr<Operation>& op, int64_t partition) {
  DeviceWork& d = *op->device;
  PartitionCodec& pc = op->codecs()->partitions[partition];
  const PartitionRange range = op->layout().range(partition);
  const size_t n = static_cast<size_t>(range.count);
  std::shared_ptr<EncodedPush> push = EncodedPush::For(op, partition);
  absl::Status status = EnsureCodecs(*op, partition);
  absl::StatusOr<size_t> bytes = size_t{0};
  DeviceTwoRound* two = status.ok() && op->two_round() ? pc.device_push->two_round() : nullptr;
  if (status.ok() && op->two_round() && two == nullptr) {
    status = absl::InternalError(
        absl::StrCat("the device codec ", op->plan().push.name(), " has no two rounds"));
  }
  if (two != nullptr) push->stage = 1;
  if (status.ok()) {
    const size_t capacity =
        two != nullptr ? two->FirstRoundBytes(n) : pc.device_push->MaxEncodedBytes(n);
    status = EnsureDeviceBuffer(d, capacity, pc.device_encoded, pc.device_encoded_bytes);
    if (status.ok()) {
      const float* input = reinterpret_cast<const float*>(
          static_cast<const char*>(op->request.data) + range.offset * sizeof(float));
      const compress::CodecContext ctx = ctx_.ContextFor(*op, partition, ctx_.rank);
      bytes =
          two != nullptr
              ? two->EncodeFirst(input, n, ctx, pc.device_encoded.get(), capacity, d.stream)
              : pc.device_push->Encode(input, n, ctx, pc.device_encoded.get(), capacity, d.stream);
      status = bytes.status();
    }
  }
  if (status.ok()) status = CopyPushToHost(d, pc, *push, *bytes);
  if (status.ok()) {
    status = AfterDevice(d, [this, push] { ctx_.to_data_thread->Push(push); });
  }
  ctx_.traffic->CountPush(status.ok() ? static_cast<int64_t>(*bytes) : 0,
                          static_cast<int64_t>(n * sizeof(float)), op->plan().push.name());
  if (!status.ok()) {
    // A copy that was queued may still be writing the pinned buffer: keep it with the push.
    host_.PushEncodeFailure(
        push,
        absl::Status(status.code(), absl::StrCat("on device ", d.device, ": ", status.message())));
  }
}

void DevicePipeline::Pulled(const std::shared_ptr<Operation>& op, int64_t partition, uint32_t stage,
                            zmq::message_t payload, int server) {
  if (op->device->encode_on_device && op->two_round()) {
    ctx_.RunOnPool(op, partition, [this, op, partition, stage, p = std::move(payload)]() mutable {
      SumOnDevice(op, partition, stage, std::move(p));
    });
    return;
  }
  if (op->device->decode_on_device && stage == 0) {
    ctx_.RunOnPool(op, partition, [this, op, partition, server, p = std::move(payload)]() mutable {
      DecodeOnDevice(op, partition, std::move(p), server);
    });
    return;
  }
  ctx_.RunOnPool(op, partition,
                 [this, op, partition, stage, server, p = std::move(payload)]() mutable {
                   if (stage == 1) {
                     host_.EncodeSecondRound(op, partition, std::move(p));
                     return;
                   }
                   absl::Status written = host_.WriteResult(*op, partition, stage, p, server);
                   if (!written.ok()) {
                     ctx_.tracker->ResultFailed(op, partition, written);
                     return;
                   }
                   CopyResultToDevice(op, partition);
                 });
}

void DevicePipeline::DecodeOnDevice(const std::shared_ptr<Operation>& op, int64_t partition,
                                    zmq::message_t payload, int server) {
  DeviceWork& d = *op->device;
  PartitionCodec& pc = op->codecs()->partitions[partition];
  const PartitionRange range = op->layout().range(partition);
  const size_t n = static_cast<size_t>(range.count);
  ctx_.traffic->CountPull(static_cast<int64_t>(payload.size()),
                          static_cast<int64_t>(n * sizeof(float)), PullCodecName(op->plan()));
  absl::Status status = EnsureCodecs(*op, partition);
  auto staged = std::make_shared<cpu_offload::PinnedBuffer>();
  if (status.ok()) status = PayloadToDevice(d, pc, payload, *staged);
  if (status.ok()) {
    float* output = reinterpret_cast<float*>(static_cast<char*>(op->request.data) +
                                             range.offset * sizeof(float));
    status = pc.device_pull->Decode(pc.device_pulled.get(), payload.size(),
                                    ctx_.ContextFor(*op, partition, static_cast<uint32_t>(server)),
                                    output, n, d.stream);
  }
  ReportDecodedOnDevice(op, partition, status, std::move(staged));
}

void DevicePipeline::SumOnDevice(const std::shared_ptr<Operation>& op, int64_t partition,
                                 uint32_t stage, zmq::message_t payload) {
  DeviceWork& d = *op->device;
  PartitionCodec& pc = op->codecs()->partitions[partition];
  const size_t n = static_cast<size_t>(op->layout().range(partition).count);
  const compress::CodecContext ctx = ctx_.ContextFor(*op, partition, ctx_.rank);
  // Stage 1's sum is counted without the uncompressed size it stands for: that goes once,
  // with the result (as the host pipeline counts).
  ctx_.traffic->CountPull(static_cast<int64_t>(payload.size()),
                          stage == 2 ? static_cast<int64_t>(n * sizeof(float)) : 0,
                          op->plan().push.name());
  DeviceTwoRound* two = pc.device_push != nullptr ? pc.device_push->two_round() : nullptr;
  absl::Status status =
      two != nullptr ? absl::OkStatus() : absl::InternalError("the device codec has no two rounds");
  if (status.ok() && payload.size() % sizeof(float) != 0) {
    status = absl::DataLossError(absl::StrCat("the servers' stage ", stage, " sum has ",
                                              payload.size(), " bytes, not whole f32 values"));
  }
  // The sum to the device, through pinned memory kept until the stream has read it.
  auto staged = std::make_shared<cpu_offload::PinnedBuffer>();
  if (status.ok()) status = PayloadToDevice(d, pc, payload, *staged);
  const float* sum = reinterpret_cast<const float*>(pc.device_pulled.get());
  const size_t floats = payload.size() / sizeof(float);
  if (stage == 1) {
    // The second round: encoded on the device from the first sum, pushed as stage 2.
    std::shared_ptr<EncodedPush> push = EncodedPush::For(op, partition, 2);
    absl::StatusOr<size_t> bytes = size_t{0};
    if (status.ok()) {
      const size_t capacity = two->SecondRoundBytes(n);
      status = EnsureDeviceBuffer(d, capacity, pc.device_encoded, pc.device_encoded_bytes);
      if (status.ok()) {
        bytes = two->EncodeSecond(sum, floats, ctx, pc.device_encoded.get(), capacity, d.stream);
        status = bytes.status();
      }
    }
    if (status.ok()) status = CopyPushToHost(d, pc, *push, *bytes);
    if (status.ok()) {
      status = AfterDevice(d, [this, push, staged] { ctx_.to_data_thread->Push(push); });
    }
    ctx_.traffic->CountPush(status.ok() ? static_cast<int64_t>(*bytes) : 0, 0,
                            op->plan().push.name());
    if (!status.ok()) {
      host_.PushEncodeFailure(
          push,
          absl::Status(status.code(), absl::StrCat(op->plan().push.name(), " stage 2 on device ",
                                                   d.device, ": ", status.message())));
    }
    return;
  }
  // The second sum: the approximation of the workers' sum, written into the tensor.
  if (status.ok()) {
    float* output = reinterpret_cast<float*>(static_cast<char*>(op->request.data) +
                                             op->layout().range(partition).offset * sizeof(float));
    status = two->DecodeSecond(sum, floats, ctx, output, n, d.stream);
  }
  ReportDecodedOnDevice(op, partition, status, std::move(staged));
}

void DevicePipeline::ReportDecodedOnDevice(const std::shared_ptr<Operation>& op, int64_t partition,
                                           absl::Status status,
                                           std::shared_ptr<cpu_offload::PinnedBuffer> staged) {
  const DeviceWork& d = *op->device;
  if (status.ok()) {
    status = AfterDevice(d, [this, op, partition, staged = std::move(staged)]() mutable {
      staged.reset();
      ctx_.tracker->ResultIn(op, partition);
    });
    if (status.ok()) return;
  }
  ctx_.tracker->ResultFailed(
      op, partition,
      absl::Status(status.code(),
                   absl::StrCat("decoding '", op->request.name, "' partition ", partition,
                                " on device ", d.device, ": ", status.message())));
}

absl::Status DevicePipeline::EnsureDeviceBuffer(const DeviceWork& d, size_t bytes,
                                                DeviceAllocation& buffer, size_t& held) {
  if (buffer != nullptr && held >= bytes) return absl::OkStatus();
  absl::StatusOr<DeviceAllocation> made = d.backend->Allocate(d.device, std::max<size_t>(bytes, 1));
  if (!made.ok()) return made.status();
  buffer = *std::move(made);
  held = bytes;
  return absl::OkStatus();
}

absl::Status DevicePipeline::PayloadToDevice(const DeviceWork& d, PartitionCodec& pc,
                                             const zmq::message_t& payload,
                                             cpu_offload::PinnedBuffer& staged) {
  absl::StatusOr<cpu_offload::PinnedBuffer> pinned =
      d.pinned->Acquire(std::max<size_t>(payload.size(), 1));
  if (!pinned.ok()) return pinned.status();
  staged = *std::move(pinned);
  std::memcpy(staged.data(), payload.data(), payload.size());
  absl::Status status =
      EnsureDeviceBuffer(d, payload.size(), pc.device_pulled, pc.device_pulled_bytes);
  if (!status.ok()) return status;
  return d.backend->CopyToDevice(d.device, d.stream, pc.device_pulled.get(), staged.data(),
                                 payload.size());
}

absl::Status DevicePipeline::CopyPushToHost(const DeviceWork& d, const PartitionCodec& pc,
                                            EncodedPush& push, size_t bytes) {
  absl::StatusOr<cpu_offload::PinnedBuffer> pinned = d.pinned->Acquire(std::max<size_t>(bytes, 1));
  if (!pinned.ok()) return pinned.status();
  push.pinned = *std::move(pinned);
  push.pinned_bytes = bytes;
  return d.backend->CopyToHost(d.device, d.stream, push.pinned.data(), pc.device_encoded.get(),
                               bytes);
}

void DevicePipeline::CopyResultToDevice(const std::shared_ptr<Operation>& op, int64_t partition) {
  DeviceWork& d = *op->device;
  const PartitionRange range = op->layout().range(partition);
  const size_t elem = DTypeSize(op->dtype());
  const size_t offset = static_cast<size_t>(range.offset) * elem;
  absl::Status status =
      d.backend->CopyToDevice(d.device, d.stream, static_cast<char*>(op->request.data) + offset,
                              d.host.data() + offset, static_cast<size_t>(range.count) * elem);
  if (status.ok()) {
    status = AfterDevice(d, [this, op, partition] { ctx_.tracker->ResultIn(op, partition); });
    if (status.ok()) return;
  }
  ctx_.tracker->ResultFailed(
      op, partition,
      absl::Status(status.code(),
                   absl::StrCat("copying '", op->request.name, "' partition ", partition,
                                " to device ", d.device, ": ", status.message())));
}

}  // namespace bytecomp::worker
