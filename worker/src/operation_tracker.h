// An operation's progress, as named events per partition, in the way ps-lite's Customer tracks
// a request until its responses are in: when the operation starts, the tracker sets the
// events it waits for; each part of the engine reports the events it owns; the last report
// completes the operation. Who reports what:
//   kResult          the partition's result is in the caller's tensor, or its failure is
//                    recorded. The stage pipelines report it after the pull reply (decode or
//                    copy, and for a device tensor the copy to the device); the data
//                    thread's PartitionSender reports it when no pull reply will come (the
//                    send failed, the server refused, the engine failed).
//   kPayloadReleased ZeroMQ no longer holds the partition's zero-copy push payload. Only an
//                    uncompressed operation pushes straight from the tensor's memory (or its
//                    pinned host copy), which the caller may reuse only after this. The
//                    free function of the PartitionSender's ZeroMQ message reports it; the
//                    sender and the device pipeline report it for a payload that never went
//                    out.
// A compressed operation pushes the engine's own buffers: it waits for kResult only.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"

namespace bytecomp::worker {

class Operation;

enum class PartitionEvent : uint8_t { kResult = 1, kPayloadReleased = 2 };

// Per partition, the events not yet reported. Lock-free: reports come from the data thread,
// the codec pool, ZeroMQ's I/O thread and device callbacks.
class OperationEvents {
 public:
  enum class Report {
    kCounted,     // recorded; others are outstanding
    kLast,        // recorded, and it was the operation's last event
    kUnexpected,  // not expected, or reported before: a bug, not counted
  };

  // Waits for kResult of each of `partitions`, and for kPayloadReleased too when
  // `zero_copy_push`. Called once, before any report.
  void Expect(int64_t partitions, bool zero_copy_push);
  Report Finish(int64_t partition, PartitionEvent event);
  // Records every event not yet reported; true when that completed the operation.
  bool FinishAll();
  bool Pending(int64_t partition, PartitionEvent event) const;
  int64_t outstanding() const { return outstanding_.load(); }

 private:
  std::unique_ptr<std::atomic<uint8_t>[]> pending_;  // PartitionEvent bits, per partition
  int64_t partitions_ = 0;
  std::atomic<int64_t> outstanding_{0};
};

// The named reports; the operation's last one calls the engine's completion.
class OperationTracker {
 public:
  using Completion = absl::AnyInvocable<void(const std::shared_ptr<Operation>&)>;
  explicit OperationTracker(Completion complete) : complete_(std::move(complete)) {}

  // The operation starts (its layout and plan are set): it now waits for its events.
  void Expect(Operation& op);

  // kResult: the partition's result is in the tensor (or its error recorded before).
  void ResultIn(const std::shared_ptr<Operation>& op, int64_t partition);
  // kResult with an error: records it, then reports.
  void ResultFailed(const std::shared_ptr<Operation>& op, int64_t partition,
                    const absl::Status& error);
  // kPayloadReleased.
  void PayloadReleased(const std::shared_ptr<Operation>& op, int64_t partition);
  // Every event not yet reported: the operation never reached the wire.
  void FailAll(const std::shared_ptr<Operation>& op, const absl::Status& error);

 private:
  void Report(const std::shared_ptr<Operation>& op, int64_t partition, PartitionEvent event);

  Completion complete_;
};

}  // namespace bytecomp::worker
