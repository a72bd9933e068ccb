#include "tensor_table.h"

#include <deque>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bytecomp/common.h"
#include "bytecomp/compress/registry.h"
#include "operation.h"
#include "partition_codec.h"
#include "tensor_checkpoint.h"

namespace bytecomp::worker {

enum class TensorState { kDeclaring, kReady, kFailed };

// Every field is the table's (guarded by its mutex), but `codecs`, which the running operation
// uses (partition_codec.h).
struct TensorTable::Tensor {
  std::string name;
  int64_t element_count = 0;
  proto::DType dtype = proto::DTYPE_FLOAT32;
  TensorState state = TensorState::kDeclaring;
  absl::Status error;
  TensorLayout layout;
  uint64_t next_round = 0;       // training rounds started
  uint64_t next_wire_round = 0;  // exchanges with the servers started (2 per PowerSGD round)
  uint64_t local_round = 0;      // hierarchical: push_pull calls, which tag the local collectives
  // Hierarchical push_pulls started while the declaration was pending (failed with it if it fails).
  std::vector<std::weak_ptr<Operation>> local_ops;
  uint64_t last_version = 0;  // strategy version of the latest started operation
  std::shared_ptr<TensorCodecs> codecs = std::make_shared<TensorCodecs>();
  std::string checkpoint;  // loaded before the declaration completed
  bool busy = false;       // an operation is in flight
  std::deque<std::shared_ptr<Operation>> waiting;
};

TensorTable::~TensorTable() = default;

void TensorTable::RunAfterUnlock(AfterUnlock& after) {
  for (proto::ControlMessage& declaration : after.declarations) send_(std::move(declaration));
  if (after.accepted.has_value()) (*after.accepted)();
  for (auto& [op, error] : after.failed) op->FailBeforeStart(error);
}

std::shared_ptr<TensorTable::Tensor> TensorTable::FindOrDeclareLocked(
    const std::string& name, int64_t count, proto::DType dtype, absl::Status* error,
    AfterUnlock* after, absl::Span<const int64_t> shape) {
  if (name.empty()) {
    *error = absl::InvalidArgumentError("tensor name must not be empty");
    return nullptr;
  }
  if (count < 1) {
    *error = absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': element count ", count, " must be >= 1"));
    return nullptr;
  }
  if (DTypeSize(dtype) == 0) {
    *error = absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': invalid dtype ",
                                                     static_cast<int>(dtype),
                                                     " (valid: 0 fp32, 1 fp16, 2 bf16)"));
    return nullptr;
  }
  auto it = tensors_.find(name);
  if (it != tensors_.end()) {
    const Tensor& t = *it->second;
    if (t.element_count != count || t.dtype != dtype) {
      *error = absl::InvalidArgumentError(absl::StrCat(
          "tensor '", name, "' was declared with ", t.element_count, " elements of ",
          DTypeName(t.dtype), ", now used with ", count, " elements of ", DTypeName(dtype)));
      return nullptr;
    }
    return it->second;
  }
  auto tensor = std::make_shared<Tensor>();
  tensor->name = name;
  tensor->element_count = count;
  tensor->dtype = dtype;
  tensors_[name] = tensor;
  proto::ControlMessage msg;
  proto::DeclareTensor* d = msg.mutable_declare_tensor();
  d->set_name(name);
  d->set_element_count(count);
  d->set_dtype(dtype);
  d->mutable_shape()->Add(shape.begin(), shape.end());
  after->declarations.push_back(std::move(msg));
  return tensor;
}

absl::Status TensorTable::Declare(const std::string& name, int64_t element_count,
                                  proto::DType dtype, absl::Span<const int64_t> shape) {
  if (!shape.empty() && !ShapeHolds(shape, element_count)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': shape [",
                                                   absl::StrJoin(shape, ", "), "] does not hold ",
                                                   element_count, " elements"));
  }
  absl::Status error;
  AfterUnlock after;
  {
    absl::MutexLock lock(&mu_);
    FindOrDeclareLocked(name, element_count, dtype, &error, &after, shape);
  }
  RunAfterUnlock(after);
  return error;
}

// A tensor is never removed from the table, so the one returned stays op's while `accepted` runs
// and the caller takes the lock again.
std::shared_ptr<TensorTable::Tensor> TensorTable::Admit(const Operation& op,
                                                        absl::FunctionRef<void()> accepted,
                                                        absl::Status* error) {
  std::shared_ptr<Tensor> tensor;
  AfterUnlock after;
  {
    absl::MutexLock lock(&mu_);
    tensor =
        FindOrDeclareLocked(op.request.name, op.request.element_count, op.dtype(), error, &after);
    if (tensor != nullptr) after.accepted.emplace(accepted);
  }
  RunAfterUnlock(after);
  return tensor;
}

