// The nodes of the job, as they registered: by routing identity, by token and by role and
// rank, and, once every node is in, the workers' grouping by machine. A node's identity is
// that of the connection it was last heard on with its token (MoveConnection). The
// ControlRouter owns the one table; Registration is its only writer (it alone gets the table
// by pointer); every other protocol reads it through a const reference.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "bytecomp/common/node_token.h"
#include "bytecomp/scheduler/local_groups.h"
#include "control.pb.h"

namespace bytecomp {

// "worker", "server", "scheduler", or "role N".
std::string RoleName(proto::Role role);

// A node as (role, rank): what stays when its connection (identity) changes.
using RoleRank = std::pair<proto::Role, int>;

struct RegisteredNode {
  std::string identity;  // ZeroMQ routing id of the node's DEALER
  proto::Role role = proto::ROLE_UNKNOWN;
  int rank = -1;
  std::string data_address;  // servers: where workers connect
  std::string hostname;
  int pid = 0;
  SlotRequest slot;  // workers: machine and local rank/size asked for
  // The token the node registered with: every later message from it must carry it.
  NodeToken token;
  // Register.data_key: what the node seals its data messages with (empty: nothing sealed).
  std::string data_key;

  RoleRank role_rank() const { return {role, rank}; }
};

class NodeTable {
 public:
  NodeTable(int num_workers, int num_servers);

  int num_workers() const { return static_cast<int>(workers_.size()); }
  int num_servers() const { return static_cast<int>(servers_.size()); }
  // Nodes registered so far.
  int size() const { return static_cast<int>(by_identity_.size()); }
  // Every worker and server rank is taken: the job is complete and the topology went out.
  bool all_registered() const { return size() == num_workers() + num_servers(); }

  // nullptr when no node registered with that identity.
  const RegisteredNode* Find(const std::string& identity) const;
  // The node that registered with `token`; nullptr when none did.
  const RegisteredNode* FindByToken(const NodeToken& token) const;
  // The node holding (role, rank); nullptr when the rank is free or out of range.
  const RegisteredNode* At(proto::Role role, int rank) const;
  // Every registered node: workers by rank, then servers by rank.
  std::vector<const RegisteredNode*> Registered() const;
  // Identities of the registered workers, servers, or both (workers first), by rank.
  std::vector<std::string> WorkerIdentities() const;
  std::vector<std::string> ServerIdentities() const;
  std::vector<std::string> AllIdentities() const;
  // The machine slots of the registered workers, by rank.
  std::vector<SlotRequest> WorkerSlots() const;
  // Those of the registered workers on `machine` (SlotRequest.machine), by rank.
  std::vector<SlotRequest> WorkerSlotsOn(const std::string& machine) const;
  // The ranks not yet registered, e.g. "worker ranks 0, 2 (1 of 3 workers registered);
  // server rank 1 (1 of 2 servers registered)"; empty when all are in.
  std::string Missing() const;
  // The workers' local ranks, set with the topology; nullptr before.
  const LocalAssignment* local() const { return local_ ? &*local_ : nullptr; }

  // "worker 3", "server 0".
  static std::string Name(const RegisteredNode& node);

  // Writes (Registration only). Add fails, adding nothing, unless `node` is a worker or
  // server whose rank is free and in range and whose identity is new and not empty.
  absl::Status Add(RegisteredNode node);
  void SetLocal(LocalAssignment local) { local_ = std::move(local); }
  // The registered node (role, rank) is now reached on the connection `identity` (a TCP
  // reconnect gives a DEALER a new routing id): fails, changing nothing, when that rank is
  // free or `identity` is empty or another node's.
  absl::Status MoveConnection(proto::Role role, int rank, const std::string& identity);
  // Server failover: `node` (a server) takes the place of the registered node of its rank,
  // which was lost; the old node's connection and token count for nobody from now on.
  absl::Status Replace(RegisteredNode node);

 private:
  std::vector<RegisteredNode>& ByRole(proto::Role role);
  const std::vector<RegisteredNode>* ByRole(proto::Role role) const;

  // By rank; a free rank has an empty identity. Sized once, so pointers stay valid.
  std::vector<RegisteredNode> workers_;
  std::vector<RegisteredNode> servers_;
  absl::flat_hash_map<std::string, RoleRank> by_identity_;
  // Registered workers' ranks by machine, in the order they registered.
  absl::flat_hash_map<std::string, std::vector<int>> workers_by_machine_;
  std::optional<LocalAssignment> local_;
};

}  // namespace bytecomp
