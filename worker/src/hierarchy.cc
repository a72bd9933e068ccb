// Hierarchical push_pull (ClusterConfig.hierarchical, more than one worker on the machine):
//   every local rank: Reduce(tag) -> the local root's buffer holds the machine's sum
//   local root: the ordinary pipeline on that sum (compress with the strategy's codec, push,
//     pull, decompress; averaging divides by all workers) -> Broadcast(tag) of the result
//   other local ranks: Broadcast(tag) writes the root's result into their buffer.
// The tag is the tensor's name and its push_pull count, the same on every local rank. Every
// tag ends with the root's Broadcast, of the result or of the error, so no local rank waits
// for a round that failed elsewhere.
#include "absl/strings/str_cat.h"
#include "engine_impl.h"

namespace bytecomp::worker {

absl::StatusOr<int64_t> EngineImpl::HierarchicalPushPull(const PushPullRequest& request) {
  absl::StatusOr<std::shared_ptr<Operation>> made = NewOperation(request);  // a host tensor
  if (!made.ok()) return made.status();
  std::shared_ptr<Operation> outer = *std::move(made);
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
  LocalReducer& reducer = *local_reducer_;
  if (reducer.local_rank() != 0) {
    reducer.Reduce(tag, outer->data, outer->element_count, outer->dtype, [outer](absl::Status s) {
      if (!s.ok()) outer->RecordError(s);
    });
    reducer.Broadcast(tag, outer->data, outer->element_count, outer->dtype, absl::OkStatus(),
                      [outer](absl::Status s) {
                        if (!s.ok()) outer->RecordError(s);
                        outer->MarkDone();
                      });
    return outer->handle;
  }
  reducer.Reduce(tag, outer->data, outer->element_count, outer->dtype,
                 [this, outer, tag](absl::Status s) {
                   if (!s.ok()) {
                     FinishHierarchical(outer, tag, s);
                     return;
                   }
                   // The machine's sum is in the caller's buffer: push and pull it as usual.
                   PushPullRequest sum;
                   sum.name = outer->name;
                   sum.data = outer->data;
                   sum.element_count = outer->element_count;
                   sum.dtype = outer->dtype;
                   sum.priority = outer->priority;
                   sum.average = outer->average;
                   absl::StatusOr<std::shared_ptr<Operation>> made_network = NewOperation(sum);
                   if (!made_network.ok()) {
                     FinishHierarchical(outer, tag, made_network.status());
                     return;
                   }
                   std::shared_ptr<Operation> network = *std::move(made_network);
                   network->on_done = [this, outer, tag](absl::Status done) {
                     FinishHierarchical(outer, tag, done);
                   };
                   if (absl::Status started = QueueOperation(network, /*internal=*/true);
                       !started.ok()) {
                     network->on_done = nullptr;
                     FinishHierarchical(outer, tag, started);
                   }
                 });
  return outer->handle;
}

void EngineImpl::FinishHierarchical(const std::shared_ptr<Operation>& outer, const std::string& tag,
                                    const absl::Status& status) {
  local_reducer_->Broadcast(tag, outer->data, outer->element_count, outer->dtype, status,
                            [outer, status](absl::Status sent) {
                              if (!status.ok()) outer->RecordError(status);
                              if (!sent.ok()) outer->RecordError(sent);
                              outer->MarkDone();
                            });
}

}  // namespace bytecomp::worker
