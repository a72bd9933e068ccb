#include "hierarchy.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace bytecomp::worker {

absl::Status Hierarchy::Check(const PushPullRequest& request) const {
  const char* backend = std::getenv("BYTECOMP_DEVICE_BACKEND");
  if (!DeviceReductionBuilt() && request.on_device &&
      (backend == nullptr || std::string(backend) != "emulated")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", request.name,
        "': device tensors in a hierarchical job are not supported "
        "by this engine (built without CUDA and NCCL, its local reduction takes host tensors): "
        "copy the gradient to host memory, or run the job without hierarchical"));
  }
  return absl::OkStatus();
}

absl::StatusOr<LocalReducer*> Hierarchy::ReducerFor(const Operation& op) const {
  if (op.device == nullptr || op.device->backend->name() == "emulated") return reducers_.host.get();
  const DeviceReducer& nccl = reducers_.device;
  if (nccl.reducer == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "tensor '", op.request.name, "' on device ", op.device->device,
        ": device tensors in a hierarchical job are reduced in the machine with NCCL, and ",
        nccl.unavailable.message(),
        ". Copy the gradient to host memory, or run the job without hierarchical"));
  }
  if (op.device->device != nccl.device) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", op.request.name, "' is on device ", op.device->device,
        "; this process's NCCL communicator is on device ", nccl.device,
        " (the current CUDA device when the engine started: set it per local rank before)"));
  }
  return nccl.reducer.get();
}

void Hierarchy::Start(LocalReducer* reducer, const std::shared_ptr<Operation>& outer,
                      const std::string& tag) {
  if (outer->device == nullptr) {
    Reduce(reducer, outer, tag);
    return;
  }
  // A device tensor is ready once its stream has reached this call.
  if (absl::Status s = device_.AfterDevice(
          *outer->device, [this, reducer, outer, tag] { Reduce(reducer, outer, tag); });
      !s.ok()) {
    // This rank cannot take part in the tag's collectives, which the others wait for.
    const absl::Status reason(s.code(), absl::StrCat("tensor '", outer->request.name,
                                                     "': waiting for its stream: ", s.message()));
    fail_job_(reason);
    outer->RecordError(reason);
    outer->MarkDone();
  }
}

void Hierarchy::Reduce(LocalReducer* reducer, const std::shared_ptr<Operation>& outer,
                       const std::string& tag) {
  const PushPullRequest& r = outer->request;
  if (reducer->local_rank() != 0) {
    reducer->Reduce(tag, r.data, r.element_count, outer->dtype(), [outer](absl::Status s) {
      if (!s.ok()) outer->RecordError(s);
    });
    reducer->Broadcast(tag, r.data, r.element_count, outer->dtype(), absl::OkStatus(),
                       [outer](absl::Status s) {
                         if (!s.ok()) outer->RecordError(s);
                         outer->MarkDone();
                       });
    return;
  }
  reducer->Reduce(
      tag, r.data, r.element_count, outer->dtype(), [this, reducer, outer, tag](absl::Status s) {
        if (!s.ok()) {
          Finish(reducer, outer, tag, s);
          return;
        }
        // The machine's sum is in the caller's buffer: push and pull it as usual
        // (a device tensor through the device pipeline, on the caller's stream).
        absl::Status started = network_(outer, [this, reducer, outer, tag](absl::Status done) {
          Finish(reducer, outer, tag, done);
        });
        if (!started.ok()) Finish(reducer, outer, tag, started);
      });
}

void Hierarchy::Finish(LocalReducer* reducer, const std::shared_ptr<Operation>& outer,
                       const std::string& tag, const absl::Status& status) {
  const PushPullRequest& r = outer->request;
  reducer->Broadcast(tag, r.data, r.element_count, outer->dtype(), status,
                     [outer, status](absl::Status sent) {
                       if (!status.ok()) outer->RecordError(status);
                       if (!sent.ok()) outer->RecordError(sent);
                       outer->MarkDone();
                     });
}

}  // namespace bytecomp::worker
