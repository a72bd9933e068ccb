// The control thread: owns the scheduler connection (SchedulerClient). It sends what the other
// threads queue (declarations, barrier requests, profile and link reports, the goodbye),
// heartbeats, and hands what the scheduler sends to the engine through ControlEvents; a
// scheduler silent for SchedulerTimeoutMs fails the engine, naming it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <variant>

#include "absl/status/status.h"
#include "bytecomp/common/scheduler_client.h"
#include "bytecomp/worker/wake_queue.h"
#include "control.pb.h"

namespace bytecomp::worker {

struct SendControl {
  proto::ControlMessage message;
};
struct StopControl {};
using ControlCommand = std::variant<SendControl, StopControl>;

// What the scheduler tells the engine; called on the control thread.
class ControlEvents {
 public:
  virtual ~ControlEvents() = default;
  virtual void OnDeclareReply(const proto::DeclareReply& reply) = 0;
  // StrategyPrepare: returns the highest round started (strategy_switch.h).
  virtual uint64_t OnStrategyPrepare(uint64_t version) = 0;
  virtual void OnStrategyCommit(const proto::Strategy& strategy) = 0;
  virtual void OnBarrierRelease(const proto::BarrierRelease& release) = 0;
  // A node failed, the scheduler ended the job, or the scheduler cannot be reached.
  virtual void OnJobFailed(const absl::Status& reason) = 0;
  // Server failover: a replacement holds server `rank` at `data_address`.
  virtual void OnServerReplaced(const proto::ServerReplaced& replaced) = 0;
  // Server failover without a replacement: a lost server's partitions moved to others.
  virtual void OnKeysMoved(const proto::KeysMoved& moved) = 0;
  // The scheduler's answer to a collectives' rendezvous get (scheduler_rendezvous.h).
  virtual void OnCollectiveStoreValue(const proto::CollectiveStoreValue& /*value*/) {}
  // Asked every poll: a stats report that is due and has news (engine_observer.h).
  virtual std::optional<proto::ControlMessage> DueReport() { return std::nullopt; }
};

class ControlLoop {
 public:
  ControlLoop(std::unique_ptr<SchedulerClient> client, WakeQueue<ControlCommand>& commands,
              ControlEvents& engine)
      : client_(std::move(client)), commands_(commands), engine_(engine) {}
  // Until StopControl.
  void Run();

 private:
  void Handle(const proto::ControlMessage& message);

  std::unique_ptr<SchedulerClient> client_;
  WakeQueue<ControlCommand>& commands_;
  ControlEvents& engine_;
  bool done_sent_ = false;         // WorkerDone went out: a Shutdown after it is the normal end
  bool scheduler_silent_ = false;  // reported once
};

}  // namespace bytecomp::worker
