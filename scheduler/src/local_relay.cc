#include "bytecomp/scheduler/local_relay.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/logging.h"

namespace bytecomp {
namespace {

constexpr size_t kNcclIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
constexpr size_t kMaxIdBytes = 1024;

}  // namespace

void LocalRelay::Handle(const RegisteredNode& node, const proto::LocalCommunicator& comm,
                        Outbox* out) {
  const std::string name = NodeTable::Name(node);
  auto refuse = [&](const std::string& why) {
    out->Refuse(node.identity, absl::StrCat("LocalCommunicator refused: ", why),
                absl::StrCat("LocalCommunicator from ", name, " refused: ", why));
  };
  if (node.role != proto::ROLE_WORKER) return refuse(absl::StrCat(name, " is not a worker"));
  if (!config_.hierarchical()) {
    return refuse("the job is not hierarchical (ClusterConfig.hierarchical)");
  }
  const LocalAssignment* local = nodes_.local();
  if (local == nullptr) return refuse("sent before the topology");
  const int local_rank = local->local_rank[node.rank];
  const int local_size = local->local_size[node.rank];
  const std::string& machine = node.slot.machine;
  if (local_rank != 0 || local_size < 2) {
    return refuse(absl::StrCat(name, " is local rank ", local_rank, " of ", local_size,
                               " on machine '", machine,
                               "'; only the local root of a machine with more than one worker "
                               "sends one"));
  }
  if (comm.kind() != "host" && comm.kind() != "nccl") {
    return refuse(absl::StrCat("unknown kind '", comm.kind(), "' (valid: host, nccl)"));
  }
  if (comm.id().empty() || comm.id().size() > kMaxIdBytes ||
      (comm.kind() == "nccl" && comm.id().size() != kNcclIdBytes)) {
    return refuse(absl::StrCat("a ", comm.kind(), " id of ", comm.id().size(), " bytes (expected ",
                               comm.kind() == "nccl" ? "128" : "1 to 1024", ")"));
  }
  auto [it, added] = relayed_.emplace(std::make_pair(machine, comm.kind()), comm.id());
  if (!added) {
    if (it->second != comm.id()) {
      refuse(absl::StrCat("machine '", machine, "' already has a different ", comm.kind(),
                          " local communicator"));
    }
    return;  // a repeat: the local ranks have it already
  }
  proto::ControlMessage relay;
  *relay.mutable_local_communicator() = comm;
  for (const std::vector<int>& members : local->machines) {
    if (members.front() != node.rank) continue;
    for (size_t lr = 1; lr < members.size(); ++lr) {
      out->Send(nodes_.At(proto::ROLE_WORKER, members[lr])->identity, relay);
    }
  }
  BC_LOG_DEBUG("relayed the ", comm.kind(), " communicator of machine '", machine, "' to ",
               local_size - 1, " local ranks");
}

}  // namespace bytecomp
