#include "operation_tracker.h"

#include "bytecomp/common/logging.h"
#include "operation.h"

namespace bytecomp::worker {
namespace {

const char* EventName(PartitionEvent event) {
  return event == PartitionEvent::kResult ? "result" : "payload release";
}

}  // namespace

void OperationEvents::Expect(int64_t partitions, bool zero_copy_push) {
  const uint8_t events =
      static_cast<uint8_t>(PartitionEvent::kResult) |
      (zero_copy_push ? static_cast<uint8_t>(PartitionEvent::kPayloadReleased) : 0);
  partitions_ = partitions;
  pending_ = std::make_unique<std::atomic<uint8_t>[]>(static_cast<size_t>(partitions));
  for (int64_t p = 0; p < partitions; ++p) pending_[p].store(events, std::memory_order_relaxed);
  outstanding_.store(partitions * (zero_copy_push ? 2 : 1));
}

OperationEvents::Report OperationEvents::Finish(int64_t partition, PartitionEvent event) {
  const uint8_t bit = static_cast<uint8_t>(event);
  if (partition < 0 || partition >= partitions_) return Report::kUnexpected;
  if ((pending_[partition].fetch_and(static_cast<uint8_t>(~bit)) & bit) == 0) {
    return Report::kUnexpected;
  }
  return outstanding_.fetch_sub(1) == 1 ? Report::kLast : Report::kCounted;
}

bool OperationEvents::FinishAll() {
  int64_t finished = 0;
  for (int64_t p = 0; p < partitions_; ++p) {
    const uint8_t was = pending_[p].exchange(0);
    finished += (was & static_cast<uint8_t>(PartitionEvent::kResult)) != 0;
    finished += (was & static_cast<uint8_t>(PartitionEvent::kPayloadReleased)) != 0;
  }
  return finished > 0 && outstanding_.fetch_sub(finished) == finished;
}

bool OperationEvents::Pending(int64_t partition, PartitionEvent event) const {
  if (partition < 0 || partition >= partitions_) return false;
  return (pending_[partition].load() & static_cast<uint8_t>(event)) != 0;
}

void OperationTracker::Expect(Operation& op) {
  op.events.Expect(op.layout().num_partitions(), !op.plan().compressed());
}

void OperationTracker::Report(const std::shared_ptr<Operation>& op, int64_t partition,
                              PartitionEvent event) {
  switch (op->events.Finish(partition, event)) {
    case OperationEvents::Report::kCounted:
      return;
    case OperationEvents::Report::kLast:
      complete_(op);
      return;
    case OperationEvents::Report::kUnexpected:
      BC_LOG_ERROR("internal error: push_pull of '", op->request.name, "' round ", op->round(),
                   " partition ", partition, ": ", EventName(event),
                   " reported twice or not expected (ignored)");
      return;
  }
}

void OperationTracker::ResultIn(const std::shared_ptr<Operation>& op, int64_t partition) {
  Report(op, partition, PartitionEvent::kResult);
}

void OperationTracker::ResultFailed(const std::shared_ptr<Operation>& op, int64_t partition,
                                    const absl::Status& error) {
  op->RecordError(error);
  Report(op, partition, PartitionEvent::kResult);
}

void OperationTracker::PayloadReleased(const std::shared_ptr<Operation>& op, int64_t partition) {
  Report(op, partition, PartitionEvent::kPayloadReleased);
}

void OperationTracker::FailAll(const std::shared_ptr<Operation>& op, const absl::Status& error) {
  op->RecordError(error);
  if (op->events.FinishAll()) complete_(op);
}

}  // namespace bytecomp::worker
