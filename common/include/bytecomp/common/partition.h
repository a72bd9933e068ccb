// Keys and partitions: how a declared tensor is cut and named on the wire. Every node computes
// these alike from the DeclareReply the scheduler broadcasts.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "control.pb.h"
#include "data.pb.h"

namespace bytecomp {

inline uint64_t MakeKey(uint32_t tensor_id, uint32_t partition) {
  return (static_cast<uint64_t>(tensor_id) << 32) | partition;
}
inline uint32_t KeyTensor(uint64_t key) { return static_cast<uint32_t>(key >> 32); }
inline uint32_t KeyPartition(uint64_t key) { return static_cast<uint32_t>(key & 0xffffffffu); }

struct PartitionRange {
  int64_t offset = 0;  // first element
  int64_t count = 0;   // elements
};

// A declared tensor's layout.
struct TensorLayout {
  uint32_t tensor_id = 0;
  int64_t element_count = 0;
  proto::DType dtype = proto::DTYPE_FLOAT32;
  int64_t partition_elements = 1;
  std::vector<int32_t> partition_server;  // server rank of each partition
  // Elements per row of the tensor's matrix view (DeclareReply.row_elements); 0: flat.
  int64_t row_elements = 0;

  int64_t num_partitions() const { return static_cast<int64_t>(partition_server.size()); }
  PartitionRange range(int64_t partition) const {
    const int64_t offset = partition * partition_elements;
    const int64_t end = std::min(element_count, offset + partition_elements);
    return {offset, end - offset};
  }
};

// Whether `shape`'s dimensions are all >= 1 and multiply to `elements` (without overflow).
inline bool ShapeHolds(absl::Span<const int64_t> shape, int64_t elements) {
  int64_t product = 1;
  for (int64_t d : shape) {
    if (d < 1 || d > elements / product) return false;
    product *= d;
  }
  return product == elements;
}

inline int64_t NumPartitions(int64_t element_count, int64_t partition_elements) {
  return (element_count + partition_elements - 1) / partition_elements;
}

// Checks a DeclareReply's consistency (partition count matches, servers in range) and builds
// the layout.
absl::StatusOr<TensorLayout> LayoutFromDeclareReply(const proto::DeclareReply& reply,
                                                    int num_servers);

}  // namespace bytecomp
