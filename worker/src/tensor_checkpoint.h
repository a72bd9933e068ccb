// The checkpoint format of a tensor's error-feedback state (bytecomp_save_state /
// bytecomp_load_state): u32 partition count, then per partition a u64 length and that
// partition's memory state (compress::SaveMemoryState's bytes; length 0: no memory, or no
// round yet). Integers are little-endian, as the machines that train are.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace bytecomp::worker {

std::string EncodeTensorState(const std::vector<std::string>& partition_states);

// The per-partition states of `state`, which must hold exactly `partitions`. Errors
// (InvalidArgument) name the tensor: "error-feedback state of 'w': truncated".
absl::StatusOr<std::vector<std::string>> DecodeTensorState(absl::string_view tensor,
                                                           absl::string_view state,
                                                           size_t partitions);

}  // namespace bytecomp::worker
