// Registration and topology: nodes register, get their ranks, and once all W workers and S
// servers are in, each gets the Topology (ranks, servers' data addresses, the effective
// config, the strategy in force, local ranks and the pushers).
//
// Refused registrations get Error{"registration rejected: ..."}: a connection registering
// twice, a role other than worker or server, a full job, a server data address that is not
// tcp://host:port, a rank taken or out of range, or a machine slot that does not fit the
// workers already on that machine (local_groups.h). A refused node may try again.
#pragma once

#include <cstdint>
#include <string>

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
  Registration(const proto::ClusterConfig& config, NodeTable* nodes,
               const StrategyKeeper& strategy, int64_t start_ms);

  // A Register from `identity`, registered or not. True when this registration completed
  // the job and the topology went to every node; the scheduler then starts what waited for
  // it (barriers asked for early, heartbeat monitoring). When the workers cannot be grouped
  // by machine, the job ends instead (FailedPrecondition) and this returns false.
  bool Handle(const std::string& identity, const proto::Register& reg, int64_t now_ms,
              Outbox* out);

 private:
  bool SendTopology(int64_t now_ms, Outbox* out);

  const proto::ClusterConfig& config_;
  NodeTable& nodes_;
  const StrategyKeeper& strategy_;
  int64_t start_ms_;
};

}  // namespace bytecomp
