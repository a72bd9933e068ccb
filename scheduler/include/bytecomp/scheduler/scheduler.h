// The scheduler daemon's door: rendezvous and ranks, topology, barriers, tensor
// declarations, the local-communicator relay, strategy changes, heartbeats and failure
// detection, and orderly shutdown. One thread (the caller of Run) owns the ROUTER socket and
// every protocol object; Stop/StopForSignal/RequestReload may be called from any thread or
// from a signal handler.
//
// Wire: every node connects one DEALER socket to the scheduler's ROUTER and every message is
// one frame holding a serialized proto::ControlMessage (proto/control.proto).
//
// Protocol, as a node sees it (each part is one socket-free class, named in brackets):
// - [Registration] Send Register{role, requested_rank (-1: any), data_address (servers),
//   hostname, pid, token (16 random bytes)}. No acknowledgement: the answer is Topology once
//   all W workers and S servers registered (servers' lists every worker's token), or Error
//   (no token, rank taken or out of range, same connection registering twice, job full). Every
//   later message must carry the token (ControlMessage.token); one without it is refused
//   with Error and does not count as a sign of life. The token, not the connection, is the
//   node: a message with it on a connection that is no node's (a TCP reconnect) moves the
//   node to that connection. Leave the DEALER's routing id to ZeroMQ (a fixed one collides
//   with the old connection's until the scheduler drops it).
// - [Liveness] Send Heartbeat every heartbeat_interval_ms from registration on (any message
//   counts). Monitoring starts when the Topology is sent; a node silent for
//   heartbeat_timeout_ms is failed: every other node gets NodeFailed{node, "missed
//   heartbeats for 5.0 s", data_address}, then Shutdown{reason}, the failed node a Shutdown
//   saying so, and the scheduler exits non-zero. Registration must complete within
//   connect_timeout_ms, else every registered node gets Shutdown naming the missing ranks.
//   The scheduler sends every registered node a Heartbeat each heartbeat_interval_ms: a node
//   that hears nothing for scheduler_timeout_ms must stop, naming the scheduler.
// - [Barriers] BarrierRequest{group "workers"|"servers"|"all", sequence} -> BarrierRelease{
//   group, sequence} to every member once all members asked for that sequence.
// - [Declarations] Workers: DeclareTensor{name, element_count, dtype} -> DeclareReply to
//   every worker once all declared it: ok with tensor_id (completion order),
//   partition_elements and partition_server[] (servers get it first), or ok=false with the
//   error (mismatch, declare timeout, bad values).
// - [StrategyControl] Workers: LinkProbeReport once at start (their measured links to every
//   server): kept, printed as one table once every worker reported, used by --strategy=auto.
//   On SIGHUP (strategy file reloaded), or once every worker sent its ProfileReport under
//   --strategy=auto: StrategyPrepare{version} to every worker; once all answered
//   StrategyPrepareReply, StrategyCommit to every server, then every worker (--strategy=auto
//   writes that strategy to --plan_out and logs why each tensor got its option). From a
//   server, LinkProbeReport, StrategyPrepareReply or RatioReport gets Error. Workers send a
//   RatioReport per complete window of a tensor whose entry adapts its ratio; a change of the
//   ratio is prepared and committed the same way (adaptive_ratio.h).
// - [Registration, LocalRelay] Workers name their machine in Register (machine, default
//   hostname; optional local rank and local size). Topology carries local_rank/local_size/
//   local_root and the pushers. With config.hierarchical, a machine's local root sends
//   LocalCommunicator{kind, id}, at most one of each kind ("host", and "nccl" when its local
//   ranks have GPUs); the scheduler checks each and relays it to the machine's other local
//   ranks (local_groups.h).
// - [Liveness] Workers: WorkerDone when finished. Once all did, servers get Shutdown{
//   job_done} and the scheduler exits 0. Any node may send Shutdown{reason} (with its token):
//   everyone else gets Shutdown, exit non-zero.
// - A node must stop when it receives Shutdown (non-zero unless job_done). Malformed frames,
//   messages before Register, messages without the node's token, messages beyond the job's
//   limits and messages the scheduler does not take get an Error reply; an Error is logged,
//   never answered. Every refusal is counted and logged with a per-peer rate limit.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bytecomp/common/refusal_log.h"
#include "bytecomp/common/socket_security.h"
#include "bytecomp/scheduler/auto_planner.h"
#include "bytecomp/scheduler/control_router.h"
#include "bytecomp/scheduler/outbox.h"
#include "cluster_config.pb.h"
#include "control.pb.h"
#include "zmq.hpp"

