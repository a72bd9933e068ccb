#include "bytecomp/common/partition_assigner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace bytecomp {

PartitionAssigner::PartitionAssigner(int num_servers, int64_t partition_bytes)
    : partition_bytes_(partition_bytes), bytes_per_server_(std::max(num_servers, 1), 0) {}

int64_t PartitionAssigner::PartitionElements(int64_t partition_bytes, DType dtype) {
  const int64_t size = static_cast<int64_t>(DTypeSize(dtype));
  if (size == 0) return 1;
  return std::max<int64_t>(1, partition_bytes / size);
}

int64_t PartitionAssigner::PartitionCount(int64_t element_count, int64_t partition_elements) {
  if (element_count <= 0 || partition_elements <= 0) return 0;
  return (element_count - 1) / partition_elements + 1;
}

absl::StatusOr<PartitionAssignment> PartitionAssigner::Assign(int64_t element_count, DType dtype,
                                                              int64_t row_elements) {
  if (!IsValidDType(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown dtype ", static_cast<int>(dtype)));
  }
  if (element_count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("element count must be >= 1, got ", element_count));
  }
  const int64_t dtype_size = static_cast<int64_t>(DTypeSize(dtype));
  PartitionAssignment out;
  out.partition_elements = PartitionElements(partition_bytes_, dtype);
  if (row_elements > 0) {
    if (element_count % row_elements != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rows of ", row_elements, " elements do not divide ", element_count, " elements"));
    }
    out.partition_elements =
        std::max(row_elements, out.partition_elements / row_elements * row_elements);
  }
  const int64_t count = PartitionCount(element_count, out.partition_elements);
  if (count > kMaxPartitionsPerTensor) {
    return absl::InvalidArgumentError(absl::StrCat(
        element_count, " elements make ", count, " partitions of ", out.partition_elements,
        " elements; at most ", kMaxPartitionsPerTensor, " are allowed"));
  }
  out.partition_server.reserve(count);
  for (int64_t p = 0; p < count; ++p) {
    const int64_t elements =
        std::min(out.partition_elements, element_count - p * out.partition_elements);
    // min_element returns the first minimum: ties go to the lowest rank.
    const auto least = std::min_element(bytes_per_server_.begin(), bytes_per_server_.end());
    *least += elements * dtype_size;
    out.partition_server.push_back(static_cast<int32_t>(least - bytes_per_server_.begin()));
  }
  return out;
}

}  // namespace bytecomp