absl::Status TensorTable::Queue(const std::shared_ptr<Operation>& op,
                                absl::FunctionRef<void()> accepted, Started* started) {
  absl::Status error;
  std::shared_ptr<Tensor> tensor = Admit(*op, accepted, &error);
  if (tensor == nullptr) return error;
  AfterUnlock after;
  {
    absl::MutexLock lock(&mu_);
    if (tensor->state == TensorState::kFailed) {
      after.failed.emplace_back(op, tensor->error);
    } else {
      tensor->waiting.push_back(op);
      if (tensor->state == TensorState::kReady && !tensor->busy) StartNextLocked(tensor, started);
    }
  }
  RunAfterUnlock(after);
  return absl::OkStatus();
}

absl::Status TensorTable::BeginMachineRound(const std::shared_ptr<Operation>& op,
                                            absl::FunctionRef<void()> accepted, std::string* tag) {
  absl::Status error;
  tag->clear();
  std::shared_ptr<Tensor> tensor = Admit(*op, accepted, &error);
  if (tensor == nullptr) return error;
  AfterUnlock after;
  {
    absl::MutexLock lock(&mu_);
    if (tensor->state == TensorState::kFailed) {
      after.failed.emplace_back(op, tensor->error);
    } else {
      *tag = absl::StrCat(op->request.name, "@", tensor->local_round++);
      if (tensor->state == TensorState::kDeclaring) tensor->local_ops.push_back(op);
    }
  }
  RunAfterUnlock(after);
  return absl::OkStatus();
}

// The travel plan of the tensor's next operation: its round, the strategy's plan for it (after
// the switch has admitted the round), where its rounds are on the wire, and the events it will
// wait for.
void TensorTable::StartNextLocked(const std::shared_ptr<Tensor>& tensor_ptr, Started* started) {
  Tensor& tensor = *tensor_ptr;
  if (tensor.waiting.empty()) return;
  // A fusion group's rounds are its members' (they start at the round the groups were set).
  if (const std::optional<uint64_t>& r = tensor.waiting.front()->members_round; r.has_value()) {
    tensor.next_round = *r;
  }
  const int64_t bytes = tensor.element_count * static_cast<int64_t>(DTypeSize(tensor.dtype));
  std::optional<compress::TensorPlan> plan =
      strategies_.Admit(tensor.next_round, tensor.name, bytes, tensor.layout.row_elements);
  if (!plan.has_value()) {
    held_.push_back(tensor_ptr);  // a strategy switch is being agreed: wait for the commit
    return;
  }
  std::shared_ptr<Operation> op = tensor.waiting.front();
  tensor.waiting.pop_front();
  tensor.busy = true;
  OperationStart start{.layout = tensor.layout,
                       .round = tensor.next_round++,
                       .wire_round = tensor.next_wire_round,
                       .plan = *std::move(plan),
                       .codecs = tensor.codecs};
  tensor.last_version = start.plan.version;
  // A fused member's round is its group's: no exchange of its own, no codec.
  const bool fused = start.plan.fused();
  if (start.plan.compressed()) {
    tensor.codecs->Resize(static_cast<size_t>(start.layout.num_partitions()));
    // Two exchanges with the servers a round (PowerSGD, artopk): the codec's facts say.
    const compress::CodecFacts* facts = compress::CodecFactsOf(start.plan.push.name());
    start.two_round = facts != nullptr && facts->two_round;
  }
  // A collective round is no exchange with the servers: the key's next round there stays.
  if (!start.plan.collective() && !fused) tensor.next_wire_round += start.two_round ? 2 : 1;
  op->Start(std::move(start));
  started->push_back(std::move(op));
}

void TensorTable::OnDeclareReply(const proto::DeclareReply& reply, Started* started) {
  AfterUnlock after;
  {
    absl::MutexLock lock(&mu_);
    OnDeclareReplyLocked(reply, started, &after);
  }
  RunAfterUnlock(after);
}

void TensorTable::OnDeclareReplyLocked(const proto::DeclareReply& reply, Started* started,
                                       AfterUnlock* after) {
  auto it = tensors_.find(reply.name());
  if (it == tensors_.end()) return;
  Tensor& tensor = *it->second;
  if (tensor.state != TensorState::kDeclaring) return;
  absl::Status error;
  if (!reply.ok()) {
    error = absl::FailedPreconditionError(reply.error());
  } else {
    absl::StatusOr<TensorLayout> layout = LayoutFromDeclareReply(reply, num_servers_);
    if (!layout.ok()) {
      error = layout.status();
    } else if (layout->element_count != tensor.element_count || layout->dtype != tensor.dtype) {
      error = absl::InternalError(absl::StrCat("scheduler declared '", reply.name(), "' with ",
                                               layout->element_count, " elements"));
    } else {
      tensor.layout = *layout;
      tensor.state = TensorState::kReady;
      tensor.local_ops.clear();
      if (!tensor.checkpoint.empty()) {
        if (absl::Status s = ApplyStateLocked(tensor, tensor.checkpoint); !s.ok()) {
          BC_LOG_ERROR(s.message());
        }
        tensor.checkpoint.clear();
      }
      StartNextLocked(it->second, started);
      return;
    }
  }
  tensor.state = TensorState::kFailed;
  tensor.error = error;
  for (auto& op : tensor.waiting) after->failed.emplace_back(std::move(op), error);
  tensor.waiting.clear();
  // Hierarchical push_pulls of this tensor wait on the local root, which may never reduce a
  // tensor that was not declared everywhere: they fail with the declaration's error.
  for (auto& weak : tensor.local_ops) {
    if (std::shared_ptr<Operation> op = weak.lock()) after->failed.emplace_back(op, error);
  }
  tensor.local_ops.clear();
}

