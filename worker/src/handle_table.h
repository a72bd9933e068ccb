// The handles the C API gives out for push_pull operations: a handle finds its operation until
// it is released (by a wait that saw it complete, or by bytecomp_release).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace bytecomp::worker {

class Operation;

class HandleTable {
 public:
  // Gives `op` the next handle (op->handle) and keeps it until released.
  void Register(const std::shared_ptr<Operation>& op) ABSL_LOCKS_EXCLUDED(mu_);
  // true when done; the operation's error if it failed; NotFound for an unknown handle.
  absl::StatusOr<bool> Poll(int64_t handle) ABSL_LOCKS_EXCLUDED(mu_);
  // OK, DeadlineExceeded after timeout_ms (< 0: no limit; the operation goes on), or the
  // operation's error. A wait that sees the operation done releases its handle.
  absl::Status Wait(int64_t handle, int64_t timeout_ms) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Release(int64_t handle) ABSL_LOCKS_EXCLUDED(mu_);
  // Every operation with a handle (shutdown waits for them).
  std::vector<std::shared_ptr<Operation>> All() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  std::shared_ptr<Operation> Find(int64_t handle) const ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<int64_t, std::shared_ptr<Operation>> operations_ ABSL_GUARDED_BY(mu_);
  int64_t next_handle_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace bytecomp::worker
