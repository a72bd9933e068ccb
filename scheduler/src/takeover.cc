#include "bytecomp/scheduler/takeover.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/common/refusal_log.h"

namespace bytecomp {
namespace {

bool SameDeclaration(const proto::DeclareReply& a, const proto::DeclareReply& b) {
  return a.tensor_id() == b.tensor_id() && a.element_count() == b.element_count() &&
         a.dtype() == b.dtype() && a.partition_elements() == b.partition_elements() &&
         a.row_elements() == b.row_elements() &&
         std::equal(a.partition_server().begin(), a.partition_server().end(),
                    b.partition_server().begin(), b.partition_server().end());
}

proto::ControlMessage Commit(const proto::Strategy& strategy) {
  proto::ControlMessage m;
  *m.mutable_strategy_commit()->mutable_strategy() = strategy;
  return m;
}

}  // namespace

bool TakeOver(const std::map<RoleRank, proto::Rejoin>& rejoins, const NodeTable& nodes,
              Declarations& declarations, StrategyControl& strategy, Barriers& barriers,
              Outbox* out) {
  auto fail = [&](const std::string& why) {
    const std::string reason =
        absl::StrCat("the restarted scheduler cannot take the job up: ", why);
    BC_LOG_ERROR(reason);
    out->EndJob(absl::FailedPreconditionError(reason), reason, nodes.AllIdentities());
    return false;
  };

  // Declarations: the union of what the nodes were answered, which must agree.
  std::map<std::string, proto::DeclareReply> by_name;
  std::map<uint32_t, std::string> name_by_id;
  for (const auto& [who, report] : rejoins) {
    for (const proto::DeclareReply& reply : report.declarations()) {
      auto [it, added] = by_name.try_emplace(reply.name(), reply);
      auto [id_it, id_added] = name_by_id.try_emplace(reply.tensor_id(), reply.name());
      if ((!added && !SameDeclaration(it->second, reply)) ||
          (!id_added && id_it->second != reply.name())) {
        return fail(absl::StrCat("the nodes disagree on tensor '", Printable(reply.name(), 64),
                                 "' (id ", reply.tensor_id(), ")"));
      }
    }
  }
  std::vector<proto::DeclareReply> decided;
  for (const auto& [id, name] : name_by_id) decided.push_back(by_name.at(name));
  if (absl::Status s = declarations.Restore(decided); !s.ok())
    return fail(std::string(s.message()));

  // The strategy in force: the highest version any node has.
  proto::Strategy in_force;
  for (const auto& [who, report] : rejoins) {
    if (report.strategy().version() > in_force.version()) in_force = report.strategy();
  }
  strategy.Restore(in_force);

  std::vector<std::string> lagging_servers, lagging_workers;
  for (const RegisteredNode* node : nodes.Registered()) {
    const proto::Rejoin& report = rejoins.at(node->role_rank());
    if (node->role == proto::ROLE_SERVER) {
      std::set<std::string> has;
      for (const proto::DeclareReply& reply : report.declarations()) has.insert(reply.name());
      for (const proto::DeclareReply& reply : decided) {
        if (has.contains(reply.name())) continue;
        proto::ControlMessage m;
        *m.mutable_declare_reply() = reply;
        out->Send(node->identity, std::move(m));
      }
    }
    if (report.strategy().version() < in_force.version() || report.prepared_version() != 0) {
      (node->role == proto::ROLE_SERVER ? lagging_servers : lagging_workers)
          .push_back(node->identity);
    }
  }
  // Servers first, as any commit: they check every push against the version it names.
  for (const std::string& id : lagging_servers) out->Send(id, Commit(in_force));
  for (const std::string& id : lagging_workers) out->Send(id, Commit(in_force));

  std::map<std::string, uint64_t> released;
  for (const auto& [who, report] : rejoins) {
    for (const proto::BarrierRelease& r : report.released()) {
      released[r.group()] = std::max(released[r.group()], r.sequence());
    }
  }
  for (const auto& [group, sequence] : released) barriers.RestoreReleased(group, sequence);

  proto::ControlMessage rejoined;
  rejoined.mutable_rejoined()->set_strategy_version(in_force.version());
  for (const std::string& id : nodes.AllIdentities()) out->Send(id, rejoined);
  BC_LOG_INFO("took the running job up: ", decided.size(), " declared tensors, strategy version ",
              in_force.version(),
              lagging_servers.size() + lagging_workers.size() > 0
                  ? absl::StrCat(" (committed again to ",
                                 lagging_servers.size() + lagging_workers.size(), " nodes)")
                  : std::string());
  return true;
}

}  // namespace bytecomp
