// Tensor declarations: every worker declares each tensor by name (DeclareTensor{name,
// element_count, dtype}); once all W did, every worker gets one DeclareReply. When they
// agree it is ok, with the tensor id (completion order: the same on every worker, whatever
// order each declared in) and the partitions' servers (PartitionAssigner), and every server
// gets it first, to validate pushes. When they disagree, or when a worker has not declared
// within declare_timeout_ms of the first, it is an error naming the workers; a failed
// declaration takes no tensor id. A worker that declares a decided tensor again (or late)
// gets the decided reply, alone; a bad declaration (not a worker, empty name, unknown dtype,
// no elements, a change of a worker's own declaration) gets an error reply, alone.
// Bounds (common/declaration_limits.h): a name longer than max_tensor_name_bytes, or a new
// name beyond max_tensors names, is refused alone and kept nowhere; a tensor that would take
// the job beyond max_tensors, max_declared_bytes or kMaxJobPartitions fails for every worker,
// before its partitions are placed.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bytecomp/common/declaration_limits.h"
#include "bytecomp/common/partition_assigner.h"
#include "bytecomp/scheduler/node_table.h"
#include "bytecomp/scheduler/outbox.h"
#include "cluster_config.pb.h"
#include "control.pb.h"

namespace bytecomp {

class Declarations {
 public:
  Declarations(const proto::ClusterConfig& config, const NodeTable& nodes);

  void Handle(const RegisteredNode& node, const proto::DeclareTensor& declare, int64_t now_ms,
              Outbox* out);
  // A restarted scheduler taking the job up (takeover.h): the declarations decided ok before,
  // by tensor id, as the nodes reported them. Each is placed again in id order, which gives
  // the same partitions when the job's config is the same (the assignment is deterministic);
  // a different result, or a reply that does not validate, is an error and nothing is kept.
  // Later declarations get ids after the highest; a worker that declares a restored tensor
  // (again) gets its reply.
  absl::Status Restore(const std::vector<proto::DeclareReply>& decided);
  // The declarations decided ok, in tensor id order: what a replacement server must know
  // before the workers push to it (server_failover.h).
  std::vector<proto::DeclareReply> Decided() const;
  // Server failover, no replacement: every partition placed on server `lost` moves to one of
  // `survivors` (in turn, partition by partition), and so do the partitions of tensors decided
  // later. Returns the decided declarations that changed, updated.
  std::vector<proto::DeclareReply> MoveOff(int lost, const std::vector<int>& survivors);
  // Fails the declarations whose workers did not all declare in time.
  void OnTime(int64_t now_ms, Outbox* out);
  // When OnTime has something to do next; nullopt when no declaration is waiting.
  std::optional<int64_t> NextDeadline() const;

 private:
  // One tensor name's declarations, per worker rank, until all workers declared it.
  struct Declaration {
    std::map<int, proto::DeclareTensor> by_worker;
    int64_t first_ms = 0;
    std::optional<proto::DeclareReply> reply;  // set once decided (ok or not)
  };

  void Complete(const std::string& name, Declaration& decl, Outbox* out);
  // Records the decision and sends it: to the servers first when ok, then to every worker.
  void Decide(Declaration& decl, proto::DeclareReply reply, Outbox* out);

  const proto::ClusterConfig& config_;
  const NodeTable& nodes_;
  PartitionAssigner assigner_;
  DeclarationBudget budget_;                         // the tensors decided ok
  std::map<std::string, Declaration> declarations_;  // by tensor name
  std::set<std::string> undecided_;                  // names still waiting for workers
  uint32_t next_tensor_id_ = 0;
  // Servers whose partitions moved (MoveOff): rank -> the survivors they went to.
  std::map<int, std::vector<int>> moved_off_;
  size_t next_survivor_ = 0;
  // Moves the reply's partitions off the servers in moved_off_; true when one moved.
  bool Remap(proto::DeclareReply* reply);
};

}  // namespace bytecomp
