// The worker engine behind bytecomp/worker/engine.h: it owns the parts and moves a push_pull
// between them, each part with one job:
//   TensorTable       declarations, layouts, rounds, the per-tensor queue of operations
//   HandleTable       handles -> operations, poll and wait
//   OperationTracker  each operation's named events per partition, until its last
//   StrategySwitch    strategy versions and the switch between them (prepare / commit)
//   HostPipeline, DevicePipeline  the stages before the push and after the pull
//   DataLoop, ControlLoop         the two threads that own sockets (wired by constructor)
//   Hierarchy         the machine's local reduce and broadcast (hierarchical mode)
// engine.cc reads in the order a gradient travels: PushPull, the tensor table, the stages,
// completion; then the scheduler's messages, failure and shutdown.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "bytecomp/cpu_offload.h"
#include "bytecomp/worker/engine.h"
#include "bytecomp/worker/wake_queue.h"
#include "collective_exchange.h"
#include "control_loop.h"
#include "data_commands.h"
#include "device_pipeline.h"
#include "engine_observer.h"
#include "handle_table.h"
#include "held_payloads.h"
#include "hierarchy.h"
#include "host_pipeline.h"
#include "join_job.h"
#include "operation.h"
#include "operation_tracker.h"
#include "ratio_windows.h"
#include "ready_profiler.h"
#include "scheduler_rendezvous.h"
#include "stage_pipeline.h"
#include "strategy_switch.h"
#include "tensor_fusion.h"
#include "tensor_table.h"

namespace bytecomp::worker {

class Engine final : public WorkerEngine, private ControlEvents {
 public:
  explicit Engine(JoinedJob job);
  ~Engine() override;
  // Takes the job's initial strategy and starts the data and control threads.
  absl::Status Run();

  const EngineInfo& info() const override { return info_; }
  absl::Status Declare(const std::string& name, int64_t element_count, ElementType dtype,
                       absl::Span<const int64_t> shape = {}) override;
  absl::StatusOr<int64_t> PushPull(const PushPullRequest& request) override;
  absl::StatusOr<bool> Poll(int64_t handle) override { return handles_.Poll(handle); }
  absl::Status Wait(int64_t handle, int64_t timeout_ms) override;
  absl::Status Release(int64_t handle) override { return handles_.Release(handle); }
  absl::Status Barrier(int64_t timeout_ms) override ABSL_LOCKS_EXCLUDED(barrier_mu_);
  void SetLearningRate(double learning_rate) override { learning_rate_.store(learning_rate); }
  EngineStats Stats() const override;
  absl::Status TensorStrategy(const std::string& name, int64_t* round, int64_t* version) override;
  absl::StatusOr<std::string> SaveTensorState(const std::string& name) override;
  absl::Status LoadTensorState(const std::string& name, absl::string_view state) override;
  absl::Status Shutdown() override;

 private:
  // --- a push_pull's way, in order
  // The operation for a request, with its stages (host or device).
  absl::StatusOr<std::shared_ptr<Operation>> NewOperation(const PushPullRequest& request);
  // Hierarchical mode: the machine's collectives around the local root's network operation.
  absl::StatusOr<int64_t> PushPullInMachine(const std::shared_ptr<Operation>& op);
  absl::Status PushPullMachineSum(const std::shared_ptr<Operation>& outer,
                                  absl::AnyInvocable<void(absl::Status)> done);
  // Strategy.fusion_groups: a member's push_pull, started at a round where its plan names its
  // group, joins that round of the group (tensor_fusion.h); the round's last member starts the
  // group's push_pull, whose end completes them.
  void JoinGroupRound(const std::shared_ptr<Operation>& member);
  void CompleteMember(const std::shared_ptr<Operation>& member, const absl::Status& status);
  void StartGroupRound(TensorFusion::GroupRound round);
  void FinishGroupRound(const std::string& group, uint64_t round, const absl::Status& status);
  // The operation passed the tensor table's checks: it gets its handle and its ready time.
  void Accept(const std::shared_ptr<Operation>& op) ABSL_LOCKS_EXCLUDED(profile_mu_);
  // Operations the tensor table started: their events are expected, their stages start.
  void StartStages(const TensorTable::Started& started);
  // The tracker saw the operation's last event.
  void Complete(const std::shared_ptr<Operation>& op) ABSL_LOCKS_EXCLUDED(profile_mu_);
  // An adaptive-ratio tensor's round ended: its window's measurements, and the report to the
  // scheduler when the window is complete (ratio_windows.h).
  void RecordRatioRound(const Operation& op, int64_t done_us);

