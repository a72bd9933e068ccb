// The scheduler daemon's core: rendezvous and ranks, topology, barriers, heartbeats and
// failure detection, tensor declaration, and orderly shutdown. One thread (the caller of
// Run) owns the ROUTER socket; Stop/StopForSignal may be called from any thread or from a
// signal handler.
//
// Wire: every node connects one DEALER socket to the scheduler's ROUTER and every message is
// one frame holding a serialized proto::ControlMessage (proto/control.proto).
//
// Protocol, as a node sees it:
// - Send Register{role, requested_rank (-1: any), data_address (servers), hostname, pid}.
//   No acknowledgement: the answer is Topology once all W workers and S servers registered,
//   or Error (rank taken or out of range, same connection registering twice, job full).
//   Set a unique routing id on the DEALER (zmq::sockopt::routing_id) so that a TCP reconnect
//   keeps the node's identity.
// - Send Heartbeat every heartbeat_interval_ms from registration on (any message counts).
//   Monitoring starts when the Topology is sent; a node silent for heartbeat_timeout_ms is
//   failed: every other node gets NodeFailed{node, "missed heartbeats for 5.0 s",
//   data_address}, then Shutdown{reason}, and the scheduler exits non-zero.
// - BarrierRequest{group "workers"|"servers"|"all", sequence} -> BarrierRelease{group,
//   sequence} to every member once all members asked for that sequence.
// - Workers: DeclareTensor{name, element_count, dtype} -> DeclareReply to every worker once
//   all declared it: ok with tensor_id (completion order), partition_elements and
//   partition_server[], or ok=false with the error (mismatch, declare timeout, bad values).
// - Workers: LinkProbeReport once at start (their measured links to every server): kept,
//   printed as one table once every worker reported, used by --strategy=auto. From a server:
//   Error.
// - Workers name their machine in Register (machine, default hostname; optional local rank
//   and local size). Topology carries local_rank/local_size/local_root and the pushers. With
//   config.hierarchical, a machine's local root sends LocalCommunicator{kind, id}, at most one
//   of each kind ("host", and "nccl" when its local ranks have GPUs); the scheduler checks each
//   and relays it to the machine's other local ranks (local_groups.h).
// - Workers: WorkerDone when finished. Once all did, servers get Shutdown and the scheduler
//   exits 0. Any node may send Shutdown{reason}: everyone else gets Shutdown, exit non-zero.
// - A node must stop when it receives Shutdown. Malformed frames get an Error reply.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bytecomp/scheduler/auto_planner.h"
#include "bytecomp/scheduler/link_book.h"
#include "bytecomp/scheduler/local_groups.h"
#include "bytecomp/scheduler/partition_assigner.h"
#include "bytecomp/scheduler/strategy_keeper.h"
#include "cluster_config.pb.h"
#include "control.pb.h"
#include "planner.pb.h"
#include "zmq.hpp"

namespace bytecomp {

struct SchedulerOptions {
  // The effective configuration (defaults applied); Create validates it.
  proto::ClusterConfig config;
  // Interface to bind; the port comes from `port`, or from config.scheduler_address if < 0.
  std::string bind_host = "0.0.0.0";
  // -1: the port of config.scheduler_address; 0: an ephemeral port (tests); else this port.
  int port = -1;
  // On exit, how long queued messages (Shutdown, NodeFailed) may take to reach the nodes.
  int shutdown_linger_ms = 1000;
  // Strategy file (proto/strategy.proto); empty: nothing is compressed. Reloaded on SIGHUP.
  std::string strategy_path;
  // --strategy=auto: start uncompressed, have the workers profile rounds 1..profile_rounds,
  // plan with the ByteComp algorithm for this cluster description and cost table, and switch.
  bool auto_strategy = false;
  std::string plan_cluster_path;
  std::string plan_costs_path;
  int profile_rounds = 5;
  // Where the planned cluster's worker and server links come from (auto_planner.h).
  PlanLinks plan_links = PlanLinks::kMeasured;
};

class Scheduler {
 public:
  // Validates the config and binds the ROUTER socket. The error names the address on a
  // failed bind.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(SchedulerOptions options);
  ~Scheduler();

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // The bound TCP port.
  int port() const { return port_; }

  // Serves the job until it ends. Returns OK when every worker sent WorkerDone (servers were
  // told to shut down); otherwise an error saying why the job stopped: a node failed
  // (Unavailable), registration did not complete in time (DeadlineExceeded), a node asked
  // for shutdown (Aborted), or Stop/StopForSignal was called (Cancelled). Call at most once.
  absl::Status Run();

