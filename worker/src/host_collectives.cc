// HostPipeline's collective side (host_pipeline.h): a partition whose plan names scheme
// allreduce or allgather goes to the engine's CollectiveExchange instead of the data thread,
// and its result comes back from there.
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/common.h"
#include "bytecomp/common/partition.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/registry.h"
#include "bytecomp/compress/two_round.h"
#include "host_pipeline.h"
#include "partition_codec.h"

namespace bytecomp::worker {
namespace {

proto::DType WireOf(compress::SummedWire wire) {
  switch (wire) {
    case compress::SummedWire::kFloat16:
      return proto::DTYPE_FLOAT16;
    case compress::SummedWire::kBfloat16:
      return proto::DTYPE_BFLOAT16;
    case compress::SummedWire::kFloat32:
      break;
  }
  return proto::DTYPE_FLOAT32;
}

}  // namespace

void HostPipeline::Send(const std::shared_ptr<EncodedPush>& push) {
  const Operation& op = *push->op;
  if (!op.plan().collective()) {
    ctx_.to_data_thread->Push(push);
    return;
  }
  const int64_t partition = push->partition;
  bool aborted = !push->abort_error.empty();
  proto::DType wire = proto::DTYPE_FLOAT32;
  std::vector<float> values;
  std::vector<uint8_t> payload;
  if (op.plan().scheme == proto::SCHEME_ALLGATHER) {
    payload = std::move(push->payload);
  } else if (PartitionCodec& pc = op.codecs()->partitions[partition]; pc.push != nullptr) {
    const size_t n = static_cast<size_t>(op.layout().range(partition).count);
    if (push->stage != 0) {
      // Two-round codecs: the stage's fp32 factors, after the payload's u32 stage.
      compress::TwoRoundCodec* two = compress::AsTwoRound(*pc.push);
      const size_t floats = push->stage == 1 ? two->FirstRoundFloats(n) : two->SecondRoundFloats(n);
      values.assign(floats, 0.0f);
      if (!aborted && floats > 0 && push->payload.size() == 4 + 4 * floats) {
        std::memcpy(values.data(), push->payload.data() + 4, 4 * floats);
      } else {
        aborted = true;
      }
    } else {
      // A codec whose encoded values sum: its dense vector of them (randomk: the k values at
      // the shared indices; fp16: all n).
      const compress::CodecContext ctx = ctx_.ContextFor(op, partition, ctx_.rank);
      if (const compress::CodecFacts* facts = compress::CodecFactsOf(op.plan().push.name())) {
        wire = WireOf(facts->summed_wire);
      }
      values.assign(pc.push->SummedLength(n, ctx), 0.0f);
      if (!aborted) {
        absl::Status added =
            pc.push->AddEncodedValues(push->payload, ctx, n, absl::MakeSpan(values));
        if (!added.ok()) {
          push->op->RecordError(added);
          aborted = true;
        }
      }
    }
  } else {
    aborted = true;  // no codec (EnsureCodecs failed): the collectives end on the mismatch
  }
  CollectiveItem item;
  item.values = std::move(values);
  item.payload = std::move(payload);
  item.wire = wire;
  item.aborted = aborted;
  SubmitCollective(push->op, partition, push->stage, std::move(item));
}

void HostPipeline::StartCollective(const std::shared_ptr<Operation>& op) {
  const size_t elem = DTypeSize(op->dtype());
  const bool gather = op->plan().scheme == proto::SCHEME_ALLGATHER;
  for (int64_t p = 0; p < op->layout().num_partitions(); ++p) {
    const PartitionRange range = op->layout().range(p);
    const size_t n = static_cast<size_t>(range.count);
    const char* src = op->host_data() + range.offset * elem;
    ctx_.traffic->CountPush(static_cast<int64_t>(n * elem), static_cast<int64_t>(n * elem), "");
    if (!gather && op->dtype() == proto::DTYPE_FLOAT32) {
      // fp32 values are read from the tensor when their batch runs, into the fused buffer.
      CollectiveItem item;
      item.source = absl::MakeConstSpan(reinterpret_cast<const float*>(src), n);
      item.released = [this, op, p] { ctx_.tracker->PayloadReleased(op, p); };
      SubmitCollective(op, p, 0, std::move(item));
      continue;
    }
    // Others are widened (or, to be gathered, copied) on the pool; an allreduce sums fp16 and
    // bf16 tensors in their own type, as DDP does.
    ctx_.RunOnPool(op, p, [this, op, p, src, n, elem, gather] {
      CollectiveItem item;
      if (gather) {
        item.payload.assign(src, src + n * elem);
      } else {
        item.values.resize(n);
        ToFloat32(op->dtype(), src, item.values.data(), n);
        item.wire = op->dtype();
      }
      ctx_.tracker->PayloadReleased(op, p);  // copied: the caller's memory is no longer read
      SubmitCollective(op, p, 0, std::move(item));
    });
  }
}

void HostPipeline::SubmitDeviceCollective(const std::shared_ptr<Operation>& op, int64_t partition,
                                          DeviceValues values) {
  const size_t bytes = values.count * DTypeSize(values.dtype);
  ctx_.traffic->CountPush(static_cast<int64_t>(bytes), static_cast<int64_t>(bytes), "");
  CollectiveItem item;
  item.wire = values.dtype;
  item.device = values;
  // The device memory is read until the sum is done.
  item.released = [this, op, partition] { ctx_.tracker->PayloadReleased(op, partition); };
  SubmitCollective(op, partition, 0, std::move(item));
}

void HostPipeline::SubmitCollective(const std::shared_ptr<Operation>& op, int64_t partition,
                                    uint32_t stage, CollectiveItem item) {
  if (collectives_ == nullptr) {
    if (item.released) item.released();
    ctx_.tracker->ResultFailed(
        op, partition,
        absl::FailedPreconditionError(absl::StrCat(
            "tensor '", op->request.name, "': the strategy sums it with ",
            proto::Scheme_Name(op->plan().scheme),
            ", but this worker joined no collectives (the job's ClusterConfig.collectives is "
            "off)")));
    return;
  }
  item.key = MakeKey(op->layout().tensor_id, static_cast<uint32_t>(partition));
  item.round = op->round();
  item.stage = stage;
  item.scheme = op->plan().scheme;
  item.name = op->request.name;
  item.done = [this, op, partition, stage](absl::StatusOr<CollectiveResult> result) {
    ctx_.RunOnPool(op, partition, [this, op, partition, stage, r = std::move(result)]() mutable {
      if (!r.ok()) {
        ctx_.tracker->ResultFailed(
            op, partition,
            absl::Status(
                r.status().code(),
                absl::StrCat("round ", op->round(), " of '", op->request.name, "' partition ",
                             partition, " (", proto::Scheme_Name(op->plan().scheme),
                             "): ", r.status().message())));
        return;
      }
      if (r->in_place) {  // summed (and averaged) in the device tensor itself
        const int64_t bytes = static_cast<int64_t>(r->count * DTypeSize(op->dtype()));
        ctx_.traffic->CountPull(bytes, bytes, "");
        ctx_.tracker->ResultIn(op, partition);
        return;
      }
      if (stage == 1) {
        ctx_.traffic->CountPull(static_cast<int64_t>(r->count * sizeof(float)), 0,
                                op->plan().push.name());
        EncodeSecondRound(op, partition, r->sum());
        return;
      }
      absl::Status written = WriteCollectiveResult(op, partition, stage, *r);
      if (written.ok()) {
        op->stages->ResultWritten(op, partition);
      } else {
        ctx_.tracker->ResultFailed(op, partition, written);
      }
    });
  };
  collectives_->Submit(std::move(item));
}

absl::Status HostPipeline::WriteCollectiveResult(const std::shared_ptr<Operation>& op,
                                                 int64_t partition, uint32_t stage,
                                                 const CollectiveResult& result) {
  const PartitionRange range = op->layout().range(partition);
  const size_t n = static_cast<size_t>(range.count);
  const size_t elem = DTypeSize(op->dtype());
  const bool compressed = op->plan().compressed();
  const bool gather = op->plan().scheme == proto::SCHEME_ALLGATHER;
  int64_t received = 0;
  if (gather) {
    for (const auto& p : result.payloads) received += static_cast<int64_t>(p.size());
  } else {
    received = static_cast<int64_t>(result.count * sizeof(float));
  }
  ctx_.traffic->CountPull(received, static_cast<int64_t>(n * elem),
                          compressed ? absl::string_view(op->plan().push.name()) : "");
  auto error = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat("round ", op->round(), " of '", op->request.name,
                                            "' partition ", partition, ": ", what));
  };
  if (!compressed && !gather) {  // the raw sum: one pass into the tensor, averaged if asked
    if (result.count != n) return error(absl::StrCat("a sum of ", result.count, " values"));
    StoreSum(*op, partition, result.sum().data());
    return absl::OkStatus();
  }
  std::vector<float> scratch;
  absl::Span<float> out;
  if (op->dtype() == proto::DTYPE_FLOAT32) {
    out = absl::MakeSpan(reinterpret_cast<float*>(op->host_data()) + range.offset, n);
  } else {
    scratch.resize(n);
    out = absl::MakeSpan(scratch);
  }
  absl::Status status;
  if (gather) {
    std::fill(out.begin(), out.end(), 0.0f);
    for (size_t rank = 0; rank < result.payloads.size() && status.ok(); ++rank) {
      absl::Span<const uint8_t> p = result.payloads[rank];
      if (!compressed) {
        if (p.size() != n * elem) {
          return error(absl::StrCat("worker ", rank, " gave ", p.size(), " bytes for ", n, " ",
                                    DTypeName(op->dtype()), " values"));
        }
        AddToFloat32(op->dtype(), p.data(), out.data(), n);
      } else {
        status = op->codecs()->partitions[partition].push->DecodeAdd(
            p, ctx_.ContextFor(*op, partition, static_cast<uint32_t>(rank)), out);
        if (!status.ok()) {
          return error(absl::StrCat("decoding worker ", rank, "'s payload: ", status.message()));
        }
      }
    }
  } else {
    PartitionCodec& pc = op->codecs()->partitions[partition];
    const compress::CodecContext ctx = ctx_.ContextFor(*op, partition, ctx_.rank);
    status = stage == 2 ? compress::AsTwoRound(*pc.push)->DecodeSecond(result.sum(), ctx, out)
                        : pc.push->ExpandSum(result.sum(), ctx, out);
    if (!status.ok()) return error(std::string(status.message()));
  }
  FinishSum(*op, partition, out);
  return absl::OkStatus();
}

}  // namespace bytecomp::worker
