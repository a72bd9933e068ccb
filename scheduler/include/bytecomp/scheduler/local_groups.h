// Machine grouping of workers: which workers share a machine, their local ranks, and which
// workers push to the servers. Pure functions of what the workers said when they registered,
// so the scheduler's checks are unit-tested without sockets.
//
// A worker names its machine (Register.machine, default its hostname) and may ask for a local
// rank and declare its machine's worker count (BYTECOMP_LOCAL_RANK / BYTECOMP_LOCAL_SIZE, set
// by launchers). Local ranks asked for are honoured; the others are filled in ascending worker
// rank. Local rank 0 is the machine's local root.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace bytecomp {

// Where a worker says it runs, from its Register: its machine and, optionally, the local rank
// it asks for and its machine's worker count (the worker's own view is worker::MachineSlot).
struct SlotRequest {
  int rank = -1;  // worker rank
  std::string machine;
  std::optional<int> requested_local_rank;
  std::optional<int> declared_local_size;
};

struct LocalAssignment {
  // By worker rank.
  std::vector<int> local_rank;
  std::vector<int> local_size;
  std::vector<int> local_root;  // worker rank of the machine's local rank 0
  // Per machine, in order of their lowest worker rank: worker ranks by local rank.
  std::vector<std::vector<int>> machines;
  std::vector<std::string> machine_names;
  // The local roots, ascending: the workers that push when the job is hierarchical.
  std::vector<int> roots;
};

// Registration-time checks of `joining` against the workers already registered: a machine
// name of at most 256 bytes, a valid local rank and size, agreement with the local size
// others on the same machine declared, a local rank not taken, and no more workers on the
// machine than declared. The error names the machine and the workers involved.
absl::Status CheckSlotRequest(const std::vector<SlotRequest>& registered,
                              const SlotRequest& joining);

// Once every worker registered (`workers` in any order, ranks 0..W-1 each once): the local
// ranks. Fails when a machine's worker count differs from its declared local size (naming the
// local ranks that are missing), or when CheckSlotRequest would fail.
absl::StatusOr<LocalAssignment> AssignLocalRanks(const std::vector<SlotRequest>& workers);

}  // namespace bytecomp