  // --- the scheduler's messages (ControlEvents, on the control thread)
  void OnDeclareReply(const proto::DeclareReply& reply) override;
  uint64_t OnStrategyPrepare(uint64_t version) override;
  void OnStrategyCommit(const proto::Strategy& strategy) override;
  void OnBarrierRelease(const proto::BarrierRelease& release) override
      ABSL_LOCKS_EXCLUDED(barrier_mu_);
  void OnJobFailed(const absl::Status& reason) override { FailEngine(reason); }
  void OnServerReplaced(const proto::ServerReplaced& replaced) override {
    data_queue_.Push(ReconnectServer{replaced.rank(), replaced.data_address(), replaced.epoch(),
                                     replaced.data_key()});
  }
  void OnKeysMoved(const proto::KeysMoved& moved) override {
    MoveKeys command{moved.from_rank(), {}};
    for (const proto::DeclareReply& tensor : moved.tensors()) {
      for (int p = 0; p < tensor.partition_server_size(); ++p) {
        command.keys.emplace_back(MakeKey(tensor.tensor_id(), static_cast<uint32_t>(p)),
                                  tensor.partition_server(p));
      }
    }
    data_queue_.Push(std::move(command));
  }
  void OnCollectiveStoreValue(const proto::CollectiveStoreValue& value) override {
    if (rendezvous_ != nullptr) rendezvous_->OnValue(value);
  }
  std::optional<proto::ControlMessage> DueReport() override {
    return observer_.DueReport(telemetry::Timeline::NowUs(), Stats());
  }

  // ClusterConfig.collectives: joins the workers' gloo mesh through the scheduler (the control
  // thread runs) and hands the exchange to the host stages.
  absl::Status JoinCollectives();

  // --- failure
  // Marks the engine failed (the first reason wins) and fails every operation.
  void FailEngine(const absl::Status& reason) ABSL_LOCKS_EXCLUDED(failure_mu_, barrier_mu_);
  absl::Status EngineStatus() const ABSL_LOCKS_EXCLUDED(failure_mu_);

  const proto::ClusterConfig config_;
  const proto::Topology topology_;
  const EngineInfo info_;
  std::unique_ptr<zmq::context_t> context_;
  std::unique_ptr<SocketSecurity> security_;  // after the context, before every socket
  std::unique_ptr<SchedulerClient> client_;   // the control thread's, once it runs
  MachineReducers reducers_;
  // Timeline, metrics, stats reports (off unless asked); outlives every thread that uses it.
  EngineObserver observer_;

  mutable absl::Mutex failure_mu_;
  absl::Status failure_ ABSL_GUARDED_BY(failure_mu_);
  std::atomic<bool> failed_{false};  // failure_ is set: the fast check

  WakeQueue<DataCommand> data_queue_;
  WakeQueue<ControlCommand> control_queue_;
  StrategySwitch strategies_;
  TensorTable tensors_;
  HandleTable handles_;
  OperationTracker tracker_;
  TrafficCounters traffic_;
  HeldPayloads held_payloads_;  // the data loop's; outlives the context's termination (Shutdown)
  std::atomic<int64_t> operations_{0};
  std::atomic<double> learning_rate_{0.0};

  // Set when the scheduler asked for a profile (profile_rounds); its contents are guarded.
  absl::Mutex profile_mu_;
  const std::unique_ptr<ReadyProfiler> profiler_ ABSL_PT_GUARDED_BY(profile_mu_);
  // Whether there is a profiler still measuring: once its profile is built (or with none), the
  // push_pull calls, completions and waits skip profile_mu_.
  std::atomic<bool> profiling_{false};
  // Clears profiling_ once the profiler is done.
  void NoteProfileDone() ABSL_EXCLUSIVE_LOCKS_REQUIRED(profile_mu_);

  RatioWindows ratio_windows_;  // the adaptive ratio's measurements

  std::unique_ptr<cpu_offload::PriorityThreadPool> pool_;
  const StageContext stage_context_;  // what the stages use of the above
  HostPipeline host_stages_;
  DevicePipeline device_stages_;
  std::unique_ptr<Hierarchy> hierarchy_;  // hierarchical mode with other local ranks; else null
  // ClusterConfig.collectives: the rendezvous (set before the control thread starts) and the
  // exchange (after it joined); else null.
  std::unique_ptr<SchedulerRendezvousStore> rendezvous_;
  std::unique_ptr<CollectiveExchange> collectives_;
  // The rounds of the fusion groups (Strategy.fusion_groups; strategies_ knows the groups).
  TensorFusion fusion_;

  absl::Mutex barrier_mu_;
  absl::CondVar barrier_cv_;  // a release arrived, or the engine failed
  uint64_t barrier_sequence_ ABSL_GUARDED_BY(barrier_mu_) = 0;
  uint64_t barrier_released_ ABSL_GUARDED_BY(barrier_mu_) = 0;

  std::thread data_thread_;
  std::thread control_thread_;
  std::atomic<bool> shut_down_{false};      // Shutdown ran (it runs once)
  std::atomic<bool> shutting_down_{false};  // failures from now on are the shutdown's
};

}  // namespace bytecomp::worker
