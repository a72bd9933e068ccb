#include "bytecomp/scheduler/control_router.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/common/refusal_log.h"
#include "bytecomp/common/socket_limits.h"
#include "bytecomp/scheduler/takeover.h"
#include "status_service.h"

namespace bytecomp {

std::string BodyName(const proto::ControlMessage& m) {
  const auto* field = m.GetDescriptor()->FindFieldByNumber(m.body_case());
  return field == nullptr ? "empty message" : field->name();
}

std::string PrintableIdentity(const std::string& id) {
  std::string out;
  for (unsigned char c : id) absl::StrAppend(&out, absl::Hex(c, absl::kZeroPad2));
  return out;
}

ControlRouter::ControlRouter(const proto::ClusterConfig& config, StrategyKeeper strategy,
                             std::optional<AutoPlanInputs> auto_plan, int64_t start_ms)
    : nodes_(config.num_workers(), config.num_servers()),
      strategy_(config, nodes_, std::move(strategy), std::move(auto_plan)),
      registration_(config, &nodes_, strategy_.keeper(), start_ms),
      barriers_(nodes_),
      declarations_(config, nodes_),
      local_relay_(config, nodes_),
      collective_store_(config, nodes_),
      liveness_(config, nodes_, start_ms),
      failover_(config, nodes_, &registration_, &declarations_, &liveness_),
      max_report_bytes_(MaxControlReportBytes(config)) {}

std::string ControlRouter::Who(const std::string& identity) const {
  const RegisteredNode* node = nodes_.Find(identity);
  return node != nullptr ? NodeTable::Name(*node)
                         : absl::StrCat("unregistered peer ", PrintableIdentity(identity));
}

void ControlRouter::OnTime(int64_t now_ms, Outbox* out) {
  liveness_.OnTime(now_ms, out);
  if (!out->job_end().has_value()) registration_.OnTime(now_ms, out);
  if (!out->job_end().has_value()) failover_.OnTime(now_ms, out);
  if (!out->job_end().has_value()) declarations_.OnTime(now_ms, out);
  if (!out->job_end().has_value()) strategy_.OnTime(out);
}

int64_t ControlRouter::NextDeadlineMs(int64_t now_ms, int64_t latest) const {
  int64_t next = latest;
  for (const std::optional<int64_t>& due :
       {liveness_.NextDeadline(), liveness_.NextHeartbeat(), registration_.NextDeadline(),
        declarations_.NextDeadline(), failover_.NextDeadline(), strategy_.NextCheckMs(now_ms)}) {
    if (due.has_value()) next = std::min(next, *due);
  }
  return next;
}

void ControlRouter::Handle(const std::string& identity, const proto::ControlMessage& message,
                           int64_t now_ms, Outbox* out) {
  const RegisteredNode* node = nodes_.Find(identity);
  std::string who = Who(identity);
  if (message.has_register_()) {
    if (failover_.Takes(message.register_())) {
      return failover_.HandleRegister(identity, message.register_(), now_ms, out);
    }
    if (registration_.Handle(identity, message.register_(), now_ms, out)) Begin(now_ms, out);
    return;
  }
  // The routing id only routes: a message is the node's when it carries the node's token.
  const std::optional<NodeToken> token = TokenFromBytes(message.token());
  if (node == nullptr && token.has_value()) {
    // A registered node on a new connection (it reconnected): it is reached there from now on.
    if (const RegisteredNode* holder = nodes_.FindByToken(*token); holder != nullptr) {
      node = &registration_.MoveConnection(identity, *holder);
      who = NodeTable::Name(*node);
    }
  }
  const bool authentic = node != nullptr && token.has_value() && SameToken(*token, node->token);
  // Any message of the node's counts as a sign of life.
  if (authentic) liveness_.Seen(*node, now_ms);
  if (authentic && observer_ != nullptr) observer_->Seen(*node, now_ms);
  if (message.has_error() && (authentic || node == nullptr)) {
    // Never answer an error with an error: two confused peers would ping-pong forever.
    out->RefuseSilently(
        identity,
        absl::StrCat(who, " reports an error: ", Printable(message.error().message(), 512)));
    return;
  }
  if (node == nullptr && failover_.Waits(identity)) return;  // a replacement, not yet in
  if (node == nullptr) {
    // A node of a running job that this scheduler (restarted) does not know reads the flag as
    // "rejoin" (takeover.h).
    proto::ControlMessage reply;
    reply.mutable_error()->set_message(
        absl::StrCat("received ", BodyName(message),
                     " from a node that has not registered; send Register first"));
    reply.mutable_error()->set_not_registered(true);
    out->Refuse(identity, std::move(reply),
                absl::StrCat(who, " sent ", BodyName(message), " before registering"));
    return;
  }
  if (!authentic) {
    out->Refuse(identity,
                absl::StrCat(BodyName(message), " refused: it does not carry the token that ", who,
                             " registered with"),
                absl::StrCat(BodyName(message), " on the connection of ", who,
                             " without its token (", message.token().size(), " bytes)"));
    return;
  }
  Dispatch(*node, message, now_ms, out);
}

void ControlRouter::Begin(int64_t now_ms, Outbox* out) {
  if (registration_.takeover() == true &&
      !TakeOver(registration_.rejoins(), nodes_, declarations_, strategy_, barriers_, out)) {
    return;  // the job ended
  }
  liveness_.StartMonitoring(now_ms);
  barriers_.ReleaseWaiting(out);
}

void ControlRouter::Join(const RegisteredNode& node, const proto::ControlPart& part, int64_t now_ms,
                         Outbox* out) {
  ControlAssembly& assembly =
      assemblies_.try_emplace(node.role_rank(), max_report_bytes_).first->second;
  absl::StatusOr<std::optional<proto::ControlMessage>> whole = assembly.Add(part);
  if (!whole.ok()) {
    return out->Refuse(
        node.identity, absl::StrCat("control message in parts refused: ", whole.status().message()),
        absl::StrCat("parts from ", NodeTable::Name(node), " refused: ", whole.status().message()));
  }
  if (!whole->has_value()) return;
  if ((*whole)->has_error()) {
    return out->RefuseSilently(node.identity,
                               absl::StrCat(NodeTable::Name(node), " sent an error in parts"));
  }
  Dispatch(node, **whole, now_ms, out);
}

void ControlRouter::Dispatch(const RegisteredNode& node, const proto::ControlMessage& message,
                             int64_t now_ms, Outbox* out) {
  switch (message.body_case()) {
    case proto::ControlMessage::kHeartbeat:
      return;  // liveness_.Seen has counted it
    case proto::ControlMessage::kBarrierRequest:
      return barriers_.Handle(node, message.barrier_request(), out);
    case proto::ControlMessage::kDeclareTensor:
      return declarations_.Handle(node, message.declare_tensor(), now_ms, out);
    case proto::ControlMessage::kLocalCommunicator:
      return local_relay_.Handle(node, message.local_communicator(), out);
    case proto::ControlMessage::kCollectiveStoreSet:
      return collective_store_.HandleSet(node, message.collective_store_set(), out);
    case proto::ControlMessage::kCollectiveStoreGet:
      return collective_store_.HandleGet(node, message.collective_store_get(), out);
    case proto::ControlMessage::kStrategyPrepareReply:
      return strategy_.HandlePrepareReply(node, message.strategy_prepare_reply(), out);
    case proto::ControlMessage::kProfileReport:
      return strategy_.HandleProfileReport(node, message.profile_report(), out);
    case proto::ControlMessage::kLinkProbeReport:
      return strategy_.HandleLinkProbeReport(node, message.link_probe_report(), out);
    case proto::ControlMessage::kRatioReport:
      return strategy_.HandleRatioReport(node, message.ratio_report(), out);
    case proto::ControlMessage::kWorkerDone:
      if (observer_ != nullptr) observer_->WorkerDone(node);
      return liveness_.HandleWorkerDone(node, out);
    case proto::ControlMessage::kClockProbe:
      return AnswerClockProbe(node, message.clock_probe(), out);
    case proto::ControlMessage::kStatsReport:
      if (observer_ != nullptr) observer_->Stats(node, message.stats_report());
      return;
    case proto::ControlMessage::kShutdown:
      return liveness_.HandleShutdown(node, message.shutdown(), out);
    case proto::ControlMessage::kPart:
      return Join(node, message.part(), now_ms, out);
    case proto::ControlMessage::kRejoinReport:
      if (registration_.HandleRejoinReport(node, message.rejoin_report(), now_ms, out)) {
        Begin(now_ms, out);
      }
      return;
    case proto::ControlMessage::BODY_NOT_SET:
      return out->Refuse(node.identity, "empty ControlMessage: no message body is set",
                         absl::StrCat("empty ControlMessage from ", NodeTable::Name(node)));
    default:
      return out->Refuse(
          node.identity,
          absl::StrCat("the scheduler does not accept ", BodyName(message), " messages from nodes"),
          absl::StrCat("unexpected ", BodyName(message), " from ", NodeTable::Name(node)));
  }
}

}  // namespace bytecomp