void TensorTable::Finished(const Operation& op, const absl::Status& status, Started* started) {
  AfterUnlock after;
  {
    absl::MutexLock lock(&mu_);
    FinishedLocked(op, status, started, &after);
  }
  RunAfterUnlock(after);
}

void TensorTable::FinishedLocked(const Operation& op, const absl::Status& status, Started* started,
                                 AfterUnlock* after) {
  auto it = tensors_.find(op.request.name);
  if (it == tensors_.end() || !it->second->busy || it->second->state != TensorState::kReady) return;
  Tensor& tensor = *it->second;
  tensor.busy = false;
  if (status.ok()) {
    StartNextLocked(it->second, started);
    return;
  }
  tensor.state = TensorState::kFailed;
  tensor.error =
      absl::Status(status.code(), absl::StrCat("tensor '", tensor.name, "' failed in round ",
                                               op.round(), ": ", status.message()));
  for (auto& waiting : tensor.waiting) after->failed.emplace_back(std::move(waiting), tensor.error);
  tensor.waiting.clear();
}

void TensorTable::ReleaseHeld(Started* started) {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Tensor>> held;
  held.swap(held_);
  for (auto& t : held) {
    if (t->state == TensorState::kReady && !t->busy) StartNextLocked(t, started);
  }
}

std::vector<std::shared_ptr<Operation>> TensorTable::FailAll(const absl::Status& reason) {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Operation>> waiting;
  for (auto& [name, tensor] : tensors_) {
    for (auto& op : tensor->waiting) waiting.push_back(op);
    tensor->waiting.clear();
    if (tensor->state != TensorState::kFailed) {
      tensor->state = TensorState::kFailed;
      tensor->error = reason;
    }
  }
  return waiting;
}

absl::Status TensorTable::TensorStrategy(const std::string& name, bool machine_rounds,
                                         int64_t* round, int64_t* version) {
  absl::MutexLock lock(&mu_);
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return absl::NotFoundError(absl::StrCat("unknown tensor '", name, "'"));
  if (machine_rounds) {
    *round = static_cast<int64_t>(it->second->local_round) - 1;
    *version =
        *round < 0 ? 0 : static_cast<int64_t>(strategies_.VersionAt(static_cast<uint64_t>(*round)));
    return absl::OkStatus();
  }
  *round = static_cast<int64_t>(it->second->next_round) - 1;
  *version = static_cast<int64_t>(it->second->last_version);
  return absl::OkStatus();
}

absl::StatusOr<std::string> TensorTable::SaveState(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return absl::NotFoundError(absl::StrCat("unknown tensor '", name, "'"));
  const Tensor& t = *it->second;
  if (t.busy || !t.waiting.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "tensor '", name, "' has a push_pull in flight; save its state between steps"));
  }
  absl::StatusOr<std::vector<std::string>> states =
      SaveCodecStates(name, *t.codecs, static_cast<size_t>(t.layout.num_partitions()));
  if (!states.ok()) return states.status();
  return EncodeTensorState(*states);
}

absl::Status TensorTable::LoadState(const std::string& name, absl::string_view state) {
  absl::MutexLock lock(&mu_);
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown tensor '", name, "': declare it first"));
  }
  Tensor& t = *it->second;
  if (t.busy || !t.waiting.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "tensor '", name, "' has a push_pull in flight; load its state between steps"));
  }
  if (t.state == TensorState::kDeclaring) {
    t.checkpoint = std::string(state);  // applied once the partitioning is known
    return absl::OkStatus();
  }
  return ApplyStateLocked(t, state);
}

absl::Status TensorTable::ApplyStateLocked(Tensor& t, absl::string_view state) {
  absl::StatusOr<std::vector<std::string>> states =
      DecodeTensorState(t.name, state, static_cast<size_t>(t.layout.num_partitions()));
  if (!states.ok()) return states.status();
  return LoadCodecStates(*t.codecs, *std::move(states));
}

}  // namespace bytecomp::worker
