// Internals of WorkerEngine: shared state and the two loops (control_loop.cc, data_loop.cc).
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "bytecomp/common.h"
#include "bytecomp/worker/engine.h"
#include "bytecomp/cpu_offload.h"
#include "control.pb.h"
#include "local_reducer.h"
#include "nccl_setup.h"
#include "operation.h"
#include "ready_profiler.h"
#include "wake_queue.h"

namespace bytecomp::worker {

// Work for the data I/O thread.
struct StartOperation {  // an uncompressed operation: every partition straight from memory
  std::shared_ptr<Operation> op;
};
// One encoded partition (or an abort: the worker could not encode it) ready to push.
struct EncodedPush {
  std::shared_ptr<Operation> op;
  int64_t partition = 0;
  uint32_t stage = 0;  // two-round codecs: 1 or 2
  std::vector<uint8_t> payload;
  // Encoded on the device: the payload copied to pinned host memory instead.
  cpu_offload::PinnedBuffer pinned;
  size_t pinned_bytes = 0;
  std::string abort_error;
  static std::shared_ptr<EncodedPush> For(std::shared_ptr<Operation> op, int64_t partition,
                                          uint32_t stage = 0) {
    auto push = std::make_shared<EncodedPush>();
    push->op = std::move(op);
    push->partition = partition;
    push->stage = stage;
    return push;
  }
  const uint8_t* data() const { return pinned ? pinned.data() : payload.data(); }
  size_t size() const { return pinned ? pinned_bytes : payload.size(); }
};
struct FailEverything {
  absl::Status reason;
};
struct StopData {};
using DataCommand =
    std::variant<StartOperation, std::shared_ptr<EncodedPush>, FailEverything, StopData>;

// Work for the control thread.
struct SendControl {
  proto::ControlMessage message;
};
struct StopControl {};
using ControlCommand = std::variant<SendControl, StopControl>;

// Makes the partition's codec objects for the operation's strategy version: on the host, or on
// the device for the stages of a device tensor that run there (codec_work.cc).
absl::Status EnsureCodecs(PartitionCodec& pc, const Operation& op, std::string* pending_state);

class EngineImpl {
 public:
  absl::Status Init(const std::string& config_path);

  // --- called by training threads
  absl::Status Declare(const std::string& name, int64_t element_count, proto::DType dtype);
  absl::StatusOr<int64_t> PushPull(const PushPullRequest& request);
  absl::StatusOr<bool> Poll(int64_t handle);
  absl::Status Wait(int64_t handle, int64_t timeout_ms);
  absl::Status Release(int64_t handle);
  absl::Status Barrier(int64_t timeout_ms);
  absl::Status Shutdown();

  EngineInfo info;

  // --- called by the engine's threads
  // Marks the engine failed (first reason wins) and fails every operation.
  void FailEngine(const absl::Status& reason);
  // One of the operation's events happened; completes it at zero.
  void FinishEvents(const std::shared_ptr<Operation>& op, int64_t events);
  void OnDeclareReply(const proto::DeclareReply& reply);
  void OnBarrierRelease(const proto::BarrierRelease& release);
  // Strategy switch: hold rounds beyond the highest started + 1; returns that highest round.
  uint64_t OnStrategyPrepare(uint64_t version);
  void OnStrategyCommit(const proto::Strategy& strategy);
  // Pool work of a compressed operation (codec_work.cc).
  void EncodePartition(const std::shared_ptr<Operation>& op, int64_t partition);
  void DecodePartition(const std::shared_ptr<Operation>& op, int64_t partition, uint32_t stage,
                       zmq::message_t payload, int server);
  // Pushes an abort for a partition that could not be encoded (the round must still complete
  // on the server for the other workers) and records the error.
  void PushEncodeFailure(const std::shared_ptr<EncodedPush>& push, const absl::Status& status);
  // Device tensors (device_work.cc): the stages that run on the device.
  void EncodePartitionOnDevice(const std::shared_ptr<Operation>& op, int64_t partition);
  void DecodePartitionOnDevice(const std::shared_ptr<Operation>& op, int64_t partition,
                               zmq::message_t payload, int server);
  // The partition's result is in op's host memory: for a device tensor copy it to the device
  // first; then the partition's event is finished.
  void DeliverPartition(const std::shared_ptr<Operation>& op, int64_t partition);
  // Work for the pulled reply of a compressed partition (decode on the pool or the device).
  void SubmitDecode(const std::shared_ptr<Operation>& op, int64_t partition, uint32_t stage,
                    zmq::message_t payload, int server);
  void SetLearningRate(double lr) { learning_rate_.store(lr); }
  void CountPush(int64_t payload_bytes, int64_t raw_bytes) {
    pushed_bytes_ += payload_bytes;
    pushed_raw_bytes_ += raw_bytes;
  }
  void CountPull(int64_t payload_bytes, int64_t raw_bytes) {
    pulled_bytes_ += payload_bytes;
    pulled_raw_bytes_ += raw_bytes;
  }
  EngineStats Stats() const;
  absl::Status TensorStrategy(const std::string& name, int64_t* round, int64_t* version);
  absl::StatusOr<std::string> SaveTensorState(const std::string& name);
  absl::Status LoadTensorState(const std::string& name, absl::string_view state);
  absl::Status ApplyCheckpointLocked(TensorEntry& tensor, absl::string_view state);

