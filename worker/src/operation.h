// A push_pull in flight: the caller's request, what the engine decided when the operation
// started, the events it still waits for, and its outcome.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "bytecomp/common/partition.h"
#include "bytecomp/compress/strategy.h"
#include "bytecomp/cpu_offload.h"
#include "bytecomp/worker/device_backend.h"
#include "bytecomp/worker/engine.h"
#include "data.pb.h"
#include "operation_tracker.h"

namespace bytecomp::worker {

// Declared here, defined in headers that include this one.
class StagePipeline;  // stage_pipeline.h: the host or the device stages
struct TensorCodecs;  // partition_codec.h: the tensor's codec objects

// The wire's element type (proto DType) for the engine's: the same values (engine.h).
constexpr proto::DType WireDType(ElementType type) { return static_cast<proto::DType>(type); }
static_assert(WireDType(ElementType::kFloat32) == proto::DTYPE_FLOAT32 &&
              WireDType(ElementType::kFloat16) == proto::DTYPE_FLOAT16 &&
              WireDType(ElementType::kBfloat16) == proto::DTYPE_BFLOAT16);

// Where a device tensor's stages run, decided when its operation starts.
struct DeviceWork {
  DeviceBackend* backend = nullptr;
  cpu_offload::PinnedMemoryPool* pinned = nullptr;  // the engine's pinned host memory
  int device = 0;
  DeviceStream stream = nullptr;
  bool encode_on_device = false;  // else: copy to pinned host memory, encode on the pool
  bool decode_on_device = false;  // else: decode on the pool, copy to the device
  // Pinned host copy of the tensor, for the stages that run on the host (the push of an
  // uncompressed or pool-encoded tensor, the results decoded on the pool).
  cpu_offload::PinnedBuffer host;
};

// What an operation travels with, decided by the tensor table when it starts
// (TensorTable::StartNextLocked).
struct OperationStart {
  TensorLayout layout;
  uint64_t round = 0;       // training round: the tensor's push_pull count
  uint64_t wire_round = 0;  // the key's first exchange of this round on the server
  compress::TensorPlan plan;
  bool two_round = false;  // PowerSGD: two exchanges per round
  // The tensor's codec objects, used by this operation's stage tasks while it runs (a tensor's
  // operations run one at a time; within one, each partition has its own).
  std::shared_ptr<TensorCodecs> codecs;
};

class Operation {
 public:
  explicit Operation(PushPullRequest r) : request(std::move(r)) {}
  Operation(const Operation&) = delete;
  Operation& operator=(const Operation&) = delete;

  // What the caller asked for, as the C API filled it in.
  const PushPullRequest request;
  // 0: an internal operation (the local root's network part of a hierarchical push_pull).
  int64_t handle = 0;
  StagePipeline* stages = nullptr;     // the host or the device stages
  std::unique_ptr<DeviceWork> device;  // null: a host tensor
  // A fusion group's push_pull (tensor_fusion.h): the round of its members it carries, which
  // is the group's round too (so the strategy in force is theirs). Unset for any other. Set
  // before the operation is queued.
  std::optional<uint64_t> members_round;

  // The request's element type as the wire and the codecs name it.
  proto::DType dtype() const { return WireDType(request.dtype); }

  // Sets what the operation travels with: once, by the tensor table when the operation starts
  // (or by a test), before any other thread sees it. A second start aborts: a programming error,
  // found by the first test that runs.
  void Start(OperationStart&& start);
  // What the start set (the defaults before it), read-only.
  const TensorLayout& layout() const { return start_.layout; }
  uint64_t round() const { return start_.round; }
  uint64_t wire_round() const { return start_.wire_round; }
  const compress::TensorPlan& plan() const { return start_.plan; }
  bool two_round() const { return start_.two_round; }
  const std::shared_ptr<TensorCodecs>& codecs() const { return start_.codecs; }

  // What it still waits for, per partition (operation_tracker.h).
  OperationEvents events;

  // When the caller asked (wall clock, us: the timeline's and the status report's clock), and
  // the bytes its pushes put on the wire (the data loop adds them).
  int64_t ready_us = 0;
  std::atomic<int64_t> pushed_bytes{0};

  // Where the host stages read the gradient and write the result: the caller's memory, or
  // for a device tensor its pinned host copy.
  char* host_data() const {
    return static_cast<char*>(device != nullptr ? static_cast<void*>(device->host.data())
                                                : request.data);
  }

  // The first error wins.
  void RecordError(const absl::Status& error) ABSL_LOCKS_EXCLUDED(mu_);
  // The first error so far (final once done).
  absl::Status status() const ABSL_LOCKS_EXCLUDED(mu_);
  // nullopt while pending; then the final status.
  std::optional<absl::Status> outcome() const ABSL_LOCKS_EXCLUDED(mu_);
  // Waits for the outcome at most timeout_ms (< 0: no limit); nullopt if still pending.
  std::optional<absl::Status> WaitOutcome(int64_t timeout_ms) const ABSL_LOCKS_EXCLUDED(mu_);
  // Runs once, with the final status, when the operation is done (the hierarchical layer
  // chains the local root's network operation to the broadcast). It must only queue work.
  void SetOnDone(absl::AnyInvocable<void(absl::Status)> then) ABSL_LOCKS_EXCLUDED(mu_);
  // The status is final: wakes every waiter, then runs the on-done work.
  void MarkDone() ABSL_LOCKS_EXCLUDED(mu_);
  // Fails an operation that never started.
  void FailBeforeStart(const absl::Status& error) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Written once by Start, before the operation is shared; no lock.
  OperationStart start_;
  bool started_ = false;

  mutable absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  absl::AnyInvocable<void(absl::Status)> on_done_ ABSL_GUARDED_BY(mu_);
};

}  // namespace bytecomp::worker
