// Checks every field of a data request against what the scheduler declared, before the
// request reaches a key's state. Owned by the server's I/O thread.
#pragma once

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "bytecomp/common/partition.h"
#include "data.pb.h"

namespace bytecomp::server {

class RequestValidator {
 public:
  RequestValidator(int my_rank, int num_workers) : my_rank_(my_rank), num_workers_(num_workers) {}

  // Records a tensor declared by the scheduler (only partitions this server owns matter).
  void AddTensor(const TensorLayout& layout);
  bool IsDeclared(uint64_t key) const;

  // OK if the request may be handed to the key's engine: op is PUSH or PULL, the sender is a
  // worker rank, the key is declared and owned by this server, element count and dtype match
  // the declaration, the codec is supported, and the payload has exactly the expected bytes
  // (PUSH) or is absent (PULL). The error says which field is wrong and what was expected.
  absl::Status Validate(const proto::DataHeader& header, bool has_payload,
                        size_t payload_size) const;

 private:
  struct PartitionInfo {
    int64_t element_count;
    proto::DType dtype;
  };
  int my_rank_;
  int num_workers_;
  absl::flat_hash_map<uint64_t, PartitionInfo> partitions_;
};

}  // namespace bytecomp::server