 private:
  friend class ControlLoop;
  friend class DataLoop;

  absl::Status EngineStatus();
  // A new operation for the request; fails when a device tensor has no device backend.
  absl::StatusOr<std::shared_ptr<Operation>> NewOperation(const PushPullRequest& request);
  // Queues `op` on its tensor (declaring it if new). internal: an operation of the
  // hierarchical layer, with no handle and not profiled (its outer operation is).
  absl::Status QueueOperation(const std::shared_ptr<Operation>& op, bool internal);
  void RecordReadyLocked(const Operation& op);
  void RegisterHandle(const std::shared_ptr<Operation>& op);
  // Hierarchical mode (hierarchy.cc): reduce in the machine, the local root pushes and pulls,
  // then broadcast in the machine.
  absl::StatusOr<int64_t> HierarchicalPushPull(const PushPullRequest& request);
  // The local reducer for the operation's memory: the host reducer for host tensors (and for
  // the emulated device, whose memory is host memory), the NCCL one for CUDA device tensors.
  absl::StatusOr<LocalReducer*> LocalReducerFor(const Operation& op);
  void StartHierarchical(LocalReducer* reducer, const std::shared_ptr<Operation>& outer,
                         const std::string& tag);
  void FinishHierarchical(LocalReducer* reducer, const std::shared_ptr<Operation>& outer,
                          const std::string& tag, const absl::Status& status);
  using Deferred = std::vector<absl::AnyInvocable<void()>>;
  // Runs work that StartNextLocked deferred until tensors_mu_ is released (inline encodes).
  static void RunDeferred(Deferred& work);
  void SubmitToPool(int priority, proto::Placement placement, absl::AnyInvocable<void()> work,
                    std::shared_ptr<Operation> op, Deferred* deferred);
  compress::CodecContext ContextFor(const Operation& op, int64_t partition, uint32_t node) const;
  void WriteResult(Operation& op, int64_t partition, const float* sum);
  std::shared_ptr<TensorEntry> FindOrDeclareLocked(const std::string& name, int64_t count,
                                                   proto::DType dtype, absl::Status* error);
  void StartNextLocked(const std::shared_ptr<TensorEntry>& tensor, Deferred* deferred);
  // A device tensor's operation (device_work.cc): decides where its stages run, copies it to
  // pinned host memory where a host stage needs it, and starts its partitions.
  void StartDeviceLocked(const std::shared_ptr<Operation>& op, TensorEntry& tensor,
                         Deferred* deferred);
  void StartEncodes(const std::shared_ptr<Operation>& op, Deferred* deferred);
  // Fails every partition of a device operation that could not start (pushing aborts, so the
  // round completes on the servers).
  void AbortDeviceOperation(const std::shared_ptr<Operation>& op, const absl::Status& status);
  absl::StatusOr<DeviceBackend*> DeviceBackendFor(const PushPullRequest& request);
  // DeviceBackend::WhenReached, counted so that Shutdown can wait for the callbacks (they call
  // into the engine) before it goes.
  absl::Status AfterDevice(const DeviceWork& d, absl::AnyInvocable<void()> work);
  void WaitForDeviceCallbacks(int64_t deadline_ms);
  void Complete(const std::shared_ptr<Operation>& op);
  std::shared_ptr<Operation> FindHandle(int64_t handle);

  proto::ClusterConfig config_;
  proto::Topology topology_;
  std::unique_ptr<zmq::context_t> context_;

  std::mutex tensors_mu_;  // guards tensors_ and every TensorEntry
  absl::flat_hash_map<std::string, std::shared_ptr<TensorEntry>> tensors_;

  std::mutex handles_mu_;
  absl::flat_hash_map<int64_t, std::shared_ptr<Operation>> handles_;
  int64_t next_handle_ = 1;

