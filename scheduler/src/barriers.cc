#include "bytecomp/scheduler/barriers.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/common/refusal_log.h"

namespace bytecomp {
namespace {

bool InGroup(const RegisteredNode& node, const std::string& group) {
  if (group == "all") return true;
  if (group == "workers") return node.role == proto::ROLE_WORKER;
  if (group == "servers") return node.role == proto::ROLE_SERVER;
  return false;
}

proto::ControlMessage Release(const std::string& group, uint64_t sequence) {
  proto::ControlMessage release;
  release.mutable_barrier_release()->set_group(group);
  release.mutable_barrier_release()->set_sequence(sequence);
  return release;
}

}  // namespace

int Barriers::GroupSize(const std::string& group) const {
  if (group == "workers") return nodes_.num_workers();
  if (group == "servers") return nodes_.num_servers();
  if (group == "all") return nodes_.num_workers() + nodes_.num_servers();
  return -1;
}

void Barriers::Handle(const RegisteredNode& node, const proto::BarrierRequest& request,
                      Outbox* out) {
  const std::string& group_name = request.group();
  if (GroupSize(group_name) < 0) {
    const std::string why = absl::StrCat("unknown barrier group '", Printable(group_name, 64),
                                         "'; valid: workers, servers, all");
    out->Refuse(node.identity, why, absl::StrCat(NodeTable::Name(node), ": ", why));
    return;
  }
  if (!InGroup(node, group_name)) {
    const std::string why =
        absl::StrCat(NodeTable::Name(node), " is not a member of barrier group '", group_name, "'");
    out->Refuse(node.identity, why, why);
    return;
  }
  Group& group = groups_[group_name];
  if (group.released.count(request.sequence()) > 0 ||
      (request.sequence() > 0 && request.sequence() <= group.released_through)) {
    out->Send(node.identity, Release(group_name, request.sequence()));
    return;
  }
  group.waiting[request.sequence()].insert(node.role_rank());
  TryRelease(group_name, group, request.sequence(), out);
}

void Barriers::RestoreReleased(const std::string& group, uint64_t sequence) {
  if (GroupSize(group) < 0) return;
  uint64_t& through = groups_[group].released_through;
  through = std::max(through, sequence);
}

void Barriers::ReleaseWaiting(Outbox* out) {
  for (auto& [group_name, group] : groups_) {
    std::vector<uint64_t> sequences;
    for (const auto& [sequence, waiting] : group.waiting) sequences.push_back(sequence);
    for (uint64_t sequence : sequences) TryRelease(group_name, group, sequence, out);
  }
}

void Barriers::TryRelease(const std::string& group_name, Group& group, uint64_t sequence,
                          Outbox* out) {
  if (!nodes_.all_registered()) return;  // membership is known only once everyone registered
  auto it = group.waiting.find(sequence);
  if (it == group.waiting.end()) return;
  if (static_cast<int>(it->second.size()) < GroupSize(group_name)) return;
  const proto::ControlMessage release = Release(group_name, sequence);
  // Each to the connection its node is on now (it may have reconnected while waiting).
  for (const auto& [role, rank] : it->second) out->Send(nodes_.At(role, rank)->identity, release);
  BC_LOG_DEBUG("barrier '", group_name, "' ", sequence, " released");
  group.waiting.erase(it);
  group.released.insert(sequence);
}

}  // namespace bytecomp
