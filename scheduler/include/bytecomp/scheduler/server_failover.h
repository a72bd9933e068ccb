// Server failover, the scheduler's side: a server registering afresh while the job runs
// (systemd's Restart=, bytecomp-run --restart, a restarted pod) is a replacement for its rank.
//
// - The rank's holder is lost already (Liveness: missed heartbeats): the newcomer takes the
//   rank over at once.
// - The holder is not lost yet: the registration waits (one per rank; a newer one supersedes
//   it), unanswered. Once Liveness declares the holder lost (heartbeat_timeout_ms of silence:
//   never sooner, so that a server that is only slow is not displaced) the newcomer takes over;
//   a holder still not lost heartbeat_timeout_ms + an interval after the newcomer came is
//   alive: two servers claim one rank, and the newcomer is refused.
// - Taking over (Registration::ReplaceServer): the node table holds the newcomer; it gets its
//   Topology (replaces_lost_server, the worker tokens, the strategies in use), every decided
//   declaration, and is watched from now on; every worker gets ServerReplaced{rank, address}
//   and pushes to it again what the lost server had not answered (the worker's PartitionSender
//   and FailoverReplay, the server's KeyStore say how no round is lost or summed twice).
// - No replacement within server_replacement_timeout_ms of the loss: the lost server's
//   partitions move to the surviving servers (Declarations::MoveOff), which get KeysMoved
//   first, then every worker; the rank is retired (a server registering for it is refused).
//   With no server left the job ends, naming the lost one.
// Without failover (server_replacement_timeout_ms -1), or before the job is complete, a
// server's Register goes to Registration as ever.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/random/random.h"
#include "bytecomp/scheduler/declarations.h"
#include "bytecomp/scheduler/liveness.h"
#include "bytecomp/scheduler/node_table.h"
#include "bytecomp/scheduler/outbox.h"
#include "bytecomp/scheduler/registration.h"
#include "cluster_config.pb.h"
#include "control.pb.h"

namespace bytecomp {

class ServerFailover {
 public:
  ServerFailover(const proto::ClusterConfig& config, const NodeTable& nodes,
                 Registration* registration, Declarations* declarations, Liveness* liveness);

  // Whether `reg` is this protocol's: a server registering afresh in a running job (every
  // node registered, not a takeover), with failover on.
  bool Takes(const proto::Register& reg) const;
  // Whether `identity` is a replacement waiting for its rank: what else it sends (a clock
  // probe) waits for the takeover, unanswered.
  bool Waits(const std::string& identity) const;
  void HandleRegister(const std::string& identity, const proto::Register& reg, int64_t now_ms,
                      Outbox* out);
  // Waiting replacements: takes over for a holder silent long enough, refuses one whose
  // holder stays alive. Lost servers past the grace period: their keys move.
  void OnTime(int64_t now_ms, Outbox* out);
  // When OnTime has something to look at next; nullopt when no replacement waits.
  std::optional<int64_t> NextDeadline() const;

 private:
  struct Waiting {
    std::string identity;
    proto::Register reg;
    int64_t since_ms = 0;
    int64_t next_check_ms = 0;
  };
  // Takes the rank over when its holder is lost or silent long enough; true when done (taken
  // over or refused), false while it still waits.
  bool TryTakeOver(int rank, const Waiting& waiting, int64_t now_ms, Outbox* out);
  int64_t CheckEveryMs() const;
  // The grace period of lost server `rank` ended: its keys move to the survivors.
  void MoveKeysOff(int rank, Outbox* out);

  const proto::ClusterConfig& config_;
  const NodeTable& nodes_;
  Registration& registration_;
  Declarations& declarations_;
  Liveness& liveness_;
  std::map<int, Waiting> waiting_;  // by server rank
  absl::BitGen random_;             // epochs
};

}  // namespace bytecomp