  std::mutex failure_mu_;
  absl::Status failure_;
  std::atomic<bool> failed_{false};

  std::mutex barrier_mu_;
  std::condition_variable barrier_cv_;
  uint64_t barrier_sequence_ = 0;
  uint64_t barrier_released_ = 0;

  mutable std::mutex strategy_mu_;
  compress::StrategyHistory strategies_;
  // Set between StrategyPrepare and StrategyCommit: no round beyond it starts (tensors_mu_).
  std::optional<uint64_t> hold_after_round_;
  std::vector<std::shared_ptr<TensorEntry>> held_;  // tensors waiting for the commit
  uint64_t highest_started_round_ = 0;              // tensors_mu_

  std::unique_ptr<cpu_offload::PriorityThreadPool> pool_;
  // Hierarchical mode with more than one worker on this machine; else null.
  std::unique_ptr<LocalReducer> local_reducer_;
  // With local_reducer_: the NCCL reducer for device tensors, or why there is none.
  DeviceReducer device_reducer_;
  // Made with the first device tensor, so host-only jobs never touch CUDA (device_mu_).
  std::mutex device_mu_;
  std::condition_variable device_cv_;
  int64_t device_callbacks_ = 0;  // AfterDevice callbacks not yet run
  DeviceBackend* device_backend_ = nullptr;
  std::unique_ptr<cpu_offload::PinnedMemoryPool> pinned_;
  std::unique_ptr<ReadyProfiler> profiler_;  // tensors_mu_; when the scheduler asked for one
  std::atomic<double> learning_rate_{0.0};
  std::atomic<int64_t> pushed_bytes_{0}, pushed_raw_bytes_{0}, pulled_bytes_{0},
      pulled_raw_bytes_{0}, operations_{0};

  WakeQueue<DataCommand> data_queue_;
  WakeQueue<ControlCommand> control_queue_;
  std::thread data_thread_;
  std::thread control_thread_;
  bool shut_down_ = false;
  std::atomic<bool> shutting_down_{false};
};

// The control thread's loop: owns the SchedulerClient.
class ControlLoop {
 public:
  ControlLoop(EngineImpl& engine, std::unique_ptr<SchedulerClient> client)
      : engine_(engine), client_(std::move(client)) {}
  void Run();

 private:
  void Handle(const proto::ControlMessage& message);
  EngineImpl& engine_;
  std::unique_ptr<SchedulerClient> client_;
  bool done_sent_ = false;
};

// The data I/O thread's loop: owns the DEALER sockets.
class DataLoop {
 public:
  explicit DataLoop(EngineImpl& engine) : engine_(engine) {}
  void Run();

 private:
  struct PartitionTask {
    std::shared_ptr<Operation> op;
    std::shared_ptr<EncodedPush> encoded;  // null: uncompressed, straight from the caller
    int64_t partition = 0;
    int priority = 0;
    uint64_t sequence = 0;
    bool operator<(const PartitionTask& other) const {
      if (priority != other.priority) return priority < other.priority;  // max-heap on priority
      return sequence > other.sequence;                                   // then FIFO
    }
  };
  struct InFlight {
    std::shared_ptr<Operation> op;
    int64_t partition = 0;
    uint32_t stage = 0;
    bool compressed = false;
    bool aborted = false;
    int server = 0;
    int64_t bytes = 0;  // push bytes not yet acknowledged by the server
  };

  void Connect();
  // Before the first push: measures each server's link and reports it (link_probes.cc).
  void ProbeLinks();
  void Enqueue(const std::shared_ptr<Operation>& op);
  void SendReady();
  void Send(const PartitionTask& task);
  void SendAbort(const Operation& op, int64_t partition, uint32_t stage, const std::string& why);
  proto::DataHeader HeaderFor(const Operation& op, int64_t partition, uint32_t stage) const;
  void HandleReply(int server, std::vector<zmq::message_t>& frames);
  void FailAll(const absl::Status& reason);

  EngineImpl& engine_;
  std::vector<std::vector<zmq::socket_t>> sockets_;  // [server][connection]
  std::vector<int64_t> inflight_bytes_;
  int64_t budget_bytes_ = 0;
  std::vector<std::priority_queue<PartitionTask>> queues_;  // per server
  absl::flat_hash_map<uint64_t, InFlight> inflight_;        // by request id
  uint64_t next_request_ = 1;
  uint64_t sequence_ = 0;
  bool closed_ = false;
};

}  // namespace bytecomp::worker
