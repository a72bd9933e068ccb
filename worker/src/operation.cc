#include "operation.h"

#include <cstdlib>

#include "bytecomp/common/logging.h"

namespace bytecomp::worker {

void Operation::Start(OperationStart&& start) {
  if (started_) {
    BC_LOG_ERROR("push_pull of '", request.name, "' started twice (round ", start_.round, ", then ",
                 start.round, ")");
    std::abort();
  }
  started_ = true;
  start_ = std::move(start);
}

void Operation::RecordError(const absl::Status& error) {
  absl::MutexLock lock(&mu_);
  if (status_.ok()) status_ = error;
}

absl::Status Operation::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

std::optional<absl::Status> Operation::outcome() const {
  absl::MutexLock lock(&mu_);
  if (!done_) return std::nullopt;
  return status_;
}

std::optional<absl::Status> Operation::WaitOutcome(int64_t timeout_ms) const {
  absl::MutexLock lock(&mu_);
  const absl::Condition is_done(&done_);
  if (timeout_ms < 0) {
    mu_.Await(is_done);
  } else if (!mu_.AwaitWithTimeout(is_done, absl::Milliseconds(timeout_ms))) {
    return std::nullopt;
  }
  return status_;
}

void Operation::SetOnDone(absl::AnyInvocable<void(absl::Status)> then) {
  absl::MutexLock lock(&mu_);
  on_done_ = std::move(then);
}

void Operation::MarkDone() {
  absl::AnyInvocable<void(absl::Status)> then;
  absl::Status final_status;
  {
    absl::MutexLock lock(&mu_);
    done_ = true;
    then = std::move(on_done_);
    on_done_ = nullptr;
    final_status = status_;
  }
  if (then) then(final_status);
}

void Operation::FailBeforeStart(const absl::Status& error) {
  RecordError(error);
  MarkDone();
}

}  // namespace bytecomp::worker
