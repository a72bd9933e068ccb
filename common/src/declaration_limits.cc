#include "bytecomp/common/declaration_limits.h"

#include "absl/strings/str_cat.h"
#include "bytecomp/common/refusal_log.h"

namespace bytecomp {

DeclarationBudget::DeclarationBudget(const proto::ClusterConfig& config)
    : max_tensors_(config.max_tensors()),
      max_name_bytes_(config.max_tensor_name_bytes()),
      max_bytes_(config.max_declared_bytes()) {}

absl::Status DeclarationBudget::CheckName(absl::string_view name) const {
  if (name.empty()) return absl::InvalidArgumentError("tensor name must not be empty");
  if (static_cast<int64_t>(name.size()) > max_name_bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("tensor name '", Printable(name, 64), "' is longer than the job's limit of ",
                     max_name_bytes_, " bytes (ClusterConfig.max_tensor_name_bytes)"));
  }
  return absl::OkStatus();
}

absl::Status DeclarationBudget::CheckTensor(absl::string_view name, int64_t element_count,
                                            DType dtype, int64_t partitions) const {
  if (absl::Status s = CheckName(name); !s.ok()) return s;
  const int64_t size = static_cast<int64_t>(DTypeSize(dtype));
  const std::string what = absl::StrCat("tensor '", Printable(name, 64), "'");
  if (size == 0 || element_count < 1 || partitions < 1) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", element_count, " elements of dtype ",
                                                   static_cast<int>(dtype), " in ", partitions,
                                                   " partitions"));
  }
  if (tensors_ >= max_tensors_) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": the job has declared ", tensors_,
                     " tensors, its limit (ClusterConfig.max_tensors)"));
  }
  // element_count * size without overflow: compare against what is left.
  const int64_t left = max_bytes_ - bytes_;
  if (element_count > left / size) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, ": ", element_count, " elements of ", DTypeName(dtype),
        " would bring the job's "
        "declared bytes beyond its limit of ",
        max_bytes_, " (ClusterConfig.max_declared_bytes; ", bytes_, " declared so far)"));
  }
  if (partitions > kMaxJobPartitions - partitions_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        what, ": its ", partitions, " partitions would bring the job beyond ", kMaxJobPartitions,
        " partitions (", partitions_, " so far; a larger partition_bytes makes fewer)"));
  }
  return absl::OkStatus();
}

void DeclarationBudget::Take(int64_t element_count, DType dtype, int64_t partitions) {
  ++tensors_;
  bytes_ += element_count * static_cast<int64_t>(DTypeSize(dtype));
  partitions_ += partitions;
}

}  // namespace bytecomp
