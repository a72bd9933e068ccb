// Hierarchical push_pull (ClusterConfig.hierarchical, more than one worker on the machine):
//   every local rank: Reduce(tag) -> the local root's buffer holds the machine's sum
//   local root: the ordinary pipeline on that sum (a network operation: compress with the
//     strategy's codec, push, pull, decompress; averaging divides by all workers) ->
//     Broadcast(tag) of the result
//   other local ranks: Broadcast(tag) writes the root's result into their buffer.
// The tag is the tensor's name and its push_pull count, the same on every local rank
// (TensorTable::BeginMachineRound). Every tag ends with the root's Broadcast, of the result or
// of the error, so no local rank waits for a round that failed elsewhere.
//
// Device tensors: the collectives start once the caller's stream has reached the call (the
// gradient is written), on the NCCL reducer made at set-up; the root's network part is the
// device pipeline. With the emulated device, whose memory is host memory, the host reducer
// stands in for NCCL: that tests this flow, not NCCL. Every local rank must pass device
// tensors for a name if any does: a rank that refuses one (e.g. a wrong device) leaves the
// others' call for it pending.
#pragma once

#include <memory>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bytecomp/worker/local_reducer.h"
#include "device_pipeline.h"
#include "operation.h"

namespace bytecomp::worker {

class Hierarchy {
 public:
  // Queues the local root's network operation for outer's request (the machine's sum is in
  // its buffer); `done` runs with that operation's final status. An error: it did not start
  // (and `done` will not run).
  using NetworkRound = absl::AnyInvocable<absl::Status(
      const std::shared_ptr<Operation>& outer, absl::AnyInvocable<void(absl::Status)> done)>;
  using FailJob = absl::AnyInvocable<void(const absl::Status&)>;

  Hierarchy(MachineReducers& reducers, DevicePipeline& device, NetworkRound network,
            FailJob fail_job)
      : reducers_(reducers),
        device_(device),
        network_(std::move(network)),
        fail_job_(std::move(fail_job)) {}

  // Refuses, before anything else, what this engine cannot reduce in the machine.
  absl::Status Check(const PushPullRequest& request) const;
  // The local reducer for the operation's memory: the host reducer for host tensors (and for
  // the emulated device, whose memory is host memory), the NCCL one for CUDA device tensors.
  absl::StatusOr<LocalReducer*> ReducerFor(const Operation& op) const;
  // Starts the operation's collectives under `tag`; the operation is done after its Broadcast.
  void Start(LocalReducer* reducer, const std::shared_ptr<Operation>& outer,
             const std::string& tag);

 private:
  void Reduce(LocalReducer* reducer, const std::shared_ptr<Operation>& outer,
              const std::string& tag);
  void Finish(LocalReducer* reducer, const std::shared_ptr<Operation>& outer,
              const std::string& tag, const absl::Status& status);

  MachineReducers& reducers_;
  DevicePipeline& device_;
  NetworkRound network_;
  FailJob fail_job_;
};

}  // namespace bytecomp::worker
