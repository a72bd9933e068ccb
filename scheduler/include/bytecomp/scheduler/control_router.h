// The scheduler's protocols behind its one socket, without the socket: the node table, each
// protocol, and the routing of a node's message to the protocol that takes it (Register to
// Registration, and on the last rejoin report the takeover; anything else only from a
// registered node and with its token, a node on a new connection moved there first; a node's
// parts joined into the message they carry, control_parts.h). The Scheduler feeds it
// what its ROUTER receives and sends what it appends to the Outbox; the scheduler fuzzer
// (test/fuzz/scheduler_control_fuzzer.cc) drives the same object. One thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "bytecomp/common/control_parts.h"
#include "bytecomp/scheduler/auto_planner.h"
#include "bytecomp/scheduler/barriers.h"
#include "bytecomp/scheduler/collective_store.h"
#include "bytecomp/scheduler/declarations.h"
#include "bytecomp/scheduler/liveness.h"
#include "bytecomp/scheduler/local_relay.h"
#include "bytecomp/scheduler/node_table.h"
#include "bytecomp/scheduler/outbox.h"
#include "bytecomp/scheduler/registration.h"
#include "bytecomp/scheduler/server_failover.h"
#include "bytecomp/scheduler/strategy_control.h"
#include "bytecomp/scheduler/strategy_keeper.h"
#include "cluster_config.pb.h"
#include "control.pb.h"

namespace bytecomp {

// What the status page learns from the nodes' messages (the scheduler's StatusService).
class ControlObserver {
 public:
  virtual ~ControlObserver() = default;
  // Any authentic message of the node.
  virtual void Seen(const RegisteredNode& node, int64_t now_ms) = 0;
  virtual void WorkerDone(const RegisteredNode& node) = 0;
  virtual void Stats(const RegisteredNode& node, const proto::StatsReport& report) = 0;
};

// "empty message", or the name of the message's body ("barrier_request").
std::string BodyName(const proto::ControlMessage& message);
// A routing id, which may hold any bytes, as hex for logs.
std::string PrintableIdentity(const std::string& identity);

class ControlRouter {
 public:
  // `config`: the effective config, which must outlive this. `start_ms`: when the scheduler
  // started listening (the registration deadline counts from it).
  ControlRouter(const proto::ClusterConfig& config, StrategyKeeper strategy,
                std::optional<AutoPlanInputs> auto_plan, int64_t start_ms);

  // `observer` (may be null) hears of every authentic message; it must outlive this.
  void set_observer(ControlObserver* observer) { observer_ = observer; }

  // A parsed message from the connection `identity`.
  void Handle(const std::string& identity, const proto::ControlMessage& message, int64_t now_ms,
              Outbox* out);
  // "worker 3" for a registered node's connection, else "unregistered peer <hex id>".
  std::string Who(const std::string& identity) const;

  // Heartbeats due to the nodes (every turn of the loop).
  void SendHeartbeats(int64_t now_ms, Outbox* out) { liveness_.SendHeartbeats(now_ms, out); }
  // Deadlines: a late registration, a silent node, a declaration not complete in time; and a
  // --strategy=auto plan computed on its own thread, taken up here.
  void OnTime(int64_t now_ms, Outbox* out);
  // The earliest time OnTime or SendHeartbeats has something to do; at most `latest`.
  int64_t NextDeadlineMs(int64_t now_ms, int64_t latest) const;
  // SIGHUP.
  void Reload(Outbox* out) { strategy_.Reload(out); }
  // The scheduler stops (a signal, Stop): every node is told `reason`.
  void Stop(const std::string& reason, Outbox* out) { liveness_.Stop(reason, out); }

  const NodeTable& nodes() const { return nodes_; }
  const StrategyControl& strategy() const { return strategy_; }

 private:
  // Hands a registered node's message to the protocol that takes its body.
  void Dispatch(const RegisteredNode& node, const proto::ControlMessage& message, int64_t now_ms,
                Outbox* out);
  // A part of a message of `node`'s: the message, once joined, is dispatched.
  void Join(const RegisteredNode& node, const proto::ControlPart& part, int64_t now_ms,
            Outbox* out);
  // Every node is in (registered, or taking a job over: rejoined and reported): the job starts,
  // or the takeover restores it.
  void Begin(int64_t now_ms, Outbox* out);

  ControlObserver* observer_ = nullptr;
  // The protocols, and the node table they share. Declared in construction order: each is
  // built from the ones above it. Registration alone writes the node table.
  NodeTable nodes_;
  StrategyControl strategy_;
  Registration registration_;
  Barriers barriers_;
  Declarations declarations_;
  LocalRelay local_relay_;
  CollectiveStore collective_store_;
  Liveness liveness_;
  ServerFailover failover_;
  // Each node's message in parts being joined, at most MaxControlReportBytes each.
  const int64_t max_report_bytes_;
  std::map<RoleRank, ControlAssembly> assemblies_;
};

}  // namespace bytecomp
