#include "handle_table.h"

#include "absl/strings/str_cat.h"
#include "operation.h"

namespace bytecomp::worker {

void HandleTable::Register(const std::shared_ptr<Operation>& op) {
  absl::MutexLock lock(&mu_);
  op->handle = next_handle_++;
  operations_[op->handle] = op;
}

std::shared_ptr<Operation> HandleTable::Find(int64_t handle) const {
  absl::MutexLock lock(&mu_);
  auto it = operations_.find(handle);
  return it == operations_.end() ? nullptr : it->second;
}

absl::StatusOr<bool> HandleTable::Poll(int64_t handle) {
  std::shared_ptr<Operation> op = Find(handle);
  if (op == nullptr) return absl::NotFoundError(absl::StrCat("unknown handle ", handle));
  std::optional<absl::Status> outcome = op->outcome();
  if (!outcome.has_value()) return false;
  if (!outcome->ok()) return *outcome;
  return true;
}

absl::Status HandleTable::Wait(int64_t handle, int64_t timeout_ms) {
  std::shared_ptr<Operation> op = Find(handle);
  if (op == nullptr) return absl::NotFoundError(absl::StrCat("unknown handle ", handle));
  std::optional<absl::Status> outcome = op->WaitOutcome(timeout_ms);
  if (!outcome.has_value()) {
    return absl::DeadlineExceededError(
        absl::StrCat("push_pull of '", op->request.name, "' not done after ", timeout_ms, " ms"));
  }
  Release(handle).IgnoreError();
  return *outcome;
}

absl::Status HandleTable::Release(int64_t handle) {
  absl::MutexLock lock(&mu_);
  if (operations_.erase(handle) == 0) {
    return absl::NotFoundError(absl::StrCat("unknown handle ", handle));
  }
  return absl::OkStatus();
}

std::vector<std::shared_ptr<Operation>> HandleTable::All() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Operation>> out;
  out.reserve(operations_.size());
  for (const auto& [handle, op] : operations_) out.push_back(op);
  return out;
}

}  // namespace bytecomp::worker
