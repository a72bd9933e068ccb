#include "bytecomp/scheduler/registration.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/common/net.h"
#include "bytecomp/common/refusal_log.h"
#include "bytecomp/common/sealed_messages.h"
#include "log_format.h"

namespace bytecomp {
namespace {

// A Register's hostname, machine and data address are logged, shown on the status page and
// relayed: bounded, and printable ASCII only (a newline in a hostname would write a line of
// the peer's choosing into the scheduler's log).
constexpr size_t kMaxRegisterText = 256;

// The data key a node must bring: 32 bytes (not all zero) where the job seals its data
// messages, none where it does not. A node whose data_protection differs from the job's is
// refused with the setting to change, rather than left to fail on its first push.
absl::Status CheckDataKey(const proto::ClusterConfig& job, const proto::Register& reg) {
  if (SealsDataFrames(job)) {
    if (reg.data_key().empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the job seals its data messages (data_protection: ", DataProtectionSetting(job),
          ") and this node brings no data key: it runs with data_protection: curve; give every "
          "node the job's data_protection (BYTECOMP_DATA_PROTECTION)"));
    }
    return DataKeyFromBytes(reg.data_key(), 0, "the Register").status();
  }
  if (!reg.data_key().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this node seals its data messages (it brings a data key) and the job does not (",
        job.key_file().empty() ? "no cluster key" : "data_protection: curve",
        "); give every node the job's data_protection (BYTECOMP_DATA_PROTECTION)"));
  }
  return absl::OkStatus();
}

