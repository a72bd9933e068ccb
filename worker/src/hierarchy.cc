// Hierarchical push_pull (ClusterConfig.hierarchical, more than one worker on the machine):
//   every local rank: Reduce(tag) -> the local root's buffer holds the machine's sum
//   local root: the ordinary pipeline on that sum (compress with the strategy's codec, push,
//     pull, decompress; averaging divides by all workers) -> Broadcast(tag) of the result
//   other local ranks: Broadcast(tag) writes the root's result into their buffer.
// The tag is the tensor's name and its push_pull count, the same on every local rank. Every
// tag ends with the root's Broadcast, of the result or of the error, so no local rank waits
// for a round that failed elsewhere.
//
// Device tensors: the collectives start once the caller's stream has reached the call (the
// gradient is written), on the NCCL reducer made at set-up (nccl_setup.h); the root's network
// part is the device pipeline (NewOperation with the request's device and stream). With the
// emulated device, whose memory is host memory, the host reducer stands in for NCCL: that
// tests this flow, not NCCL. Every local rank must pass device tensors for a name if any does:
// a rank that refuses one (e.g. a wrong device) leaves the others' call for it pending.
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "engine_impl.h"

namespace bytecomp::worker {

absl::StatusOr<LocalReducer*> EngineImpl::LocalReducerFor(const Operation& op) {
  if (op.device == nullptr || op.device->backend->name() == "emulated") return local_reducer_.get();
  if (device_reducer_.reducer == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "tensor '", op.name, "' on device ", op.device->device,
        ": device tensors in a hierarchical job are reduced in the machine with NCCL, and ",
        device_reducer_.unavailable.message(),
        ". Copy the gradient to host memory, or run the job without hierarchical"));
  }
  if (op.device->device != device_reducer_.device) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", op.name, "' is on device ", op.device->device,
        "; this process's NCCL communicator is on device ", device_reducer_.device,
        " (the current CUDA device when the engine started: set it per local rank before)"));
  }
  return device_reducer_.reducer.get();
}

absl::StatusOr<int64_t> EngineImpl::HierarchicalPushPull(const PushPullRequest& request) {
#if !BYTECOMP_HAVE_NCCL
  const char* backend = std::getenv("BYTECOMP_DEVICE_BACKEND");
  if (request.on_device && (backend == nullptr || std::string(backend) != "emulated")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", request.name, "': device tensors in a hierarchical job are not supported "
        "by this engine (built without CUDA and NCCL, its local reduction takes host tensors): "
        "copy the gradient to host memory, or run the job without hierarchical"));
  }
#endif
  absl::StatusOr<std::shared_ptr<Operation>> made = NewOperation(request);
  if (!made.ok()) return made.status();
  std::shared_ptr<Operation> outer = *std::move(made);
  absl::StatusOr<LocalReducer*> reducer = LocalReducerFor(*outer);
  if (!reducer.ok()) return reducer.status();
  std::string tag;
  {
    std::lock_guard<std::mutex> lock(tensors_mu_);
    absl::Status error;
    // Every local rank declares, so the scheduler still checks names and sizes across all
    // workers; only the local root's declaration is used for the network.
    std::shared_ptr<TensorEntry> tensor =
        FindOrDeclareLocked(request.name, request.element_count, request.dtype, &error);
    if (tensor == nullptr) return error;
    RecordReadyLocked(*outer);
    RegisterHandle(outer);
    if (tensor->state == TensorState::kFailed) {
      outer->FailBeforeStart(tensor->error);
      return outer->handle;
    }
    tag = absl::StrCat(request.name, "@", tensor->local_round++);
    if (tensor->state == TensorState::kDeclaring) tensor->local_ops.push_back(outer);
  }
  ++operations_;
  if (outer->device == nullptr) {
    StartHierarchical(*reducer, outer, tag);
    return outer->handle;
  }
  // A device tensor is ready once its stream has reached this call.
  if (absl::Status s = AfterDevice(*outer->device, [this, r = *reducer, outer, tag] {
        StartHierarchical(r, outer, tag);
      });
      !s.ok()) {
    // This rank cannot take part in the tag's collectives, which the others wait for.
    const absl::Status reason(s.code(), absl::StrCat("tensor '", outer->name,
                                                     "': waiting for its stream: ", s.message()));
    FailEngine(reason);
    outer->RecordError(reason);
    outer->MarkDone();
  }
  return outer->handle;
}

void EngineImpl::StartHierarchical(LocalReducer* reducer, const std::shared_ptr<Operation>& outer,
                                   const std::string& tag) {
  if (reducer->local_rank() != 0) {
    reducer->Reduce(tag, outer->data, outer->element_count, outer->dtype, [outer](absl::Status s) {
      if (!s.ok()) outer->RecordError(s);
    });
    reducer->Broadcast(tag, outer->data, outer->element_count, outer->dtype, absl::OkStatus(),
                       [outer](absl::Status s) {
                         if (!s.ok()) outer->RecordError(s);
                         outer->MarkDone();
                       });
    return;
  }
  reducer->Reduce(tag, outer->data, outer->element_count, outer->dtype,
                  [this, reducer, outer, tag](absl::Status s) {
                    if (!s.ok()) {
                      FinishHierarchical(reducer, outer, tag, s);
                      return;
                    }
                    // The machine's sum is in the caller's buffer: push and pull it as usual
                    // (a device tensor through the device pipeline, on the caller's stream).
                    PushPullRequest sum;
                    sum.name = outer->name;
                    sum.data = outer->data;
                    sum.element_count = outer->element_count;
                    sum.dtype = outer->dtype;
                    sum.priority = outer->priority;
                    sum.average = outer->average;
                    if (outer->device != nullptr) {
                      sum.on_device = true;
                      sum.device = outer->device->device;
                      sum.stream = outer->device->stream;
                    }
                    absl::StatusOr<std::shared_ptr<Operation>> made_network = NewOperation(sum);
                    if (!made_network.ok()) {
                      FinishHierarchical(reducer, outer, tag, made_network.status());
                      return;
                    }
                    std::shared_ptr<Operation> network = *std::move(made_network);
                    network->on_done = [this, reducer, outer, tag](absl::Status done) {
                      FinishHierarchical(reducer, outer, tag, done);
                    };
                    if (absl::Status started = QueueOperation(network, /*internal=*/true);
                        !started.ok()) {
                      network->on_done = nullptr;
                      FinishHierarchical(reducer, outer, tag, started);
                    }
                  });
}

void EngineImpl::FinishHierarchical(LocalReducer* reducer, const std::shared_ptr<Operation>& outer,
                                    const std::string& tag, const absl::Status& status) {
  reducer->Broadcast(tag, outer->data, outer->element_count, outer->dtype, status,
                     [outer, status](absl::Status sent) {
                       if (!status.ok()) outer->RecordError(status);
                       if (!sent.ok()) outer->RecordError(sent);
                       outer->MarkDone();
                     });
}

}  // namespace bytecomp::worker
