#include "bytecomp/scheduler/server_failover.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/random/distributions.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bytecomp/common/config.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/common/refusal_log.h"
#include "log_format.h"

namespace bytecomp {

ServerFailover::ServerFailover(const proto::ClusterConfig& config, const NodeTable& nodes,
                               Registration* registration, Declarations* declarations,
                               Liveness* liveness)
    : config_(config),
      nodes_(nodes),
      registration_(*registration),
      declarations_(*declarations),
      liveness_(*liveness) {}

int64_t ServerFailover::CheckEveryMs() const {
  // A quarter interval: the takeover comes soon after the holder is lost.
  return std::max<int64_t>(1, config_.heartbeat_interval_ms() / 4);
}

bool ServerFailover::Takes(const proto::Register& reg) const {
  return ServerFailoverOn(config_) && reg.role() == proto::ROLE_SERVER && !reg.rejoining() &&
         registration_.takeover() == false && nodes_.all_registered();
}

bool ServerFailover::Waits(const std::string& identity) const {
  for (const auto& [rank, w] : waiting_) {
    if (w.identity == identity) return true;
  }
  return false;
}

void ServerFailover::HandleRegister(const std::string& identity, const proto::Register& reg,
                                    int64_t now_ms, Outbox* out) {
  auto refuse = [&](const std::string& to, const proto::Register& r, const std::string& why) {
    proto::ControlMessage reply;
    reply.mutable_error()->set_message(absl::StrCat("registration rejected: ", why));
    reply.mutable_error()->set_registration_refused(true);
    out->Refuse(to, std::move(reply),
                absl::StrCat("rejected registration of a server (pid ", r.pid(), " on ",
                             r.hostname().empty() ? "?" : Printable(r.hostname(), 64), "): ", why));
  };
  if (Waits(identity)) return;  // sent again while it waits
  if (absl::Status s = registration_.CheckReplacement(identity, reg); !s.ok()) {
    return refuse(identity, reg, std::string(s.message()));
  }
  int rank = reg.requested_rank();
  if (rank < 0) {  // no rank asked for: a lost one, if any
    for (int r = 0; r < nodes_.num_servers() && rank < 0; ++r) {
      if (liveness_.Lost(r)) rank = r;
    }
    if (rank < 0) {
      return refuse(identity, reg,
                    absl::StrCat("the job is full: all ", config_.num_workers(), " workers and ",
                                 config_.num_servers(),
                                 " servers have registered, and no server is lost (a replacement "
                                 "names the rank it replaces with --rank)"));
    }
  }
  if (liveness_.Retired(rank)) {
    return refuse(identity, reg,
                  absl::StrCat("server rank ", rank,
                               " was lost and its keys moved to the "
                               "surviving servers: the job does not use it again"));
  }
  if (auto older = waiting_.find(rank); older != waiting_.end()) {
    refuse(older->second.identity, older->second.reg,
           absl::StrCat("a newer server registered to replace server ", rank));
    waiting_.erase(older);
  }
  Waiting waiting{identity, reg, now_ms, now_ms + CheckEveryMs()};
  if (TryTakeOver(rank, waiting, now_ms, out)) return;
  BC_LOG_INFO("a server (pid ", reg.pid(), ") registered for rank ", rank,
              ", which is held; it takes the rank over once the holder is lost (silent for ",
              Seconds(config_.heartbeat_timeout_ms()), ")");
  waiting_.emplace(rank, std::move(waiting));
}

bool ServerFailover::TryTakeOver(int rank, const Waiting& waiting, int64_t now_ms, Outbox* out) {
  if (!liveness_.Lost(rank)) {
    // The holder is lost by heartbeat_timeout_ms of silence, never sooner: a server that is
    // only slow (a loaded host) is not displaced by whoever registers for its rank. A holder
    // still heard an interval past that wait is alive.
    const RegisteredNode* holder = nodes_.At(proto::ROLE_SERVER, rank);
    if (now_ms - waiting.since_ms >=
        int64_t{config_.heartbeat_timeout_ms()} + config_.heartbeat_interval_ms()) {
      const std::string why =
          absl::StrCat("server rank ", rank, " is held by pid ", holder->pid, " on ",
                       holder->hostname, ", which is alive: two servers claim one rank");
      proto::ControlMessage reply;
      reply.mutable_error()->set_message(absl::StrCat("registration rejected: ", why));
      reply.mutable_error()->set_registration_refused(true);
      out->Refuse(
          waiting.identity, std::move(reply),
          absl::StrCat("rejected registration of a server (pid ", waiting.reg.pid(), "): ", why));
      return true;
    } else {
      return false;
    }
  }
  // Drawn at random, so that a scheduler that restarted (and knows no earlier epoch) does not
  // draw one in use.
  uint64_t epoch = 0;
  while (epoch == 0) epoch = absl::Uniform<uint64_t>(random_);
  if (absl::Status s = registration_.ReplaceServer(waiting.identity, waiting.reg, rank, epoch, out);
      !s.ok()) {
    proto::ControlMessage reply;
    reply.mutable_error()->set_message(absl::StrCat("registration rejected: ", s.message()));
    reply.mutable_error()->set_registration_refused(true);
    out->Refuse(waiting.identity, std::move(reply),
                absl::StrCat("could not replace server ", rank, ": ", s.message()));
    return true;
  }
  const RegisteredNode& replacement = *nodes_.At(proto::ROLE_SERVER, rank);
  // Before any worker pushes to it: what it validates pushes against.
  const std::vector<proto::DeclareReply> decided = declarations_.Decided();
  for (const proto::DeclareReply& reply : decided) {
    proto::ControlMessage m;
    *m.mutable_declare_reply() = reply;
    out->Send(replacement.identity, std::move(m));
  }
  liveness_.Replaced(rank, now_ms);
  proto::ControlMessage replaced;
  replaced.mutable_server_replaced()->set_rank(rank);
  replaced.mutable_server_replaced()->set_data_address(replacement.data_address);
  replaced.mutable_server_replaced()->set_epoch(epoch);
  replaced.mutable_server_replaced()->set_data_key(replacement.data_key);
  for (const std::string& id : nodes_.WorkerIdentities()) out->Send(id, replaced);
  BC_LOG_INFO("server ", rank, " is back: ", decided.size(),
              " declarations sent to it, and every worker told to push to it again what server ",
              rank, " had not answered");
  return true;
}

void ServerFailover::MoveKeysOff(int rank, Outbox* out) {
  std::vector<int> survivors;
  for (int s = 0; s < nodes_.num_servers(); ++s) {
    if (s != rank && !liveness_.Lost(s) && !liveness_.Retired(s)) survivors.push_back(s);
  }
  if (survivors.empty()) {
    const std::string reason = absl::StrCat(
        "server ", rank, " was lost and no replacement registered for its rank within ",
        Seconds(config_.server_replacement_timeout_ms()),
        " (server_replacement_timeout_ms), and no other server is left to take its keys");
    BC_LOG_ERROR("shutting the job down: ", reason);
    out->EndJob(absl::UnavailableError(reason), reason, liveness_.WatchedIdentities());
    return;
  }
  liveness_.Retire(rank);
  proto::ControlMessage moved;
  proto::KeysMoved* keys = moved.mutable_keys_moved();
  keys->set_from_rank(rank);
  for (proto::DeclareReply& reply : declarations_.MoveOff(rank, survivors)) {
    *keys->add_tensors() = std::move(reply);
  }
  BC_LOG_WARNING("no server registered for rank ", rank, " within ",
                 Seconds(config_.server_replacement_timeout_ms()),
                 ": its partitions move to server", survivors.size() == 1 ? " " : "s ",
                 absl::StrJoin(survivors, ", "), " (", keys->tensors_size(),
                 " tensors changed), which take them up as a replacement would; the job goes on "
                 "with ",
                 survivors.size(), " server", survivors.size() == 1 ? "" : "s");
  // The new owners first: they must know the keys are theirs before a worker's replay comes.
  for (int s : survivors) out->Send(nodes_.At(proto::ROLE_SERVER, s)->identity, moved);
  for (const std::string& id : nodes_.WorkerIdentities()) out->Send(id, moved);
}

void ServerFailover::OnTime(int64_t now_ms, Outbox* out) {
  std::vector<int> expired;
  for (const auto& [rank, since] : liveness_.lost_servers()) {
    if (now_ms - since >= config_.server_replacement_timeout_ms() && !waiting_.contains(rank)) {
      expired.push_back(rank);
    }
  }
  std::sort(expired.begin(), expired.end());
  for (int rank : expired) {
    MoveKeysOff(rank, out);
    if (out->job_end().has_value()) return;
  }
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (now_ms < it->second.next_check_ms) {
      ++it;
    } else if (TryTakeOver(it->first, it->second, now_ms, out)) {
      it = waiting_.erase(it);
    } else {
      it->second.next_check_ms = now_ms + CheckEveryMs();
      ++it;
    }
  }
}

std::optional<int64_t> ServerFailover::NextDeadline() const {
  std::optional<int64_t> next;
  for (const auto& [rank, since] : liveness_.lost_servers()) {
    const int64_t due = since + config_.server_replacement_timeout_ms();
    if (!next.has_value() || due < *next) next = due;
  }
  for (const auto& [rank, w] : waiting_) {
    if (!next.has_value() || w.next_check_ms < *next) next = w.next_check_ms;
  }
  return next;
}

}  // namespace bytecomp