absl::Status CheckRegisterText(const proto::Register& reg) {
  for (const auto& [field, text] :
       {std::pair<const char*, const std::string&>{"hostname", reg.hostname()},
        {"machine", reg.machine()},
        {"data_address", reg.data_address()}}) {
    if (text.size() > kMaxRegisterText) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " longer than ", kMaxRegisterText, " bytes (", text.size(), ")"));
    }
    for (const unsigned char c : text) {
      if (c < 0x20 || c > 0x7e) {
        return absl::InvalidArgumentError(absl::StrCat(field, " '", Printable(text, 64),
                                                       "' holds a byte outside printable ASCII"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

Registration::Registration(const proto::ClusterConfig& config, NodeTable* nodes,
                           const StrategyKeeper& strategy, int64_t start_ms)
    : config_(config), nodes_(*nodes), strategy_(strategy), start_ms_(start_ms) {}

const RegisteredNode& Registration::MoveConnection(const std::string& identity,
                                                   const RegisteredNode& node) {
  const proto::Role role = node.role;
  const int rank = node.rank;
  if (absl::Status s = nodes_.MoveConnection(role, rank, identity); !s.ok()) {
    // The caller looked the node up by token and found `identity` unknown: cannot happen.
    BC_LOG_WARNING("could not move ", NodeTable::Name(node), " to a new connection: ", s.message());
    return node;
  }
  const RegisteredNode& moved = *nodes_.At(role, rank);
  BC_LOG_INFO(NodeTable::Name(moved), " (pid ", moved.pid, " on ", Printable(moved.hostname, 64),
              ") is on a new connection; messages for it go there from now on");
  return moved;
}

bool Registration::Handle(const std::string& identity, const proto::Register& reg, int64_t now_ms,
                          Outbox* out) {
  auto reject = [&](const std::string& why) {
    proto::ControlMessage reply;
    reply.mutable_error()->set_message(absl::StrCat("registration rejected: ", why));
    reply.mutable_error()->set_registration_refused(true);
    out->Refuse(
        identity, std::move(reply),
        absl::StrCat("rejected registration of ", RoleName(reg.role()), " (pid ", reg.pid(), " on ",
                     reg.hostname().empty() ? "?" : Printable(reg.hostname(), 64), "): ", why));
    return false;
  };
  if (reg.rejoining()) {
    // A rejoin sent again (the node heard another not_registered before its first was
    // handled): the node is in already, perhaps on a new connection.
    // Looked up by the rank it names, not by searching every node's token.
    const std::optional<NodeToken> again = TokenFromBytes(reg.token());
    if (const RegisteredNode* known = nodes_.At(reg.role(), reg.requested_rank());
        known != nullptr && again.has_value() && SameToken(known->token, *again)) {
      if (known->identity != identity) MoveConnection(identity, *known);
      return false;
    }
  }
  if (const RegisteredNode* known = nodes_.Find(identity); known != nullptr) {
    return reject(absl::StrCat("this connection already registered as ", NodeTable::Name(*known)));
  }
  if (reg.rejoining() && takeover_ == false) {
    return reject(
        "this scheduler started a new job (nodes registered afresh): a node of another job "
        "cannot rejoin it");
  }
  if (!reg.rejoining() && takeover_ == true) {
    return reject(
        "this scheduler is taking a running job over (its nodes are rejoining): a new node "
        "cannot register");
  }
  if (reg.rejoining() && reg.requested_rank() < 0) {
    return reject("a rejoining node must name its rank");
  }
  if (reg.role() != proto::ROLE_WORKER && reg.role() != proto::ROLE_SERVER) {
    return reject(absl::StrCat("role must be worker or server, got ", RoleName(reg.role())));
  }
  const std::optional<NodeToken> token = TokenFromBytes(reg.token());
  if (!token.has_value()) {
    return reject(absl::StrCat("the Register carries no token (16 random bytes, not all zero; got ",
                               reg.token().size(), " bytes)"));
  }
  if (absl::Status s = CheckRegisterText(reg); !s.ok()) return reject(std::string(s.message()));
  if (absl::Status s = CheckDataKey(config_, reg); !s.ok()) return reject(std::string(s.message()));
  if (nodes_.all_registered()) {
    return reject(absl::StrCat("the job is full: all ", config_.num_workers(), " workers and ",
                               config_.num_servers(), " servers have registered"));
  }
  const bool is_worker = reg.role() == proto::ROLE_WORKER;
  SlotRequest slot;
  slot.machine = reg.machine().empty() ? reg.hostname() : reg.machine();
  // Local ranks matter (and are checked) only when machines reduce locally; otherwise they
  // are informational and the scheduler numbers each machine's workers in rank order. They are
  // checked against the job's size before anything is sized by them.
  if (config_.hierarchical()) {
    const int workers = config_.num_workers();
    if (reg.has_declared_local_size() &&
        (reg.declared_local_size() < 1 || reg.declared_local_size() > workers)) {
      return reject(absl::StrCat("declared local size ", reg.declared_local_size(),
                                 " (BYTECOMP_LOCAL_SIZE) is outside [1, ", workers,
                                 "]: the job has ", workers, " workers"));
    }
    if (reg.has_requested_local_rank() &&
        (reg.requested_local_rank() < 0 || reg.requested_local_rank() >= workers)) {
      return reject(absl::StrCat("requested local rank ", reg.requested_local_rank(),
                                 " (BYTECOMP_LOCAL_RANK) is outside [0, ", workers,
                                 "): the job has ", workers, " workers"));
    }
    if (reg.has_requested_local_rank()) slot.requested_local_rank = reg.requested_local_rank();
    if (reg.has_declared_local_size()) slot.declared_local_size = reg.declared_local_size();
  }
  const std::string role = RoleName(reg.role());
  if (!is_worker) {
    if (absl::StatusOr<HostPort> hp = ParseHostPort(reg.data_address()); !hp.ok()) {
      return reject(absl::StrCat("server data_address '", Printable(reg.data_address(), 64),
                                 "' is not tcp://host:port"));
    }
  }
  int rank = reg.requested_rank();
  const int count = is_worker ? nodes_.num_workers() : nodes_.num_servers();
  if (rank >= 0) {
    if (rank >= count) {
      return reject(absl::StrCat("requested ", role, " rank ", rank,
                                 " is out of range: the job has ", count, " ", role, "s (ranks 0..",
                                 count - 1, ")"));
    }
    if (const RegisteredNode* holder = nodes_.At(reg.role(), rank); holder != nullptr) {
      return reject(absl::StrCat("requested ", role, " rank ", rank, " is already taken by pid ",
                                 holder->pid, " on ", holder->hostname));
    }
  } else {
    rank = 0;
    while (rank < count && nodes_.At(reg.role(), rank) != nullptr) ++rank;
    if (rank == count) return reject(absl::StrCat("all ", count, " ", role, " ranks are taken"));
  }
  RegisteredNode node;
  if (is_worker) {
    slot.rank = rank;
    if (absl::Status s = CheckSlotRequest(nodes_.WorkerSlotsOn(slot.machine), slot); !s.ok()) {
      return reject(std::string(s.message()));
    }
    node.slot = slot;
  }
  node.identity = identity;
  node.role = reg.role();
  node.rank = rank;
  node.data_address = reg.data_address();
  node.hostname = reg.hostname();
  node.pid = reg.pid();
  node.token = *token;
  node.data_key = reg.data_key();
  const std::string registered = absl::StrCat(
      NodeTable::Name(node), " (pid ", node.pid, " on ",
      node.hostname.empty() ? "?" : node.hostname,
      node.data_address.empty() ? "" : absl::StrCat(", data ", node.data_address), ")");
  if (absl::Status s = nodes_.Add(std::move(node)); !s.ok())
    return reject(std::string(s.message()));
  takeover_ = reg.rejoining();
  BC_LOG_INFO(reg.rejoining() ? "rejoined " : "registered ", registered, "; ", nodes_.size(),
              " of ", config_.num_workers() + config_.num_servers(), " nodes");
  if (!nodes_.all_registered() || !GroupWorkers(out)) return false;
  grouped_ = true;
  // Taking a job over, the scheduler takes it up once every node also reported
  // (HandleRejoinReport); no topology goes out: the nodes have it.
  if (*takeover_) return TakeoverComplete(now_ms);
  return SendTopology(now_ms, out);
}

bool Registration::HandleRejoinReport(const RegisteredNode& node, const proto::Rejoin& report,
                                      int64_t now_ms, Outbox* out) {
  if (takeover_ != true) {
    out->Refuse(
        node.identity,
        "this scheduler started a new job (nodes registered afresh): it takes no rejoin "
        "report",
        absl::StrCat("rejoin report from ", NodeTable::Name(node), ", which registered afresh"));
    return false;
  }
  if (taken_over_) return false;  // sent again while the takeover was under way: it has it
  rejoins_[node.role_rank()] = report;
  return TakeoverComplete(now_ms);
}

std::optional<int64_t> Registration::NextDeadline() const {
  if (takeover_ != true || taken_over_ || !grouped_) return std::nullopt;
  return start_ms_ + config_.connect_timeout_ms();
}

void Registration::OnTime(int64_t now_ms, Outbox* out) {
  const std::optional<int64_t> due = NextDeadline();
  if (!due.has_value() || now_ms < *due) return;
  std::vector<std::string> silent;
  for (const RegisteredNode* node : nodes_.Registered()) {
    if (!rejoins_.contains(node->role_rank())) silent.push_back(NodeTable::Name(*node));
  }
  const std::string reason =
      absl::StrCat("the takeover did not complete within ", Seconds(config_.connect_timeout_ms()),
                   ": no rejoin report from ", absl::StrJoin(silent, ", "));
  BC_LOG_ERROR(reason);
  out->EndJob(absl::DeadlineExceededError(reason), reason, nodes_.AllIdentities());
}

bool Registration::TakeoverComplete(int64_t now_ms) {
  if (taken_over_ || !grouped_ || rejoins_.size() != static_cast<size_t>(nodes_.size()))
    return false;
  taken_over_ = true;
  BC_LOG_INFO("all ", config_.num_workers(), " workers and ", config_.num_servers(),
              " servers of the running job rejoined after ", Seconds(now_ms - start_ms_));
  return true;
}

absl::Status Registration::CheckReplacement(const std::string& identity,
                                            const proto::Register& reg) const {
  if (reg.role() != proto::ROLE_SERVER || reg.rejoining()) {
    return absl::InvalidArgumentError("only a server registering afresh can replace a lost one");
  }
  if (nodes_.Find(identity) != nullptr) {
    return absl::AlreadyExistsError(
        absl::StrCat("this connection is registered as ", NodeTable::Name(*nodes_.Find(identity))));
  }
  if (reg.requested_rank() >= nodes_.num_servers()) {
    return absl::OutOfRangeError(absl::StrCat("requested server rank ", reg.requested_rank(),
                                              " is out of range: the job has ",
                                              nodes_.num_servers(), " servers"));
  }
  const std::optional<NodeToken> token = TokenFromBytes(reg.token());
  if (!token.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the Register carries no token (16 random bytes, not all zero; got ",
                     reg.token().size(), " bytes)"));
  }
  if (nodes_.FindByToken(*token) != nullptr) {
    return absl::AlreadyExistsError("the Register's token is a registered node's");
  }
  if (absl::Status s = CheckRegisterText(reg); !s.ok()) return s;
  if (absl::Status s = CheckDataKey(config_, reg); !s.ok()) return s;
  if (!ParseHostPort(reg.data_address()).ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "server data_address '", Printable(reg.data_address(), 64), "' is not tcp://host:port"));
  }
  return absl::OkStatus();
}

absl::Status Registration::ReplaceServer(const std::string& identity, const proto::Register& reg,
                                         int rank, uint64_t epoch, Outbox* out) {
  if (absl::Status s = CheckReplacement(identity, reg); !s.ok()) return s;
  RegisteredNode node;
  node.identity = identity;
  node.role = proto::ROLE_SERVER;
  node.rank = rank;
  node.data_address = reg.data_address();
  node.hostname = reg.hostname();
  node.pid = reg.pid();
  node.token = *TokenFromBytes(reg.token());
  node.data_key = reg.data_key();
  if (absl::Status s = nodes_.Replace(std::move(node)); !s.ok()) return s;
  const RegisteredNode& replacement = *nodes_.At(proto::ROLE_SERVER, rank);
  BC_LOG_INFO("server ", rank, " replaced by pid ", replacement.pid, " on ",
              replacement.hostname.empty() ? "?" : Printable(replacement.hostname, 64), ", data ",
              replacement.data_address);
  proto::ControlMessage topology = TopologyFor(replacement);
  topology.mutable_topology()->set_replaces_lost_server(true);
  topology.mutable_topology()->set_server_epoch(epoch);
  // Rounds before the current strategy's first round may still be under way with the one
  // before it: the topology brings that one, a commit the current (server_failover.h).
  if (strategy_.previous().has_value()) {
    *topology.mutable_topology()->mutable_strategy() = *strategy_.previous();
  }
  out->Send(identity, std::move(topology));
  if (strategy_.previous().has_value()) {
    proto::ControlMessage commit;
    *commit.mutable_strategy_commit()->mutable_strategy() = strategy_.current();
    out->Send(identity, std::move(commit));
  }
  return absl::OkStatus();
}

bool Registration::GroupWorkers(Outbox* out) {
  absl::StatusOr<LocalAssignment> grouped = AssignLocalRanks(nodes_.WorkerSlots());
  if (!grouped.ok()) {
    const std::string reason =
        absl::StrCat("cannot group the workers by machine: ", grouped.status().message());
    BC_LOG_ERROR(reason);
    out->EndJob(absl::FailedPreconditionError(reason), reason, nodes_.AllIdentities());
    return false;
  }
  nodes_.SetLocal(*std::move(grouped));
  return true;
}

proto::ControlMessage Registration::TopologyFor(const RegisteredNode& n) const {
  const LocalAssignment& local = *nodes_.local();
  proto::ControlMessage message;
  proto::Topology* topology = message.mutable_topology();
  topology->set_num_workers(config_.num_workers());
  topology->set_num_servers(config_.num_servers());
  for (int s = 0; s < nodes_.num_servers(); ++s) {
    proto::ServerInfo* info = topology->add_servers();
    info->set_rank(s);
    info->set_data_address(nodes_.At(proto::ROLE_SERVER, s)->data_address);
    info->set_data_key(nodes_.At(proto::ROLE_SERVER, s)->data_key);
  }
  *topology->mutable_config() = config_;
  *topology->mutable_strategy() = strategy_.current();
  topology->set_your_rank(n.rank);
  if (n.role == proto::ROLE_SERVER) {
    // Only servers count pushes; a worker's topology does not list the job's workers (at 4096
    // workers that list made registration send 40 MB more).
    if (config_.hierarchical()) {
      for (int root : local.roots) topology->add_pushers(root);
    } else {
      for (int r = 0; r < config_.num_workers(); ++r) topology->add_pushers(r);
    }
    // Servers check every push and pull against the token of the worker rank it names; no
    // worker learns another's.
    for (int r = 0; r < nodes_.num_workers(); ++r) {
      topology->add_worker_tokens(TokenBytes(nodes_.At(proto::ROLE_WORKER, r)->token));
    }
    // And open their data messages with their data keys, which no other worker learns.
    if (SealsDataFrames(config_)) {
      for (int r = 0; r < nodes_.num_workers(); ++r) {
        topology->add_worker_data_keys(nodes_.At(proto::ROLE_WORKER, r)->data_key);
      }
    }
  } else {
    topology->set_local_rank(local.local_rank[n.rank]);
    topology->set_local_size(local.local_size[n.rank]);
    topology->set_local_root(local.local_root[n.rank]);
  }
  return message;
}

bool Registration::SendTopology(int64_t now_ms, Outbox* out) {
  const LocalAssignment& local = *nodes_.local();

  std::string table = absl::StrFormat("\n  %-7s %4s  %-24s %7s  %s", "role", "rank", "host", "pid",
                                      "data address / machine:local rank");
  for (const RegisteredNode* n : nodes_.Registered()) {
    const std::string where = n->role == proto::ROLE_WORKER
                                  ? absl::StrCat(n->slot.machine, ":", local.local_rank[n->rank],
                                                 "/", local.local_size[n->rank])
                                  : n->data_address;
    absl::StrAppend(&table, absl::StrFormat("\n  %-7s %4d  %-24s %7d  %s", RoleName(n->role),
                                            n->rank, n->hostname, n->pid, where));
  }
  BC_LOG_INFO("all ", config_.num_workers(), " workers and ", config_.num_servers(),
              " servers registered after ", Seconds(now_ms - start_ms_), ":", table);
  if (config_.hierarchical()) {
    BC_LOG_INFO("hierarchical: ", local.machines.size(),
                " machines; local roots (the workers "
                "that push) ",
                absl::StrJoin(local.roots, ", "));
  }

  for (const RegisteredNode* n : nodes_.Registered()) out->Send(n->identity, TopologyFor(*n));
  return true;
}

}  // namespace bytecomp
