#include "bytecomp/common/partition.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "bytecomp/common/dtype.h"

namespace bytecomp {

absl::StatusOr<TensorLayout> LayoutFromDeclareReply(const proto::DeclareReply& reply,
                                                    int num_servers) {
  TensorLayout layout;
  layout.tensor_id = reply.tensor_id();
  layout.element_count = reply.element_count();
  if (!IsValidDType(reply.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("declaration of '", reply.name(), "' has invalid dtype ", reply.dtype()));
  }
  layout.dtype = static_cast<proto::DType>(reply.dtype());
  layout.partition_elements = reply.partition_elements();
  if (layout.element_count < 1 || layout.partition_elements < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("declaration of '", reply.name(), "' has element_count ", layout.element_count,
                     ", partition_elements ", layout.partition_elements));
  }
  const int64_t parts = NumPartitions(layout.element_count, layout.partition_elements);
  if (parts != reply.partition_server_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("declaration of '", reply.name(), "' lists ", reply.partition_server_size(),
                     " partition servers for ", parts, " partitions"));
  }
  for (int32_t s : reply.partition_server()) {
    if (s < 0 || s >= num_servers) {
      return absl::InvalidArgumentError(absl::StrCat("declaration of '", reply.name(),
                                                     "' names server ", s, " of ", num_servers));
    }
  }
  layout.partition_server.assign(reply.partition_server().begin(), reply.partition_server().end());
  layout.row_elements = reply.row_elements();
  if (layout.row_elements < 0 ||
      (layout.row_elements > 0 && (layout.element_count % layout.row_elements != 0 ||
                                   layout.partition_elements % layout.row_elements != 0))) {
    return absl::InvalidArgumentError(
        absl::StrCat("declaration of '", reply.name(), "' has rows of ", layout.row_elements,
                     " elements, which do not divide its ", layout.element_count,
                     " elements in partitions of ", layout.partition_elements));
  }
  return layout;
}

}  // namespace bytecomp
