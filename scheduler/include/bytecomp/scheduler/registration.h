// Registration and topology: nodes register, get their ranks, and once all W workers and S
// servers are in, each gets the Topology (ranks, servers' data addresses, the effective
// config, the strategy in force, local ranks and the pushers).
//
// Refused registrations get Error{"registration rejected: ..."}: a connection registering
// twice, a role other than worker or server, a full job, a server data address that is not
// tcp://host:port, a rank taken or out of range, or a machine slot that does not fit the
// workers already on that machine (local_groups.h). A refused node may try again.
//
// A scheduler that restarted takes a running job up instead when its first registration is a
// rejoin (Register.rejoining): then only rejoins are taken, each for the rank and with the
// token the node had, each followed by the node's rejoin report; once every node is in and
// reported, no topology goes out (the nodes have it) and the scheduler restores the job from
// the reports (rejoins(), takeover.h). A scheduler whose first registration was fresh refuses
// rejoins and their reports.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "bytecomp/scheduler/node_table.h"
#include "bytecomp/scheduler/outbox.h"
#include "bytecomp/scheduler/strategy_keeper.h"
#include "cluster_config.pb.h"
#include "control.pb.h"

namespace bytecomp {

class Registration {
 public:
  // `nodes`: the scheduler's node table, which this protocol alone writes. `strategy`: the
  // strategy in force, sent with the topology. `start_ms`: when the scheduler started
  // listening (the log says how long registration took).
  Registration(const proto::ClusterConfig& config, NodeTable* nodes, const StrategyKeeper& strategy,
               int64_t start_ms);

  // A Register from `identity`, registered or not. True when this registration completed
  // the job and the topology went to every node (or, taking a job over, every node rejoined
  // and reported); the scheduler then starts what waited for it (barriers asked for early,
  // heartbeat monitoring, the takeover). When the workers cannot be grouped by machine, the
  // job ends instead (FailedPrecondition) and this returns false.
  bool Handle(const std::string& identity, const proto::Register& reg, int64_t now_ms, Outbox* out);
  // The rejoin report of `node`, which rejoined. True, as Handle, when it was the last one the
  // takeover waited for. Refused from a node of a fresh job; one sent again is ignored.
  bool HandleRejoinReport(const RegisteredNode& node, const proto::Rejoin& report, int64_t now_ms,
                          Outbox* out);
  // Taking a job over: every node is in, and a report still missing once connect_timeout_ms
  // passed since the start ends the job naming the nodes that did not report (Liveness ends it
  // for nodes not in).
  void OnTime(int64_t now_ms, Outbox* out);
  std::optional<int64_t> NextDeadline() const;
  // A message carrying the token of the registered `node` arrived on the connection
  // `identity`, which is no node's: the node reconnected (a TCP reconnect gives its DEALER a
  // new routing id, and ZeroMQ may drop the old connection much later, if ever). The node is
  // reached on `identity` from now on. The token alone decides: a connection that merely
  // reuses a node's routing id acts as no one. Returns the node as it now is.
  const RegisteredNode& MoveConnection(const std::string& identity, const RegisteredNode& node);

  // Server failover (server_failover.h): whether `reg`, from `identity`, could replace a lost
  // server (a fresh server Register with a token, a tcp data address, a rank in range or
  // none); the error says why not.
  absl::Status CheckReplacement(const std::string& identity, const proto::Register& reg) const;
  // `reg` takes server rank `rank` over (Liveness lost it): the node table holds it from now
  // on, and it gets its Topology (replaces_lost_server) with the strategy before the current
  // one, if any, then a StrategyCommit of the current one.
  // Its requests carry `epoch` (Topology.server_epoch).
  absl::Status ReplaceServer(const std::string& identity, const proto::Register& reg, int rank,
                             uint64_t epoch, Outbox* out);

  // Whether this scheduler takes a running job over (its first registration was a rejoin);
  // nullopt before any registration.
  std::optional<bool> takeover() const { return takeover_; }
  // What each rejoined node reported, by (role, rank).
  const std::map<RoleRank, proto::Rejoin>& rejoins() const { return rejoins_; }

 private:
  // Every node is in: the workers' local ranks (or the job ends, and false).
  bool GroupWorkers(Outbox* out);
  bool SendTopology(int64_t now_ms, Outbox* out);
  // Taking a job over: whether every node is in, grouped and reported, for the first time.
  bool TakeoverComplete(int64_t now_ms);
  // The Topology for registered node `n` (every node is registered and grouped).
  proto::ControlMessage TopologyFor(const RegisteredNode& n) const;

  const proto::ClusterConfig& config_;
  NodeTable& nodes_;
  const StrategyKeeper& strategy_;
  int64_t start_ms_;
  std::optional<bool> takeover_;
  std::map<RoleRank, proto::Rejoin> rejoins_;
  bool grouped_ = false;     // every node is in, and the workers are grouped by machine
  bool taken_over_ = false;  // TakeoverComplete said so
};

}  // namespace bytecomp
