#include "host_pipeline.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/common.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/two_round.h"
#include "partition_codec.h"
#include "ratio_windows.h"

namespace bytecomp::worker {
namespace {

// A payload of fp32 values (a raw fp32 sum; PowerSGD's factors; artopk's 4-byte words).
// ZeroMQ may hand over a message at any byte offset of its receive buffer: a misaligned one is
// copied to `misaligned` (a float read through a misaligned pointer is undefined behaviour).
absl::Span<const float> Floats(const zmq::message_t& m, std::vector<float>& misaligned) {
  return absl::MakeConstSpan(
      compress::AlignedAs<float>(
          absl::MakeConstSpan(static_cast<const uint8_t*>(m.data()), m.size()), misaligned),
      m.size() / sizeof(float));
}

}  // namespace

void HostPipeline::Start(const std::shared_ptr<Operation>& op) {
  if (op->plan().collective() && !op->plan().compressed()) {
    StartCollective(op);
    return;
  }
  if (!op->plan().compressed()) {
    ctx_.to_data_thread->Push(StartOperation{op});
    return;
  }
  // (A device tensor comes here for its collectives, DevicePipeline saying why.)
  if (op->device == nullptr &&
      (op->plan().compress_on == proto::PLACEMENT_GPU ||
       op->plan().decompress_on == proto::PLACEMENT_GPU) &&
      !op->codecs()->placement_logged.exchange(true)) {
    BC_LOG_WARNING("tensor '", op->request.name,
                   "': the strategy places its compression on the "
                   "GPU, but it was given in host memory (bytecomp_push_pull), so it is encoded "
                   "and decoded on the CPU pool; bytecomp_push_pull_device takes device tensors");
  }
  // INLINE: on the thread that started the operation (the training thread when the tensor was
  // idle). PLACEMENT_GPU with a host tensor runs on the pool, as CPU_POOL does.
  const bool inline_encode = op->plan().compress_on == proto::PLACEMENT_INLINE;
  for (int64_t p = 0; p < op->layout().num_partitions(); ++p) {
    if (inline_encode) {
      Encode(op, p);
    } else {
      ctx_.RunOnPool(op, p, [this, op, p] { Encode(op, p); });
    }
  }
}

void HostPipeline::Encode(const std::shared_ptr<Operation>& op, int64_t partition) {
  const int64_t start_us = ctx_.timeline != nullptr ? telemetry::Timeline::NowUs() : 0;
  PartitionCodec& pc = op->codecs()->partitions[partition];
  const PartitionRange range = op->layout().range(partition);
  const size_t n = static_cast<size_t>(range.count);
  const proto::DType dtype = op->dtype();
  std::shared_ptr<EncodedPush> push = EncodedPush::For(op, partition);
  absl::Status status = EnsureCodecs(*op, partition);
  if (status.ok()) {
    const char* src = op->host_data() + range.offset * DTypeSize(dtype);
    absl::Span<const float> input;
    if (dtype == proto::DTYPE_FLOAT32) {
      input = absl::MakeConstSpan(reinterpret_cast<const float*>(src), n);
    } else {
      pc.input.resize(n);
      ToFloat32(dtype, src, pc.input.data(), n);
      input = pc.input;
    }
    const compress::CodecContext ctx = ctx_.ContextFor(*op, partition, ctx_.rank);
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
    if (status.ok() && !compress::AsTwoRound(*pc.push)) MeasureKeptEnergy(*op, pc, n);
  }
  if (!status.ok()) push->payload.clear();
  ctx_.traffic->CountPush(static_cast<int64_t>(push->payload.size()),
                          static_cast<int64_t>(n * DTypeSize(dtype)), op->plan().push.name());
  if (!status.ok()) {
    PushEncodeFailure(push, status);
    return;
  }
  if (ctx_.timeline != nullptr) {
    TraceStage(*ctx_.timeline, *op, partition, telemetry::Stage::kEncode, start_us,
               telemetry::Timeline::NowUs() - start_us, static_cast<int64_t>(push->payload.size()));
  }
  Send(push);
}

void HostPipeline::MeasureKeptEnergy(const Operation& op, PartitionCodec& pc, size_t n) {
  if (op.plan().ratio_window_rounds == 0) return;
  // What the memory was updated with: the compensated gradient and what was sent of it.
  const bool measured =
      pc.memory != nullptr && pc.compensated.size() == n && pc.decoded.size() == n;
  pc.sent_energy = measured ? SquaredNorm(pc.decoded) : -1;
  pc.compensated_energy = measured ? SquaredNorm(pc.compensated) : 0;
}

void HostPipeline::ResultWritten(const std::shared_ptr<Operation>& op, int64_t partition) {
  ctx_.tracker->ResultIn(op, partition);
}

void HostPipeline::PushEncodeFailure(const std::shared_ptr<EncodedPush>& push,
                                     const absl::Status& status) {
  const Operation& op = *push->op;
  push->abort_error =
      absl::StrCat("encoding '", op.request.name, "' partition ", push->partition,
                   op.plan().compressed() ? absl::StrCat(" with ", op.plan().push.name()) : "",
                   ": ", status.message());
  // (A pinned payload stays: a device copy may still be writing it. The data loop ignores it.)
  push->payload.clear();
  push->op->RecordError(absl::InvalidArgumentError(push->abort_error));
  Send(push);
}

void HostPipeline::Pulled(const std::shared_ptr<Operation>& op, int64_t partition, uint32_t stage,
                          zmq::message_t payload, int server) {
  // On the pool, so that the data thread goes on receiving.
  ctx_.RunOnPool(
      op, partition, [this, op, partition, stage, server, p = std::move(payload)]() mutable {
        if (stage == 1) {
          EncodeSecondRound(op, partition, std::move(p));
          return;
        }
        const int64_t start_us = ctx_.timeline != nullptr ? telemetry::Timeline::NowUs() : 0;
        absl::Status written = WriteResult(*op, partition, stage, p, server);
        if (ctx_.timeline != nullptr) {
          TraceStage(*ctx_.timeline, *op, partition, telemetry::Stage::kDecode, start_us,
                     telemetry::Timeline::NowUs() - start_us, static_cast<int64_t>(p.size()));
        }
        if (written.ok()) {
          ctx_.tracker->ResultIn(op, partition);
        } else {
          ctx_.tracker->ResultFailed(op, partition, written);
        }
      });
}

void HostPipeline::EncodeSecondRound(const std::shared_ptr<Operation>& op, int64_t partition,
                                     zmq::message_t payload) {
  // The uncompressed size this round stands for is counted once, with the result (stage 2).
  ctx_.traffic->CountPull(static_cast<int64_t>(payload.size()), 0, op->plan().push.name());
  std::vector<float> misaligned;
  EncodeSecondRound(op, partition, Floats(payload, misaligned));
}

void HostPipeline::EncodeSecondRound(const std::shared_ptr<Operation>& op, int64_t partition,
                                     absl::Span<const float> summed_first) {
  PartitionCodec& pc = op->codecs()->partitions[partition];
  const size_t n = static_cast<size_t>(op->layout().range(partition).count);
  const compress::CodecContext ctx = ctx_.ContextFor(*op, partition, ctx_.rank);
  compress::TwoRoundCodec* two = compress::AsTwoRound(*pc.push);
  std::shared_ptr<EncodedPush> push = EncodedPush::For(op, partition, 2);
  push->payload.resize(4 + 4 * two->SecondRoundFloats(n));
  absl::StatusOr<size_t> bytes =
      two->EncodeSecond(summed_first, ctx, absl::MakeSpan(push->payload));
  absl::Status status = bytes.status();
  if (status.ok() && pc.memory != nullptr) {
    pc.decoded.resize(n);
    status = two->LocalApproximation(absl::MakeSpan(pc.decoded));
    if (status.ok()) status = pc.memory->Update(pc.compensated, pc.decoded, ctx);
  }
  if (status.ok()) MeasureKeptEnergy(*op, pc, n);
  if (status.ok()) {
    push->payload.resize(*bytes);
    ctx_.traffic->CountPush(static_cast<int64_t>(push->payload.size()), 0, op->plan().push.name());
  } else {
    push->abort_error = absl::StrCat(op->plan().push.name(), " stage 2 of '", op->request.name,
                                     "' partition ", partition, ": ", status.message());
    push->payload.clear();
    op->RecordError(absl::InvalidArgumentError(push->abort_error));
  }
  Send(push);  // the partition's result comes with stage 2's reply
}

absl::Status HostPipeline::WriteResult(const Operation& op, int64_t partition, uint32_t stage,
                                       const zmq::message_t& payload, int server) {
  const PushPullRequest& request = op.request;
  const PartitionRange range = op.layout().range(partition);
  const size_t n = static_cast<size_t>(range.count);
  const size_t elem = DTypeSize(op.dtype());
  if (!op.plan().compressed()) {  // the raw sum, in the tensor's dtype
    const size_t expected = n * elem;
    if (payload.size() != expected) {
      return absl::DataLossError(absl::StrCat("server ", server, " answered the pull of '",
                                              request.name, "' partition ", partition, " with ",
                                              payload.size(), " bytes, expected ", expected));
    }
    ctx_.traffic->CountPull(static_cast<int64_t>(payload.size()), static_cast<int64_t>(expected),
                            "");
    if (request.average && op.dtype() == proto::DTYPE_FLOAT32) {
      // One pass: read the sum, write the mean (DDP's allreduce + divide takes two).
      std::vector<float> misaligned;  // used only when ZeroMQ's buffer is not float-aligned
      StoreSum(op, partition, Floats(payload, misaligned).data());
    } else if (request.average) {
      std::vector<float> sum(n);
      ToFloat32(op.dtype(), payload.data(), sum.data(), n);
      StoreSum(op, partition, sum.data());
    } else {
      std::memcpy(op.host_data() + range.offset * elem, payload.data(), payload.size());
    }
    return absl::OkStatus();
  }
  PartitionCodec& pc = op.codecs()->partitions[partition];
  // The second round's reply and a one-way sum in the push codec's format carry the push codec.
  const bool in_push_format = stage == 2 || (!op.plan().two_way() && pc.push != nullptr &&
                                             pc.push->properties().sum_in_push_format);
  ctx_.traffic->CountPull(
      static_cast<int64_t>(payload.size()), static_cast<int64_t>(n * elem),
      in_push_format ? absl::string_view(op.plan().push.name()) : PullCodecName(op.plan()));
  // An fp32 sum is decoded straight into the caller's tensor (a pass over the partition and the
  // scratch's cache lines fewer) and averaged there; other dtypes go through the partition's
  // scratch and StoreSum.
  const bool direct = op.dtype() == proto::DTYPE_FLOAT32;
  absl::Span<float> out;
  if (direct) {
    out = absl::MakeSpan(reinterpret_cast<float*>(op.host_data()) + range.offset, n);
  } else {
    pc.output.resize(n);
    out = absl::MakeSpan(pc.output);
  }
  absl::Status status;
  if (stage == 2) {
    std::vector<float> misaligned;
    status = compress::AsTwoRound(*pc.push)->DecodeSecond(
        Floats(payload, misaligned), ctx_.ContextFor(op, partition, ctx_.rank), out);
  } else if (op.plan().two_way()) {
    status = pc.pull->Decode(
        absl::MakeConstSpan(static_cast<const uint8_t*>(payload.data()), payload.size()),
        ctx_.ContextFor(op, partition, static_cast<uint32_t>(server)), out);
  } else if (in_push_format) {
    // One-way, and the sum comes back in the push codec's format (blocksparse: block-sparse).
    status = pc.push->Decode(
        absl::MakeConstSpan(static_cast<const uint8_t*>(payload.data()), payload.size()),
        ctx_.ContextFor(op, partition, static_cast<uint32_t>(server)), out);
  } else if (payload.size() != n * sizeof(float)) {
    status = absl::DataLossError(absl::StrCat("server ", server, " returned ", payload.size(),
                                              " bytes for the fp32 sum of ", n, " elements"));
  } else {
    std::memcpy(out.data(), payload.data(), n * sizeof(float));
  }
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("decoding '", request.name, "' partition ",
                                                    partition, ": ", status.message()));
  }
  FinishSum(op, partition, out);
  return absl::OkStatus();
}

void HostPipeline::FinishSum(const Operation& op, int64_t partition, absl::Span<float> out) const {
  if (op.dtype() != proto::DTYPE_FLOAT32) {
    StoreSum(op, partition, out.data());
  } else if (op.request.average) {
    DivideFloat32InPlace(out.data(), static_cast<float>(ctx_.num_workers), out.size());
  }
}

void HostPipeline::StoreSum(const Operation& op, int64_t partition, const float* sum) const {
  const PartitionRange range = op.layout().range(partition);
  const size_t n = static_cast<size_t>(range.count);
  const proto::DType dtype = op.dtype();
  char* dst = op.host_data() + range.offset * DTypeSize(dtype);
  if (!op.request.average) {
    FromFloat32(dtype, sum, dst, n);
    return;
  }
  const float w = static_cast<float>(ctx_.num_workers);
  if (dtype == proto::DTYPE_FLOAT32) {
    DivideFloat32(sum, w, reinterpret_cast<float*>(dst), n);
    return;
  }
  std::vector<float> scaled(n);
  DivideFloat32(sum, w, scaled.data(), n);
  FromFloat32(dtype, scaled.data(), dst, n);
}

}  // namespace bytecomp::worker
