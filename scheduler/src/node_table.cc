#include "bytecomp/scheduler/node_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace bytecomp {

std::string RoleName(proto::Role role) {
  switch (role) {
    case proto::ROLE_WORKER:
      return "worker";
    case proto::ROLE_SERVER:
      return "server";
    case proto::ROLE_SCHEDULER:
      return "scheduler";
    default:
      return absl::StrCat("role ", static_cast<int>(role));
  }
}

NodeTable::NodeTable(int num_workers, int num_servers)
    : workers_(num_workers), servers_(num_servers) {}

std::vector<RegisteredNode>& NodeTable::ByRole(proto::Role role) {
  return role == proto::ROLE_WORKER ? workers_ : servers_;
}

const std::vector<RegisteredNode>* NodeTable::ByRole(proto::Role role) const {
  if (role == proto::ROLE_WORKER) return &workers_;
  if (role == proto::ROLE_SERVER) return &servers_;
  return nullptr;
}

const RegisteredNode* NodeTable::Find(const std::string& identity) const {
  auto it = by_identity_.find(identity);
  return it == by_identity_.end() ? nullptr : At(it->second.first, it->second.second);
}

const RegisteredNode* NodeTable::FindByToken(const NodeToken& token) const {
  for (const RegisteredNode* node : Registered()) {
    if (SameToken(node->token, token)) return node;
  }
  return nullptr;
}

const RegisteredNode* NodeTable::At(proto::Role role, int rank) const {
  const std::vector<RegisteredNode>* by_rank = ByRole(role);
  if (by_rank == nullptr || rank < 0 || rank >= static_cast<int>(by_rank->size())) return nullptr;
  const RegisteredNode& node = (*by_rank)[rank];
  return node.identity.empty() ? nullptr : &node;
}

std::vector<const RegisteredNode*> NodeTable::Registered() const {
  std::vector<const RegisteredNode*> out;
  for (const auto* by_rank : {&workers_, &servers_}) {
    for (const RegisteredNode& node : *by_rank) {
      if (!node.identity.empty()) out.push_back(&node);
    }
  }
  return out;
}

std::vector<std::string> NodeTable::WorkerIdentities() const {
  std::vector<std::string> out;
  for (const RegisteredNode& node : workers_) {
    if (!node.identity.empty()) out.push_back(node.identity);
  }
  return out;
}

std::vector<std::string> NodeTable::ServerIdentities() const {
  std::vector<std::string> out;
  for (const RegisteredNode& node : servers_) {
    if (!node.identity.empty()) out.push_back(node.identity);
  }
  return out;
}

std::vector<std::string> NodeTable::AllIdentities() const {
  std::vector<std::string> out = WorkerIdentities();
  for (std::string& id : ServerIdentities()) out.push_back(std::move(id));
  return out;
}

std::vector<SlotRequest> NodeTable::WorkerSlots() const {
  std::vector<SlotRequest> out;
  for (const RegisteredNode& node : workers_) {
    if (!node.identity.empty()) out.push_back(node.slot);
  }
  return out;
}

std::vector<SlotRequest> NodeTable::WorkerSlotsOn(const std::string& machine) const {
  std::vector<SlotRequest> out;
  auto it = workers_by_machine_.find(machine);
  if (it == workers_by_machine_.end()) return out;
  for (int rank : it->second) out.push_back(workers_[rank].slot);
  std::sort(out.begin(), out.end(),
            [](const SlotRequest& a, const SlotRequest& b) { return a.rank < b.rank; });
  return out;
}

std::string NodeTable::Missing() const {
  std::vector<std::string> parts;
  for (const auto& [role, by_rank] :
       {std::pair<std::string, const std::vector<RegisteredNode>*>{"worker", &workers_},
        {"server", &servers_}}) {
    std::vector<int> missing;
    for (int r = 0; r < static_cast<int>(by_rank->size()); ++r) {
      if ((*by_rank)[r].identity.empty()) missing.push_back(r);
    }
    if (missing.empty()) continue;
    parts.push_back(absl::StrCat(
        role, missing.size() == 1 ? " rank " : " ranks ", absl::StrJoin(missing, ", "), " (",
        by_rank->size() - missing.size(), " of ", by_rank->size(), " ", role, "s registered)"));
  }
  return absl::StrJoin(parts, "; ");
}

std::string NodeTable::Name(const RegisteredNode& node) {
  return absl::StrCat(RoleName(node.role), " ", node.rank);
}

absl::Status NodeTable::Add(RegisteredNode node) {
  if (node.role != proto::ROLE_WORKER && node.role != proto::ROLE_SERVER) {
    return absl::InvalidArgumentError(absl::StrCat("a ", RoleName(node.role), " cannot register"));
  }
  std::vector<RegisteredNode>& by_rank = ByRole(node.role);
  const std::string name = Name(node);
  if (node.rank < 0 || node.rank >= static_cast<int>(by_rank.size())) {
    return absl::InvalidArgumentError(absl::StrCat(name, " is out of range"));
  }
  if (!by_rank[node.rank].identity.empty()) {
    return absl::AlreadyExistsError(absl::StrCat(name, " is registered already"));
  }
  if (node.identity.empty() || by_identity_.contains(node.identity)) {
    return absl::AlreadyExistsError(
        absl::StrCat(name, ": its identity is empty or registered already"));
  }
  by_identity_[node.identity] = {node.role, node.rank};
  if (node.role == proto::ROLE_WORKER) workers_by_machine_[node.slot.machine].push_back(node.rank);
  by_rank[node.rank] = std::move(node);
  return absl::OkStatus();
}

absl::Status NodeTable::MoveConnection(proto::Role role, int rank, const std::string& identity) {
  const RegisteredNode* found = At(role, rank);
  if (found == nullptr) {
    return absl::NotFoundError(absl::StrCat(RoleName(role), " ", rank, " is not registered"));
  }
  if (identity.empty() || by_identity_.contains(identity)) {
    return absl::AlreadyExistsError(
        absl::StrCat(Name(*found), ": the new connection's identity is empty or another node's"));
  }
  RegisteredNode& node = ByRole(role)[rank];
  by_identity_.erase(node.identity);
  node.identity = identity;
  by_identity_[identity] = {role, rank};
  return absl::OkStatus();
}

absl::Status NodeTable::Replace(RegisteredNode node) {
  const RegisteredNode* old = At(node.role, node.rank);
  if (old == nullptr) {
    return absl::NotFoundError(absl::StrCat(Name(node), " is not registered: nothing to replace"));
  }
  if (node.identity.empty() || by_identity_.contains(node.identity)) {
    return absl::AlreadyExistsError(
        absl::StrCat(Name(node), ": its identity is empty or registered already"));
  }
  RegisteredNode& slot = ByRole(node.role)[node.rank];
  by_identity_.erase(slot.identity);
  by_identity_[node.identity] = {node.role, node.rank};
  slot = std::move(node);
  return absl::OkStatus();
}

}  // namespace bytecomp
