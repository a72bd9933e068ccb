// Cuts declared tensors into partitions and assigns each partition to a server. Pure logic,
// no I/O, so the balancing rule is unit-tested on its own.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "bytecomp/common/dtype.h"

namespace bytecomp {

// A tensor's partitioning: `partition_elements` per partition (the last may be shorter) and
// the server rank of each partition.
struct PartitionAssignment {
  int64_t partition_elements = 0;
  std::vector<int32_t> partition_server;
};

// Balancing rule: every partition goes to the server with the fewest bytes assigned so far
// (ties: the lowest rank). The state carries over between tensors, so the same declarations
// in the same order give the same assignment on every run (deterministic).
class PartitionAssigner {
 public:
  // A tensor may have at most this many partitions (bounds the reply size and memory that a
  // bad declaration could ask for: 2^20 partitions of 4 MiB is 4 TiB).
  static constexpr int64_t kMaxPartitionsPerTensor = int64_t{1} << 20;

  PartitionAssigner(int num_servers, int64_t partition_bytes);

  // max(1, partition_bytes / dtype size).
  static int64_t PartitionElements(int64_t partition_bytes, DType dtype);
  // ceil(element_count / partition_elements).
  static int64_t PartitionCount(int64_t element_count, int64_t partition_elements);

  // Validates the declaration (element_count >= 1, a known dtype, not too many partitions),
  // then assigns every partition. With `row_elements` > 0 (it divides element_count), a
  // partition is a whole number of rows: partition_elements rounded down to a multiple of it,
  // one row at least. On error nothing is assigned.
  absl::StatusOr<PartitionAssignment> Assign(int64_t element_count, DType dtype,
                                             int64_t row_elements = 0);

  // Bytes assigned to each server so far, indexed by server rank.
  const std::vector<int64_t>& bytes_per_server() const { return bytes_per_server_; }

 private:
  int64_t partition_bytes_;
  std::vector<int64_t> bytes_per_server_;
};

}  // namespace bytecomp