namespace bytecomp {

class StatusService;  // src/status_service.h

struct SchedulerOptions {
  // The effective configuration (defaults applied); Create validates it.
  proto::ClusterConfig config;
  // Interface to bind; the port comes from `port`, or from config.scheduler_address if < 0.
  // Empty: every interface with a cluster key (config.key_file) or allow_insecure, else
  // loopback; without either a host that is not loopback is refused (socket_security.h).
  std::string bind_host;
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
  // PlannerOptions file (codecs, max_loss, the codecs accepted per tensor: allowed, ...);
  // empty: the defaults.
  std::string plan_options_path;
  // Where the planned strategy is written (StrategyControl); empty: DefaultPlanOut().
  std::string plan_out_path;
  int profile_rounds = 5;
  // Where the planned cluster's worker and server links come from (auto_planner.h).
  PlanLinks plan_links = PlanLinks::kMeasured;
  // host:port of the status page and /metrics (empty: none). Binds loopback unless it names
  // another address.
  std::string http_address;
};

class Scheduler {
 public:
  // Validates the config, loads the strategy (and --strategy=auto's inputs) and binds the
  // ROUTER socket. The error names the address on a failed bind. The registration deadline
  // counts from here.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(SchedulerOptions options);
  ~Scheduler();

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // The bound TCP port.
  int port() const { return port_; }

  // Serves the job until it ends. Returns OK when every worker sent WorkerDone (servers were
  // told to shut down); otherwise an error saying why the job stopped: a node failed
  // (Unavailable), registration did not complete in time (DeadlineExceeded), the workers
  // could not be grouped by machine (FailedPrecondition), a node asked for shutdown
  // (Aborted), or Stop/StopForSignal was called (Cancelled). Call at most once.
  absl::Status Run();

  // Ask Run to send Shutdown to every node and return. Thread-safe.
  void Stop();
  // Async-signal-safe: Run sends Shutdown{"scheduler received SIGTERM"} and returns.
  void StopForSignal(int signal_number);
  // Async-signal-safe (SIGHUP): ask Run to reload the strategy file. The job goes on.
  void RequestReload();
  // The status page's URL ("http://127.0.0.1:PORT"); empty without options.http_address.
  std::string status_url() const;
  // The signal passed to StopForSignal, or 0.
  int stop_signal() const { return stop_signal_.load(); }

 private:
  Scheduler(SchedulerOptions options, std::unique_ptr<zmq::context_t> context,
            std::unique_ptr<SocketSecurity> security, std::unique_ptr<zmq::socket_t> socket,
            int port, StrategyKeeper strategy, std::optional<AutoPlanInputs> auto_plan,
            int64_t start_ms);

  // One message from the ROUTER, [identity, ControlMessage]: parsed, then to the router.
  void HandleFrames(std::vector<zmq::message_t>& frames, int64_t now_ms, Outbox* out);
  // Sends what the protocols appended, logs the refusals, and records the end of the job.
  void Deliver(const Outbox& out);
  // Sends now, or, when the node's queue is full, keeps it in the node's backlog (in order).
  void Send(const std::string& identity, const proto::ControlMessage& message);
  absl::Status TrySend(const std::string& identity, const proto::ControlMessage& message);
  // Messages a registered node had no room for, sent in order as room frees (FlushBacklog,
  // every turn of the loop). Bounded: 4 x max_tensors + 10000 messages, then dropped, logged.
  struct Backlog {
    std::deque<proto::ControlMessage> messages;
    bool overflowed = false;
  };
  void Hold(Backlog& backlog, const std::string& identity, const proto::ControlMessage& message);
  void FlushBacklog();

  SchedulerOptions options_;
  const proto::ClusterConfig& config_;
  std::unique_ptr<zmq::context_t> context_;
  // The cluster key's CURVE and ZAP handler: after the context, before the socket it guards.
  std::unique_ptr<SocketSecurity> security_;
  std::unique_ptr<zmq::socket_t> socket_;
  int port_;

  // Written by Stop/StopForSignal/RequestReload on any thread; everything else below is
  // touched by the Run thread only.
  std::atomic<bool> stop_requested_{false};
  std::atomic<int> stop_signal_{0};
  std::atomic<bool> reload_requested_{false};
  bool ran_ = false;

  // The protocols, socket-free; this thread feeds them and sends what they answer.
  ControlRouter router_;

  // Malformed, unexpected, unauthenticated or out-of-bounds messages: counted, logged with a
  // per-peer rate limit, summed up when Run returns.
  RefusalLog refusals_;
  std::optional<absl::Status> final_status_;
  std::map<std::string, Backlog> backlog_;  // by routing id
  std::unique_ptr<StatusService> status_;   // with options.http_address
};

}  // namespace bytecomp
