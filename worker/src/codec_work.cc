// The pool's work for compressed operations: encode a partition (with its error-feedback
// memory) before the push, decode the pulled sum after. Each partition's codec objects are
// used by one task at a time: a tensor's operations run one after another, and within one the
// partitions are independent.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/two_round.h"
#include "engine_impl.h"

namespace bytecomp::worker {

absl::Status EnsureCodecs(PartitionCodec& pc, const Operation& op, std::string* pending_state) {
  const compress::TensorPlan& plan = op.plan;
  const bool encode_on_device = op.device != nullptr && op.device->encode_on_device;
  const bool decode_on_device = op.device != nullptr && op.device->decode_on_device;
  if (pc.version != plan.version) {
    pc = PartitionCodec{};
    pc.version = plan.version;
  }
  if (!encode_on_device && pc.push == nullptr) {
    absl::StatusOr<std::unique_ptr<compress::Codec>> push =
        compress::CreateCodec(plan.push.name(), compress::ParamsOf(plan.push));
    if (!push.ok()) return push.status();
    pc.push = *std::move(push);
    if (!plan.push.memory().empty()) {
      absl::StatusOr<std::unique_ptr<compress::Memory>> memory =
          compress::CreateMemory(plan.push.memory(), compress::MemoryParamsOf(plan.push));
      if (!memory.ok()) return memory.status();
      pc.memory = *std::move(memory);
      if (!pending_state->empty()) {
        absl::Status loaded = compress::LoadMemoryState(*pc.memory, *pending_state);
        pending_state->clear();
        if (!loaded.ok()) return loaded;
      }
    }
  }
  if (encode_on_device && pc.device_push == nullptr) {
    if (!pending_state->empty()) {
      return absl::UnimplementedError(
          "a checkpoint's error-feedback state cannot be loaded into a device codec yet; place "
          "the tensor's compression on the CPU pool to resume it");
    }
    absl::StatusOr<std::unique_ptr<DeviceCodec>> push = op.device->backend->CreateCodec(
        op.device->device, plan.push.name(), compress::ParamsOf(plan.push), plan.push.memory(),
        compress::MemoryParamsOf(plan.push));
    if (!push.ok()) return push.status();
    pc.device_push = *std::move(push);
    pc.device_memory = !plan.push.memory().empty() && plan.push.memory() != "none";
  }
  if (plan.two_way() && !decode_on_device && pc.pull == nullptr) {
    absl::StatusOr<std::unique_ptr<compress::Codec>> pull =
        compress::CreateCodec(plan.pull.name(), compress::ParamsOf(plan.pull));
    if (!pull.ok()) return pull.status();
    pc.pull = *std::move(pull);
  }
  if (plan.two_way() && decode_on_device && pc.device_pull == nullptr) {
    absl::StatusOr<std::unique_ptr<DeviceCodec>> pull = op.device->backend->CreateCodec(
        op.device->device, plan.pull.name(), compress::ParamsOf(plan.pull), "", {});
    if (!pull.ok()) return pull.status();
    pc.device_pull = *std::move(pull);
  }
  return absl::OkStatus();
}

void EngineImpl::PushEncodeFailure(const std::shared_ptr<EncodedPush>& push,
                                   const absl::Status& status) {
  const Operation& op = *push->op;
  // The round still has to complete on the server for the other workers: push an abort,
  // whose error every worker then receives for this round.
  push->abort_error = absl::StrCat(
      "encoding '", op.name, "' partition ", push->partition,
      op.plan.compressed() ? absl::StrCat(" with ", op.plan.push.name()) : "", ": ",
      status.message());
  // (A pinned payload stays: a device copy may still be writing it. Send ignores it.)
  push->payload.clear();
  push->op->RecordError(absl::InvalidArgumentError(push->abort_error));
  data_queue_.Push(push);
}


compress::CodecContext EngineImpl::ContextFor(const Operation& op, int64_t partition,
                                              uint32_t node) const {
  compress::CodecContext ctx;
  ctx.key = MakeKey(op.layout.tensor_id, static_cast<uint32_t>(partition));
  ctx.round = op.round;
  ctx.node = node;
  ctx.learning_rate = static_cast<float>(learning_rate_.load());
  {
    std::lock_guard<std::mutex> lock(strategy_mu_);
    if (const proto::Strategy* s = strategies_.Version(op.plan.version)) ctx.seed = s->seed();
  }
  return ctx;
}

void EngineImpl::EncodePartition(const std::shared_ptr<Operation>& op, int64_t partition) {
  PartitionCodec& pc = op->tensor->codecs[partition];
  const PartitionRange range = op->layout.range(partition);
  const size_t n = static_cast<size_t>(range.count);
  std::shared_ptr<EncodedPush> push = EncodedPush::For(op, partition);
  absl::Status status = EnsureCodecs(pc, *op, &op->tensor->pending_state[partition]);
  if (status.ok()) {
    const size_t elem = DTypeSize(op->dtype);
    const char* src = op->host_data() + range.offset * elem;
    absl::Span<const float> input;
    if (op->dtype == proto::DTYPE_FLOAT32) {
      input = absl::MakeConstSpan(reinterpret_cast<const float*>(src), n);
    } else {
      pc.input.resize(n);
      ToFloat32(op->dtype, src, pc.input.data(), n);
      input = pc.input;
    }
    const compress::CodecContext ctx = ContextFor(*op, partition, info.rank);
    absl::StatusOr<size_t> bytes;
    if (compress::TwoRoundCodec* two = compress::AsTwoRound(*pc.push)) {
      push->stage = 1;
      pc.compensated.resize(n);
      if (pc.memory != nullptr) {
        status = pc.memory->Compensate(input, ctx, absl::MakeSpan(pc.compensated));
      } else {
        std::memcpy(pc.compensated.data(), input.data(), n * sizeof(float));
      }
      push->payload.resize(4 + 4 * two->FirstRoundFloats(n));
      if (status.ok()) bytes = two->EncodeFirst(pc.compensated, ctx, absl::MakeSpan(push->payload));
    } else {
      push->payload.resize(pc.push->MaxEncodedBytes(n));
      bytes = compress::EncodeWithMemory(*pc.push, pc.memory.get(), input, ctx,
                                         absl::MakeSpan(push->payload), pc.compensated, pc.decoded);
    }
    if (status.ok() && !bytes.ok()) status = bytes.status();
    if (status.ok()) push->payload.resize(*bytes);
  }
  if (!status.ok()) push->payload.clear();
  CountPush(static_cast<int64_t>(push->payload.size()), static_cast<int64_t>(n * DTypeSize(op->dtype)));
  if (!status.ok()) {
    PushEncodeFailure(push, status);
    return;
  }
  data_queue_.Push(push);
}

void EngineImpl::DecodePartition(const std::shared_ptr<Operation>& op, int64_t partition,
                                 uint32_t stage, zmq::message_t payload, int server) {
  PartitionCodec& pc = op->tensor->codecs[partition];
  const size_t n = static_cast<size_t>(op->layout.range(partition).count);
  const compress::CodecContext ctx = ContextFor(*op, partition, info.rank);
  const auto floats = [&](const zmq::message_t& m) {
    return absl::MakeConstSpan(static_cast<const float*>(m.data()), m.size() / sizeof(float));
  };
  CountPull(static_cast<int64_t>(payload.size()), static_cast<int64_t>(n * DTypeSize(op->dtype)));
  absl::Status status;
  if (stage == 1) {  // the sum of the workers' P: compute and push Q
    compress::TwoRoundCodec* two = compress::AsTwoRound(*pc.push);
    std::shared_ptr<EncodedPush> push = EncodedPush::For(op, partition, 2);
    push->payload.resize(4 + 4 * two->SecondRoundFloats(n));
    absl::StatusOr<size_t> bytes = two->EncodeSecond(floats(payload), ctx, absl::MakeSpan(push->payload));
    status = bytes.status();
    if (status.ok() && pc.memory != nullptr) {
      pc.decoded.resize(n);
      status = two->LocalApproximation(absl::MakeSpan(pc.decoded));
      if (status.ok()) status = pc.memory->Update(pc.compensated, pc.decoded, ctx);
    }
    if (status.ok()) {
      push->payload.resize(*bytes);
      CountPush(static_cast<int64_t>(push->payload.size()), 0);
    } else {
      push->abort_error = absl::StrCat("PowerSGD stage 2 of '", op->name, "' partition ",
                                       partition, ": ", status.message());
      push->payload.clear();
      op->RecordError(absl::InvalidArgumentError(push->abort_error));
    }
    data_queue_.Push(push);  // the operation's event completes with stage 2's reply
    return;
  }
  // An fp32 sum that is not averaged is decoded straight into the caller's tensor (a pass over
  // the partition fewer); others go through the partition's scratch and WriteResult.
  const bool direct = op->dtype == proto::DTYPE_FLOAT32 && !op->average;
  absl::Span<float> out;
  if (direct) {
    out = absl::MakeSpan(reinterpret_cast<float*>(op->host_data()) + op->layout.range(partition).offset, n);
  } else {
    pc.output.resize(n);
    out = absl::MakeSpan(pc.output);
  }
  if (stage == 2) {
    status = compress::AsTwoRound(*pc.push)->DecodeSecond(floats(payload), ctx, out);
  } else if (op->plan.two_way()) {
    status = pc.pull->Decode(
        absl::MakeConstSpan(static_cast<const uint8_t*>(payload.data()), payload.size()),
        ContextFor(*op, partition, static_cast<uint32_t>(server)), out);
  } else if (payload.size() != n * sizeof(float)) {
    status = absl::DataLossError(absl::StrCat("server ", server, " returned ", payload.size(),
                                              " bytes for the fp32 sum of ", n, " elements"));
  } else {
    std::memcpy(out.data(), payload.data(), n * sizeof(float));
  }
  if (status.ok()) {
    if (!direct) WriteResult(*op, partition, pc.output.data());
    DeliverPartition(op, partition);
    return;
  }
  op->RecordError(absl::Status(status.code(), absl::StrCat("decoding '", op->name, "' partition ",
                                                           partition, ": ", status.message())));
  FinishEvents(op, 1);
}

void EngineImpl::WriteResult(Operation& op, int64_t partition, const float* sum) {
  const PartitionRange range = op.layout.range(partition);
  const size_t n = static_cast<size_t>(range.count);
  const size_t elem = DTypeSize(op.dtype);
  char* dst = op.host_data() + range.offset * elem;
  if (!op.average) {
    FromFloat32(op.dtype, sum, dst, n);
    return;
  }
  const float w = static_cast<float>(info.size);
  if (op.dtype == proto::DTYPE_FLOAT32) {
    float* d = reinterpret_cast<float*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = sum[i] / w;
    return;
  }
  std::vector<float> scaled(sum, sum + n);
  for (float& x : scaled) x /= w;
  FromFloat32(op.dtype, scaled.data(), dst, n);
}

}  // namespace bytecomp::worker
