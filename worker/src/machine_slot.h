// Where this training process runs, as the launcher tells it (environment): the machine and
// its slot there. The scheduler groups workers by machine for hierarchical mode; the local
// rank and size, when given, are checked against its grouping.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace bytecomp::worker {

struct MachineSlot {
  std::string machine;  // empty: the hostname
  std::optional<int> local_rank;
  std::optional<int> local_size;
};

// BYTECOMP_MACHINE, BYTECOMP_LOCAL_RANK, BYTECOMP_LOCAL_SIZE (each optional); the error names
// the variable and its value.
absl::StatusOr<MachineSlot> MachineSlotFromEnv();

}  // namespace bytecomp::worker
