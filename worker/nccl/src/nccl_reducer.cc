#include "bytecomp/worker/nccl_reducer.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace bytecomp::worker {
namespace {

static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes, "NCCL unique id size changed");

absl::Status NcclError(absl::string_view what, ncclResult_t rc) {
  return absl::InternalError(absl::StrCat("NCCL ", what, ": ", ncclGetErrorString(rc)));
}

absl::StatusOr<ncclDataType_t> NcclType(DType dtype) {
  switch (dtype) {
    case proto::DTYPE_FLOAT32:
      return ncclFloat32;
    case proto::DTYPE_FLOAT16:
      return ncclFloat16;
    case proto::DTYPE_BFLOAT16:
      return ncclBfloat16;
    default:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("NCCL reduction: unsupported dtype ", static_cast<int>(dtype)));
}

absl::Status CheckPadded(size_t padded_elements, int ranks, absl::string_view what) {
  if (padded_elements % static_cast<size_t>(ranks) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", padded_elements, " elements is not a multiple of the ", ranks,
                     " local ranks; pad the buffer to ShardOf(...).padded_elements"));
  }
  return absl::OkStatus();
}

}  // namespace

LocalShard ShardOf(size_t elements, int rank, int ranks) {
  LocalShard s;
  const size_t r = static_cast<size_t>(ranks > 0 ? ranks : 1);
  s.shard_elements = (elements + r - 1) / r;
  s.padded_elements = s.shard_elements * r;
  s.offset = std::min(elements, s.shard_elements * static_cast<size_t>(rank));
  s.elements = std::min(s.shard_elements, elements - s.offset);
  return s;
}

absl::StatusOr<std::string> NewNcclUniqueId() {
  ncclUniqueId id;
  if (ncclResult_t rc = ncclGetUniqueId(&id); rc != ncclSuccess) {
    return NcclError("ncclGetUniqueId", rc);
  }
  return std::string(id.internal, sizeof(id.internal));
}

absl::StatusOr<int> CurrentNcclDevice() {
  int count = 0;
  if (cudaError_t rc = cudaGetDeviceCount(&count); rc != cudaSuccess || count < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("no usable GPU (cudaGetDeviceCount: ",
                     rc != cudaSuccess ? cudaGetErrorString(rc) : "0 devices", ")"));
  }
  int device = 0;
  if (cudaError_t rc = cudaGetDevice(&device); rc != cudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat("cudaGetDevice: ", cudaGetErrorString(rc)));
  }
  return device;
}

absl::StatusOr<std::unique_ptr<NcclLocalReducer>> NcclLocalReducer::Create(
    absl::string_view unique_id, int local_rank, int local_size, int device) {
  if (unique_id.size() != kNcclUniqueIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NCCL unique id has ", unique_id.size(), " bytes; expected ", kNcclUniqueIdBytes,
        " (the bytes from NewNcclUniqueId, passed on by the scheduler)"));
  }
  if (local_size < 1 || local_rank < 0 || local_rank >= local_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL local rank ", local_rank, " is outside 0..", local_size - 1));
  }
  if (cudaError_t rc = cudaSetDevice(device); rc != cudaSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat("NCCL: cudaSetDevice(", device, "): ", cudaGetErrorString(rc)));
  }
  ncclUniqueId id;
  std::memcpy(id.internal, unique_id.data(), kNcclUniqueIdBytes);
  ncclComm_t comm = nullptr;
  if (ncclResult_t rc = ncclCommInitRank(&comm, local_size, id, local_rank); rc != ncclSuccess) {
    return NcclError(absl::StrCat("ncclCommInitRank (rank ", local_rank, " of ", local_size, ")"),
                     rc);
  }
  return std::unique_ptr<NcclLocalReducer>(
      new NcclLocalReducer(comm, local_rank, local_size, device));
}

NcclLocalReducer::~NcclLocalReducer() {
  if (comm_ != nullptr) ncclCommDestroy(static_cast<ncclComm_t>(comm_));
}

void NcclLocalReducer::Abort() {
  if (comm_ != nullptr) ncclCommAbort(static_cast<ncclComm_t>(comm_));
  comm_ = nullptr;
}

