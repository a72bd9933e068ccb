#include "bytecomp/scheduler/liveness.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bytecomp/common/config.h"
#include "bytecomp/common/logging.h"
#include "log_format.h"

namespace bytecomp {

Liveness::Liveness(const proto::ClusterConfig& config, const NodeTable& nodes, int64_t start_ms)
    : config_(config), nodes_(nodes), start_ms_(start_ms) {}

void Liveness::Seen(const RegisteredNode& node, int64_t now_ms) {
  last_seen_ms_[node.role_rank()] = now_ms;
}

void Liveness::StartMonitoring(int64_t now_ms) {
  monitoring_ = true;
  for (const RegisteredNode* node : nodes_.Registered()) last_seen_ms_[node->role_rank()] = now_ms;
}

bool Liveness::Watched(const RegisteredNode& node) const {
  if (node.role == proto::ROLE_SERVER) {
    return !lost_servers_.contains(node.rank) && !retired_servers_.contains(node.rank);
  }
  return done_workers_.count(node.rank) == 0;
}

int64_t Liveness::LastSeen(const RegisteredNode& node) const {
  auto it = last_seen_ms_.find(node.role_rank());
  // Every node registered before the monitoring started (the job was full), which set them all.
  return it == last_seen_ms_.end() ? start_ms_ : it->second;
}

void Liveness::HandleWorkerDone(const RegisteredNode& node, Outbox* out) {
  if (node.role != proto::ROLE_WORKER) {
    const std::string why =
        absl::StrCat("WorkerDone from ", NodeTable::Name(node), ", which is not a worker");
    out->Refuse(node.identity, why, why);
    return;
  }
  if (!done_workers_.insert(node.rank).second) return;  // a repeat counts once
  BC_LOG_INFO(NodeTable::Name(node), " is done (", workers_done(), " of ", config_.num_workers(),
              ")");
  if (workers_done() == config_.num_workers()) {
    BC_LOG_INFO("every worker is done; shutting the servers down");
    out->EndJob(absl::OkStatus(), "every worker is done", nodes_.ServerIdentities());
  }
}

void Liveness::HandleShutdown(const RegisteredNode& node, const proto::Shutdown& shutdown,
                              Outbox* out) {
  const std::string reason =
      absl::StrCat(NodeTable::Name(node), " asked to shut the job down: ",
                   shutdown.reason().empty() ? "no reason given" : shutdown.reason());
  BC_LOG_ERROR(reason);
  std::vector<std::string> others;
  for (const std::string& id : nodes_.AllIdentities()) {
    if (id != node.identity) others.push_back(id);
  }
  out->EndJob(absl::AbortedError(reason), reason, others);
}

void Liveness::Stop(const std::string& reason, Outbox* out) {
  BC_LOG_INFO(reason, "; telling every node to shut down");
  out->EndJob(absl::CancelledError(reason), reason, nodes_.AllIdentities());
}

std::optional<int64_t> Liveness::NextDeadline() const {
  std::optional<int64_t> next;
  auto consider = [&](int64_t due) {
    if (!next.has_value() || due < *next) next = due;
  };
  if (!nodes_.all_registered()) consider(start_ms_ + config_.connect_timeout_ms());
  if (monitoring_) {
    for (const RegisteredNode* node : nodes_.Registered()) {
      if (Watched(*node)) consider(LastSeen(*node) + config_.heartbeat_timeout_ms());
    }
  }
  return next;
}

void Liveness::OnTime(int64_t now_ms, Outbox* out) {
  if (!nodes_.all_registered() && now_ms - start_ms_ >= config_.connect_timeout_ms()) {
    const std::string reason =
        absl::StrCat("registration did not complete within ", Seconds(config_.connect_timeout_ms()),
                     ": missing ", nodes_.Missing());
    BC_LOG_ERROR(reason);
    out->EndJob(absl::DeadlineExceededError(reason), reason, nodes_.AllIdentities());
    return;
  }
  if (monitoring_) FailSilentNodes(now_ms, out);
}

void Liveness::DeclareLost(int server_rank, const std::string& reason, int64_t now_ms,
                           Outbox* out) {
  const RegisteredNode* lost = nodes_.At(proto::ROLE_SERVER, server_rank);
  if (lost == nullptr || Lost(server_rank) || Retired(server_rank)) return;
  lost_servers_[server_rank] = now_ms;
  BC_LOG_ERROR(NodeTable::Name(*lost), " (pid ", lost->pid, " on ", lost->hostname,
               ") lost: ", reason, "; the job waits up to ",
               Seconds(config_.server_replacement_timeout_ms()),
               " for a server to register for rank ", server_rank, " and take its keys over");
  proto::ControlMessage message;
  proto::NodeFailed* nf = message.mutable_node_failed();
  nf->mutable_node()->set_role(proto::ROLE_SERVER);
  nf->mutable_node()->set_rank(server_rank);
  nf->set_reason(reason);
  nf->set_data_address(lost->data_address);
  nf->set_replacement_wait_ms(config_.server_replacement_timeout_ms());
  for (const RegisteredNode* node : nodes_.Registered()) {
    if (Watched(*node)) out->Send(node->identity, message);
  }
  // It may only be frozen: when it runs again, this tells it to exit.
  proto::ControlMessage bye;
  bye.mutable_shutdown()->set_reason(
      absl::StrCat("the scheduler declared ", NodeTable::Name(*lost), " lost: ", reason));
  out->Send(lost->identity, std::move(bye));
}

void Liveness::Retire(int server_rank) {
  lost_servers_.erase(server_rank);
  retired_servers_.insert(server_rank);
}

std::vector<std::string> Liveness::WatchedIdentities() const {
  std::vector<std::string> out;
  for (const RegisteredNode* node : nodes_.Registered()) {
    if (Watched(*node)) out.push_back(node->identity);
  }
  return out;
}

void Liveness::Replaced(int server_rank, int64_t now_ms) {
  lost_servers_.erase(server_rank);
  last_seen_ms_[{proto::ROLE_SERVER, server_rank}] = now_ms;
}

std::optional<int64_t> Liveness::NextHeartbeat() const {
  if (nodes_.size() == 0) return std::nullopt;
  return next_heartbeat_ms_;
}

void Liveness::SendHeartbeats(int64_t now_ms, Outbox* out) {
  if (now_ms < next_heartbeat_ms_ || nodes_.size() == 0) return;
  next_heartbeat_ms_ = now_ms + config_.heartbeat_interval_ms();
  proto::ControlMessage heartbeat;
  heartbeat.mutable_heartbeat()->set_sequence(++heartbeat_sequence_);
  for (const RegisteredNode* node : nodes_.Registered()) {
    if (Watched(*node)) out->Send(node->identity, heartbeat);
  }
}

void Liveness::FailSilentNodes(int64_t now_ms, Outbox* out) {
  std::vector<const RegisteredNode*> failed;
  std::vector<std::string> alive;  // identities
  const std::string missed =
      absl::StrCat("missed heartbeats for ", Seconds(config_.heartbeat_timeout_ms()));
  for (const RegisteredNode* node : nodes_.Registered()) {
    if (!Watched(*node)) {  // a worker that is done hears how the job ends; a lost server not
      if (node->role == proto::ROLE_WORKER) alive.push_back(node->identity);
      continue;
    }
    if (now_ms - LastSeen(*node) < config_.heartbeat_timeout_ms()) {
      alive.push_back(node->identity);
    } else if (node->role == proto::ROLE_SERVER && ServerFailoverOn(config_)) {
      DeclareLost(node->rank, missed, now_ms, out);  // the job goes on and waits for another
    } else {
      failed.push_back(node);
    }
  }
  if (failed.empty()) return;
  std::vector<std::string> names;
  for (const RegisteredNode* f : failed) {
    names.push_back(NodeTable::Name(*f));
    BC_LOG_ERROR(NodeTable::Name(*f), " (pid ", f->pid, " on ", f->hostname, ") failed: ", missed);
    proto::ControlMessage message;
    proto::NodeFailed* nf = message.mutable_node_failed();
    nf->mutable_node()->set_role(f->role);
    nf->mutable_node()->set_rank(f->rank);
    nf->set_reason(missed);
    nf->set_data_address(f->data_address);
    for (const std::string& id : alive) out->Send(id, message);
    // It may only be frozen: when it runs again, this tells it to exit.
    proto::ControlMessage bye;
    bye.mutable_shutdown()->set_reason(
        absl::StrCat("the scheduler declared ", NodeTable::Name(*f), " failed: ", missed));
    out->Send(f->identity, std::move(bye));
  }
  const std::string reason = absl::StrCat(absl::StrJoin(names, ", "), " failed (", missed,
                                          "); a synchronous job cannot continue");
  BC_LOG_ERROR("shutting the job down: ", reason);
  out->EndJob(absl::UnavailableError(reason), reason, alive);
}

}  // namespace bytecomp
