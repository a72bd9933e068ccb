// The declared tensors. Per tensor: its declaration (sent to the scheduler, which answers with
// the tensor id and the server of each partition), its rounds, its codec objects per partition,
// and its queue of operations. A tensor's operations run one at a time, in submission order:
// a key's rounds follow each other on the server.
//
// Starting an operation means setting what it needs to travel (Operation::Start: layout,
// round, wire round, the strategy's plan) and handing it back to the caller in `started`, who
// starts its stages once the table's lock is released. A strategy switch (strategy_switch.h)
// may hold a round; the table keeps the held tensors and restarts them on ReleaseHeld. A
// fusion group's member whose plan names its group (plan().fused()) starts without an exchange
// of its own key; the caller hands it to its group (tensor_fusion.h), whose operation carries
// the members' round (Operation::members_round) on the group's key.
//
// Only the table's own code runs under its lock. What is not the table's (the send of a
// declaration, the caller's `accepted`, the on-done work of an operation it fails) is left in
// an AfterUnlock and run by RunAfterUnlock, whose annotation excludes the lock: clang checks
// that no call runs it with the lock held.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "control.pb.h"
#include "data.pb.h"
#include "strategy_switch.h"

namespace bytecomp::worker {

class Operation;

class TensorTable {
 public:
  using Started = std::vector<std::shared_ptr<Operation>>;
  using SendToScheduler = absl::AnyInvocable<void(proto::ControlMessage)>;

  // `num_servers`: to check the scheduler's partition placement; `send`: takes each new
  // declaration (DeclareTensor) to the scheduler, without the table's lock.
  TensorTable(int num_servers, StrategySwitch& strategies, SendToScheduler send)
      : num_servers_(num_servers), strategies_(strategies), send_(std::move(send)) {}
  ~TensorTable();

  // Declares `name` (sending the declaration when it is new, with `shape` when given), or
  // checks a use of it against its declaration: a different size or dtype is InvalidArgument
  // naming both. A shape whose dimensions do not multiply to element_count is
  // InvalidArgument; a repeated declaration's shape is not checked (the first one's went).
  absl::Status Declare(const std::string& name, int64_t element_count, proto::DType dtype,
                       absl::Span<const int64_t> shape = {}) ABSL_LOCKS_EXCLUDED(mu_);

  // Queues `op` on its tensor (declaring it if new). `accepted` runs once the op passed the
  // declaration check, before the op can start (the engine gives it its handle there), without
  // the table's lock. A failed tensor fails the op at once.
  absl::Status Queue(const std::shared_ptr<Operation>& op, absl::FunctionRef<void()> accepted,
                     Started* started) ABSL_LOCKS_EXCLUDED(mu_);

  // Hierarchical mode: declares op's tensor as Queue does (every local rank declares, so the
  // scheduler checks names and sizes across all workers), without queueing it; *tag names
  // this push_pull's collectives in the machine ("name@count", the same on every local rank).
  // A failed tensor fails op at once (*tag empty); one still declaring fails it if the
  // declaration fails (the local root may never reduce a tensor not declared everywhere).
  absl::Status BeginMachineRound(const std::shared_ptr<Operation>& op,
                                 absl::FunctionRef<void()> accepted, std::string* tag)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The scheduler's answer to a declaration: the tensor's layout, or why it failed (its queued
  // operations fail with it).
  void OnDeclareReply(const proto::DeclareReply& reply, Started* started) ABSL_LOCKS_EXCLUDED(mu_);

  // `op` is done with `status`: the tensor's next operation may start. A failed round leaves
  // the key's rounds out of step with the server, so the tensor fails for good.
  void Finished(const Operation& op, const absl::Status& status, Started* started)
      ABSL_LOCKS_EXCLUDED(mu_);

  // After a strategy commit: the tensors the switch held start their next round.
  void ReleaseHeld(Started* started) ABSL_LOCKS_EXCLUDED(mu_);

  // The engine failed: every tensor fails with `reason`; returns the operations that were
  // waiting to start (the caller fails them).
  std::vector<std::shared_ptr<Operation>> FailAll(const absl::Status& reason)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The round and strategy version of the tensor's latest started operation. Hierarchical
  // (`machine_rounds`): the local root's network round k carries every local rank's push_pull
  // k, so the round is this rank's push_pull count - 1.
  absl::Status TensorStrategy(const std::string& name, bool machine_rounds, int64_t* round,
                              int64_t* version) ABSL_LOCKS_EXCLUDED(mu_);

  // Error-feedback checkpoints (tensor_checkpoint.h): only between steps (no operation of the
  // tensor in flight or queued). A state loaded while the declaration is pending is applied
  // when it completes; a partition whose memory does not exist yet gets it when it is made.
  absl::StatusOr<std::string> SaveState(const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status LoadState(const std::string& name, absl::string_view state) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Tensor;  // tensor_table.cc

  // What a call leaves for after it released the lock: the declarations to send, the caller's
  // `accepted` to run and the operations to fail, each with its error.
  struct AfterUnlock {
    std::vector<proto::ControlMessage> declarations;
    std::optional<absl::FunctionRef<void()>> accepted;
    std::vector<std::pair<std::shared_ptr<Operation>, absl::Status>> failed;
  };
  // Sends the declarations (send_), runs `accepted`, then fails the operations (their on-done
  // work runs): the only place where code that is not the table's runs, never under its lock.
  void RunAfterUnlock(AfterUnlock& after) ABSL_LOCKS_EXCLUDED(mu_);

  // The tensor, checked against (count, dtype) or declared: its declaration goes to *after.
  std::shared_ptr<Tensor> FindOrDeclareLocked(const std::string& name, int64_t count,
                                              proto::DType dtype, absl::Status* error,
                                              AfterUnlock* after,
                                              absl::Span<const int64_t> shape = {})
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // op's tensor, declared if new, once op passed its checks; then `accepted` runs. Null with
  // *error set when op did not pass (`accepted` did not run).
  std::shared_ptr<Tensor> Admit(const Operation& op, absl::FunctionRef<void()> accepted,
                                absl::Status* error) ABSL_LOCKS_EXCLUDED(mu_);
  void StartNextLocked(const std::shared_ptr<Tensor>& tensor, Started* started)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnDeclareReplyLocked(const proto::DeclareReply& reply, Started* started, AfterUnlock* after)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishedLocked(const Operation& op, const absl::Status& status, Started* started,
                      AfterUnlock* after) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ApplyStateLocked(Tensor& tensor, absl::string_view state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int num_servers_;
  StrategySwitch& strategies_;
  SendToScheduler send_;

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Tensor>> tensors_ ABSL_GUARDED_BY(mu_);
  // Tensors whose next round a strategy switch holds, until ReleaseHeld.
  std::vector<std::shared_ptr<Tensor>> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace bytecomp::worker