absl::Status NcclLocalReducer::ReduceScatterInPlace(void* buffer, size_t padded_elements,
                                                    DType dtype, void* stream) {
  if (absl::Status s = CheckPadded(padded_elements, size_, "reduce-scatter"); !s.ok()) return s;
  absl::StatusOr<ncclDataType_t> type = NcclType(dtype);
  if (!type.ok()) return type.status();
  const size_t shard = padded_elements / static_cast<size_t>(size_);
  // In place when recvbuff == sendbuff + rank * recvcount (NCCL's in-place rule).
  char* base = static_cast<char*>(buffer);
  void* recv = base + shard * static_cast<size_t>(rank_) * DTypeSize(dtype);
  const ncclResult_t rc =
      ncclReduceScatter(buffer, recv, shard, *type, ncclSum, static_cast<ncclComm_t>(comm_),
                        static_cast<cudaStream_t>(stream));
  return rc == ncclSuccess ? absl::OkStatus() : NcclError("ncclReduceScatter", rc);
}

absl::Status NcclLocalReducer::AllGatherInPlace(void* buffer, size_t padded_elements, DType dtype,
                                                void* stream) {
  if (absl::Status s = CheckPadded(padded_elements, size_, "all-gather"); !s.ok()) return s;
  absl::StatusOr<ncclDataType_t> type = NcclType(dtype);
  if (!type.ok()) return type.status();
  const size_t shard = padded_elements / static_cast<size_t>(size_);
  char* base = static_cast<char*>(buffer);
  const void* send = base + shard * static_cast<size_t>(rank_) * DTypeSize(dtype);
  const ncclResult_t rc = ncclAllGather(send, buffer, shard, *type, static_cast<ncclComm_t>(comm_),
                                        static_cast<cudaStream_t>(stream));
  return rc == ncclSuccess ? absl::OkStatus() : NcclError("ncclAllGather", rc);
}

absl::Status NcclLocalReducer::ReduceToRoot(void* buffer, size_t elements, DType dtype, int root,
                                            void* stream) {
  absl::StatusOr<ncclDataType_t> type = NcclType(dtype);
  if (!type.ok()) return type.status();
  const ncclResult_t rc =
      ncclReduce(buffer, buffer, elements, *type, ncclSum, root, static_cast<ncclComm_t>(comm_),
                 static_cast<cudaStream_t>(stream));
  return rc == ncclSuccess ? absl::OkStatus() : NcclError("ncclReduce", rc);
}

absl::Status NcclLocalReducer::BroadcastFromRoot(void* buffer, size_t elements, DType dtype,
                                                 int root, void* stream) {
  absl::StatusOr<ncclDataType_t> type = NcclType(dtype);
  if (!type.ok()) return type.status();
  const ncclResult_t rc =
      ncclBroadcast(buffer, buffer, elements, *type, root, static_cast<ncclComm_t>(comm_),
                    static_cast<cudaStream_t>(stream));
  return rc == ncclSuccess ? absl::OkStatus() : NcclError("ncclBroadcast", rc);
}

absl::Status NcclLocalReducer::AllReduceInPlace(void* buffer, size_t elements, DType dtype,
                                                bool average, void* stream) {
  absl::StatusOr<ncclDataType_t> type = NcclType(dtype);
  if (!type.ok()) return type.status();
  const ncclResult_t rc =
      ncclAllReduce(buffer, buffer, elements, *type, average ? ncclAvg : ncclSum,
                    static_cast<ncclComm_t>(comm_), static_cast<cudaStream_t>(stream));
  return rc == ncclSuccess ? absl::OkStatus() : NcclError("ncclAllReduce", rc);
}

absl::Status NcclLocalReducer::GroupStart() {
  const ncclResult_t rc = ncclGroupStart();
  return rc == ncclSuccess ? absl::OkStatus() : NcclError("ncclGroupStart", rc);
}

absl::Status NcclLocalReducer::GroupEnd() {
  const ncclResult_t rc = ncclGroupEnd();
  return rc == ncclSuccess ? absl::OkStatus() : NcclError("ncclGroupEnd", rc);
}

}  // namespace bytecomp::worker
