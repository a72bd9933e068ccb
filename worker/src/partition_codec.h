// A tensor's codec objects, per partition: kept between rounds (error-feedback memories carry
// state from one round to the next), used by the stage tasks of the tensor's running
// operation. No lock: a tensor's operations run one at a time and, within one, each partition
// is one task's at a time; the tensor table touches them only while the tensor is idle
// (checkpoints) or starting an operation.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bytecomp/compress.h"
#include "bytecomp/worker/device_backend.h"
#include "operation.h"

namespace bytecomp::worker {

// One partition's codec objects on this worker: the push codec and its error-feedback memory,
// and the decoder of two-way pulls. Made for one strategy version.
struct PartitionCodec {
  uint64_t version = 0;
  // Encodes on the host; where the device encodes, made only to decode a one-way sum in its
  // format (blocksparse).
  std::unique_ptr<compress::Codec> push;
  std::unique_ptr<compress::Memory> memory;
  std::unique_ptr<compress::Codec> pull;                   // two-way only
  std::vector<float> input, compensated, decoded, output;  // scratch, reused across rounds
  // Adaptive ratio: this round's sum(decoded^2) (what was sent) and sum(compensated^2);
  // sent_energy -1 when not measured (a device encode, no memory).
  double sent_energy = -1, compensated_energy = 0;
  // What the push memory was made for (its codec, memory, memory params, element count): a
  // new version with the same keeps the memory (EnsureCodecs).
  std::string memory_identity;
  // Device tensors whose stages run on the device (made on first use for `version`).
  std::unique_ptr<DeviceCodec> device_push, device_pull;
  bool device_memory = false;                      // device_push has an error-feedback memory fused
  DeviceAllocation device_encoded, device_pulled;  // payload buffers on the device
  size_t device_encoded_bytes = 0, device_pulled_bytes = 0;
};

struct TensorCodecs {
  std::vector<PartitionCodec> partitions;
  // Error-feedback state restored from a checkpoint before the partition's memory existed;
  // loaded into the memory when it is made.
  std::vector<std::string> restored_state;
  // A placement the strategy asked for could not be followed: said once per tensor.
  std::atomic<bool> placement_logged{false};

  void Resize(size_t parts) {
    if (partitions.size() != parts) partitions.resize(parts);
    if (restored_state.size() != parts) restored_state.resize(parts);
  }
};

// Makes the partition's codec objects for the operation's strategy version: on the host, or
// on the device for the stages of a device tensor that run there.
absl::Status EnsureCodecs(const Operation& op, int64_t partition);

// Every partition's error-feedback state (tensor_checkpoint.h), and loading one; both only
// while the tensor is idle.
absl::StatusOr<std::vector<std::string>> SaveCodecStates(const std::string& tensor,
                                                         const TensorCodecs& codecs,
                                                         size_t partitions);
absl::Status LoadCodecStates(TensorCodecs& codecs, std::vector<std::string> states);

}  // namespace bytecomp::worker
