// What the workers of a job may declare, and the running totals checked against it: the
// scheduler before it decides a declaration, each server again before it keeps one, so that no
// peer can make either allocate without bound. The limits are ClusterConfig.max_tensors,
// max_tensor_name_bytes and max_declared_bytes, and kMaxJobPartitions; every error names the
// limit and its config field.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "bytecomp/common/dtype.h"
#include "cluster_config.pb.h"

namespace bytecomp {

// Partitions of every declared tensor together. Each costs a server-rank entry in every node's
// layout of its tensor (4 bytes per copy) and in the DeclareReply that lists it; 4194304
// partitions of 4 MiB are 16 TiB.
inline constexpr int64_t kMaxJobPartitions = int64_t{1} << 22;

class DeclarationBudget {
 public:
  // The limits of `config` (defaults applied).
  explicit DeclarationBudget(const proto::ClusterConfig& config);

  // Not empty and at most max_tensor_name_bytes; the error quotes at most 64 bytes of it.
  absl::Status CheckName(absl::string_view name) const;
  // One more tensor (`name`, element_count elements of dtype, in `partitions` partitions) fits
  // beside those taken: its name, the tensor count, the bytes (without overflow) and the
  // partitions.
  absl::Status CheckTensor(absl::string_view name, int64_t element_count, DType dtype,
                           int64_t partitions) const;
  // Counts a tensor that CheckTensor accepted.
  void Take(int64_t element_count, DType dtype, int64_t partitions);

  int64_t tensors() const { return tensors_; }
  int64_t bytes() const { return bytes_; }
  int64_t partitions() const { return partitions_; }
  int64_t max_tensors() const { return max_tensors_; }

 private:
  int64_t max_tensors_;
  int64_t max_name_bytes_;
  int64_t max_bytes_;
  int64_t tensors_ = 0;
  int64_t bytes_ = 0;
  int64_t partitions_ = 0;
};

}  // namespace bytecomp
