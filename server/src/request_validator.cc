#include "bytecomp/server/request_validator.h"

#include "absl/strings/str_cat.h"
#include "bytecomp/common/dtype.h"

namespace bytecomp::server {

void RequestValidator::AddTensor(const TensorLayout& layout) {
  for (int64_t p = 0; p < layout.num_partitions(); ++p) {
    if (layout.partition_server[p] != my_rank_) continue;
    partitions_[MakeKey(layout.tensor_id, static_cast<uint32_t>(p))] =
        PartitionInfo{layout.range(p).count, layout.dtype};
  }
}

bool RequestValidator::IsDeclared(uint64_t key) const { return partitions_.contains(key); }

absl::Status RequestValidator::Validate(const proto::DataHeader& h, bool has_payload,
                                        size_t payload_size) const {
  const std::string where = absl::StrCat("key ", KeyTensor(h.key()), ":", KeyPartition(h.key()),
                                         " round ", h.round());
  if (h.op() != proto::OP_PUSH && h.op() != proto::OP_PULL) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported op ", proto::DataOp_Name(h.op()), " (expected OP_PUSH or OP_PULL)"));
  }
  if (h.sender() < 0 || h.sender() >= num_workers_) {
    return absl::InvalidArgumentError(absl::StrCat("sender ", h.sender(),
                                                   " is not a worker rank (0..", num_workers_ - 1,
                                                   ")"));
  }
  auto it = partitions_.find(h.key());
  if (it == partitions_.end()) {
    return absl::NotFoundError(
        absl::StrCat("unknown key ", KeyTensor(h.key()), ":", KeyPartition(h.key()),
                     " (not declared, or owned by another server than server ", my_rank_, ")"));
  }
  const PartitionInfo& info = it->second;
  if (h.element_count() != info.element_count) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": element_count ", h.element_count(),
                                                   ", declared ", info.element_count));
  }
  if (!IsValidDType(h.dtype()) || h.dtype() != info.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": dtype ", static_cast<int>(h.dtype()),
                                                   ", declared ", DTypeName(info.dtype)));
  }
  if (!h.codec().empty() && h.codec() != "none") {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": codec '", h.codec(), "' is not the key's codec (none)"));
  }
  if (h.op() == proto::OP_PUSH) {
    const size_t expected = static_cast<size_t>(info.element_count) * DTypeSize(info.dtype);
    if (!has_payload) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": push without a payload frame"));
    }
    if (payload_size != expected || static_cast<size_t>(h.payload_bytes()) != payload_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": payload is ", payload_size, " bytes (header says ", h.payload_bytes(),
          "), expected ", expected));
    }
  } else if (has_payload) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": pull must not carry a payload"));
  }
  return absl::OkStatus();
}

}  // namespace bytecomp::server
