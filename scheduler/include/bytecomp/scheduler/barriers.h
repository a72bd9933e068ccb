// Barriers: BarrierRequest{group, sequence} from every member of a group ("workers",
// "servers" or "all") -> BarrierRelease{group, sequence} to each of them. Sequences of a
// group are independent of each other. Membership is known only once every node registered,
// so requests that come earlier wait for the topology (ReleaseWaiting). A repeated request
// for a sequence already released is released again, to that node alone.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "bytecomp/scheduler/node_table.h"
#include "bytecomp/scheduler/outbox.h"
#include "control.pb.h"

namespace bytecomp {

class Barriers {
 public:
  explicit Barriers(const NodeTable& nodes) : nodes_(nodes) {}

  // An unknown group, or a group `node` is not a member of, gets an Error.
  void Handle(const RegisteredNode& node, const proto::BarrierRequest& request, Outbox* out);
  // The topology went out: releases what was asked for before it, where complete.
  void ReleaseWaiting(Outbox* out);
  // A restarted scheduler taking the job up (takeover.h): `group`'s sequences up to
  // `sequence` were released (to some node at least) by the scheduler before; a node that asks
  // for one again gets it released at once.
  void RestoreReleased(const std::string& group, uint64_t sequence);

 private:
  struct Group {
    std::map<uint64_t, std::set<RoleRank>> waiting;  // sequence -> the nodes asking
    std::set<uint64_t> released;
    uint64_t released_through = 0;  // and every sequence up to this one (a takeover)
  };

  // The number of members, or -1 for an unknown group.
  int GroupSize(const std::string& group) const;
  void TryRelease(const std::string& group_name, Group& group, uint64_t sequence, Outbox* out);

  const NodeTable& nodes_;
  absl::flat_hash_map<std::string, Group> groups_;  // by name
};

}  // namespace bytecomp
