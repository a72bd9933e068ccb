// A restarted scheduler takes the running job up. The nodes hold the job's state, so the
// scheduler keeps no journal: when it comes back on the same address, every node's next
// message gets Error{not_registered}, and each rejoins (Register.rejoining with its rank and
// token, then a rejoin report from its RejoinRecord: the declarations it was answered, the
// strategy committed to it, a prepare still open, the barriers released to it). Once all W
// workers and S servers are in and reported (Registration, within connect_timeout_ms like a
// first registration), TakeOver:
// - restores the declarations (the union of what the nodes report; they must agree on each
//   tensor's id and partitions, and this scheduler must place them the same way: its config
//   is the job's) and sends each server the ones it lacks;
// - takes the highest strategy version any node has as the one in force, and commits it to
//   every node that lacks it or holds a prepare (a switch the old scheduler did not finish:
//   if any node had the commit, everyone gets it; else the held rounds go on under the
//   strategy in force), servers first;
// - marks the barriers released to any node as released;
// - tells every node Rejoined; the nodes then send again what the old scheduler left
//   unanswered (declarations, barrier requests, reports, WorkerDone).
// The data plane does not wait for any of this: workers and servers go on with the rounds of
// declared tensors while no scheduler is there, as long as it comes back within the nodes'
// scheduler_timeout_ms. Not restored: the adaptive-ratio windows (they start over) and a
// --strategy=auto plan in progress (the workers' profiles are sent again, and it plans).
#pragma once

#include <map>

#include "bytecomp/scheduler/barriers.h"
#include "bytecomp/scheduler/declarations.h"
#include "bytecomp/scheduler/node_table.h"
#include "bytecomp/scheduler/outbox.h"
#include "bytecomp/scheduler/strategy_control.h"
#include "control.pb.h"

namespace bytecomp {

// Every node rejoined (`rejoins`: what each reported). False when the reports cannot be
// taken up (the nodes disagree, or this scheduler's config is not the job's): then the job
// ends, every node told why.
bool TakeOver(const std::map<RoleRank, proto::Rejoin>& rejoins, const NodeTable& nodes,
              Declarations& declarations, StrategyControl& strategy, Barriers& barriers,
              Outbox* out);

}  // namespace bytecomp