  // Ask Run to send Shutdown to every node and return. Thread-safe.
  void Stop();
  // Async-signal-safe: Run sends Shutdown{"scheduler received SIGTERM"} and returns.
  void StopForSignal(int signal_number);
  // Async-signal-safe (SIGHUP): ask Run to reload the strategy file. The job goes on.
  void RequestReload();
  // The strategy in force (tests).
  const proto::Strategy& strategy() const { return strategy_.current(); }
  // The workers' link probe reports so far (tests).
  const LinkBook& links() const { return links_; }
  // The signal passed to StopForSignal, or 0.
  int stop_signal() const { return stop_signal_.load(); }

 private:
  struct Node {
    std::string identity;  // ZeroMQ routing id of the node's DEALER
    proto::Role role = proto::ROLE_UNKNOWN;
    int rank = -1;
    std::string data_address;
    std::string hostname;
    int pid = 0;
    int64_t last_seen_ms = 0;
    bool done = false;  // worker sent WorkerDone
    MachineSlot slot;  // workers: machine and local rank/size asked for
  };
  // One tensor name's declarations, per worker rank, until all workers declared it.
  struct Declaration {
    std::map<int, proto::DeclareTensor> by_worker;
    int64_t first_ms = 0;
    std::optional<proto::DeclareReply> reply;  // set once decided (ok or not)
  };
  struct BarrierGroup {
    std::map<uint64_t, std::set<std::string>> waiting;  // sequence -> identities
    std::set<uint64_t> released;
  };

  Scheduler(SchedulerOptions options, std::unique_ptr<zmq::context_t> context,
            std::unique_ptr<zmq::socket_t> socket, int port);

  void HandleMessage(std::vector<zmq::message_t>& frames, int64_t now_ms);
  void HandleRegister(const std::string& identity, const proto::Register& reg, int64_t now_ms);
  void HandleBarrier(Node& node, const proto::BarrierRequest& request);
  void HandleDeclare(Node& node, const proto::DeclareTensor& declare, int64_t now_ms);
  void HandleWorkerDone(Node& node);
  void HandleShutdownRequest(Node& node, const proto::Shutdown& shutdown);
  void HandleLocalCommunicator(Node& node, const proto::LocalCommunicator& comm);
  std::vector<MachineSlot> MachineSlots() const;

  void SendTopology();
  void TryReleaseBarrier(const std::string& group_name, uint64_t sequence);
  void CompleteDeclaration(const std::string& name, Declaration& decl);
  void CheckDeadlines(int64_t now_ms);
  int64_t NextDeadlineMs(int64_t now_ms) const;

  void Send(const std::string& identity, const proto::ControlMessage& message);
  void SendError(const std::string& identity, const std::string& message);
  // Sends Shutdown{reason} to every registered node except `except` (and, if
  // `servers_only`, only to servers).
  void BroadcastShutdown(const std::string& reason, const std::string& except = "",
                         bool servers_only = false);
  void Finish(absl::Status status);
  void ReloadStrategy();
  void HandleStrategyPrepareReply(Node& node, const proto::StrategyPrepareReply& reply);
  void HandleProfileReport(Node& node, const proto::ProfileReport& report);
  void HandleLinkProbeReport(Node& node, const proto::LinkProbeReport& report);
  void LogBadMessage(const std::string& what);

  bool JobComplete() const { return topology_sent_; }
  int GroupSize(const std::string& group) const;
  bool InGroup(const Node& node, const std::string& group) const;
  std::string MissingNodes() const;
  static std::string NodeName(const Node& node);

  SchedulerOptions options_;
  const proto::ClusterConfig& config_;
  std::unique_ptr<zmq::context_t> context_;
  std::unique_ptr<zmq::socket_t> socket_;
  int port_;

  std::atomic<bool> stop_requested_{false};
  std::atomic<int> stop_signal_{0};
  std::atomic<bool> reload_requested_{false};
  bool ran_ = false;

  absl::flat_hash_map<std::string, Node> nodes_;  // by identity
  std::vector<std::string> worker_by_rank_;       // identity, empty if free
  std::vector<std::string> server_by_rank_;
  int64_t start_ms_ = 0;
  bool topology_sent_ = false;
  LocalAssignment local_;  // set with the topology
  // (machine, kind) -> the id of that LocalCommunicator, relayed
  std::map<std::pair<std::string, std::string>, std::string> local_comms_;

  absl::flat_hash_map<std::string, BarrierGroup> barriers_;  // by group name
  std::map<std::string, Declaration> declarations_;          // by tensor name
  std::set<std::string> undecided_declarations_;  // names still waiting for workers
  uint32_t next_tensor_id_ = 0;
  PartitionAssigner assigner_;
  StrategyKeeper strategy_;
  proto::ClusterDescription plan_cluster_;  // --strategy=auto
  proto::CostTable plan_costs_;
  std::map<int, proto::ModelProfile> profiles_;  // by worker rank
  LinkBook links_;
  bool planned_ = false;
  int workers_done_ = 0;
  int64_t bad_messages_ = 0;  // malformed, unexpected or unregistered messages

  std::optional<absl::Status> final_status_;
};

}  // namespace bytecomp
