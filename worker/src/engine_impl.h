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
#include "control.pb.h"
#include "operation.h"
#include "wake_queue.h"

namespace bytecomp::worker {

// Work for the data I/O thread.
struct StartOperation {
  std::shared_ptr<Operation> op;
};
struct FailEverything {
  absl::Status reason;
};
struct StopData {};
using DataCommand = std::variant<StartOperation, FailEverything, StopData>;

// Work for the control thread.
struct SendControl {
  proto::ControlMessage message;
};
struct StopControl {};
using ControlCommand = std::variant<SendControl, StopControl>;

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

 private:
  friend class ControlLoop;
  friend class DataLoop;

  absl::Status EngineStatus();
  std::shared_ptr<TensorEntry> FindOrDeclareLocked(const std::string& name, int64_t count,
                                                   proto::DType dtype, absl::Status* error);
  void StartNextLocked(TensorEntry& tensor);
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

  WakeQueue<DataCommand> data_queue_;
  WakeQueue<ControlCommand> control_queue_;
  std::thread data_thread_;
  std::thread control_thread_;
  bool shut_down_ = false;
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
    int server = 0;
    int64_t bytes = 0;  // push bytes not yet acknowledged by the server
  };

  void Connect();
  void Enqueue(const std::shared_ptr<Operation>& op);
  void SendReady();
  void Send(const PartitionTask& task);
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
