#include "bytecomp/scheduler/scheduler.h"

#include <algorithm>
#include <csignal>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/config.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/common/net.h"
#include "bytecomp/common/socket_limits.h"
#include "bytecomp/common/transport.h"
#include "bytecomp/scheduler/takeover.h"
#include "log_format.h"
#include "status_service.h"

namespace bytecomp {
namespace {

// Upper bound on one poll, so that Stop() from another thread is seen promptly. Signals
// interrupt the poll at once.
constexpr int64_t kMaxPollMs = 100;

std::string SignalName(int signal_number) {
  switch (signal_number) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return absl::StrCat("signal ", signal_number);
  }
}

std::string BodyName(const proto::ControlMessage& m) {
  const auto* field = m.GetDescriptor()->FindFieldByNumber(m.body_case());
  return field == nullptr ? "empty message" : field->name();
}

// A routing id may hold any bytes; print it as hex for logs.
std::string PrintableIdentity(const std::string& id) {
  std::string out;
  for (unsigned char c : id) absl::StrAppend(&out, absl::Hex(c, absl::kZeroPad2));
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(SchedulerOptions options) {
  if (absl::Status s = ValidateClusterConfig(options.config); !s.ok()) return s;
  StrategyKeeper strategy;
  if (absl::Status s = strategy.LoadInitial(options.auto_strategy ? "" : options.strategy_path);
      !s.ok()) {
    return s;
  }
  std::optional<AutoPlanInputs> auto_plan;
  if (options.auto_strategy) {
    absl::StatusOr<AutoPlanInputs> loaded =
        LoadAutoPlanInputs(options.plan_cluster_path, options.plan_costs_path,
                           options.plan_options_path, options.plan_links);
    if (!loaded.ok()) return loaded.status();
    auto_plan = *std::move(loaded);
    auto_plan->plan_out =
        options.plan_out_path.empty() ? DefaultPlanOut() : options.plan_out_path;
    options.config.set_profile_rounds(std::max(1, options.profile_rounds));
  }
  int port = options.port;
  if (port < 0) {
    absl::StatusOr<HostPort> hp = ParseHostPort(options.config.scheduler_address());
    if (!hp.ok()) return hp.status();
    port = hp->port;
  }
  auto context = std::make_unique<zmq::context_t>(1);
  absl::StatusOr<std::unique_ptr<SocketSecurity>> security =
      SocketSecurity::FromConfig(*context, options.config);
  if (!security.ok()) return security.status();
  absl::StatusOr<std::string> host = (*security)->ListenHost(options.bind_host, "scheduler");
  if (!host.ok()) return host.status();
  options.bind_host = *host;
  auto socket = std::make_unique<zmq::socket_t>(*context, zmq::socket_type::router);
  ConfigureSocket(*socket);
  if (absl::Status s = (*security)->SecureListening(*socket); !s.ok()) return s;
  LimitSocket(*socket, SchedulerSocketLimits(options.config));
  // No ZMQ_ROUTER_HANDOVER: with it, a peer that connects with a node's routing id would take
  // that node's connection over, and with it every message the scheduler sends the node. A
  // routing id held by a live connection stays its own. A node is its token: a message with
  // it on a new connection moves the node there (HandleFrames).
  absl::StatusOr<int> bound = BindTcp(*socket, options.bind_host, port);
  if (!bound.ok()) {
    return absl::UnavailableError(
        absl::StrCat("scheduler: ", bound.status().message(),
                     " (is another scheduler running on that port?)"));
  }
  const int64_t start_ms = MonotonicMs();
  std::unique_ptr<StatusService> status;
  if (!options.http_address.empty()) {
    // Workers send a StatsReport every heartbeat for the page.
    options.config.set_stats_report_ms(options.config.heartbeat_interval_ms());
    absl::StatusOr<std::unique_ptr<StatusService>> started =
        StatusService::Start(options.http_address, options.config, start_ms);
    if (!started.ok()) return started.status();
    status = *std::move(started);
  }
  std::unique_ptr<Scheduler> scheduler(
      new Scheduler(std::move(options), std::move(context), *std::move(security),
                    std::move(socket), *bound, std::move(strategy), std::move(auto_plan), start_ms));
  scheduler->status_ = std::move(status);
  return scheduler;
}

std::string Scheduler::status_url() const { return status_ != nullptr ? status_->url() : ""; }

Scheduler::Scheduler(SchedulerOptions options, std::unique_ptr<zmq::context_t> context,
                     std::unique_ptr<SocketSecurity> security,
                     std::unique_ptr<zmq::socket_t> socket, int port, StrategyKeeper strategy,
                     std::optional<AutoPlanInputs> auto_plan, int64_t start_ms)
    : options_(std::move(options)),
      config_(options_.config),
      context_(std::move(context)),
      security_(std::move(security)),
      socket_(std::move(socket)),
      port_(port),
      nodes_(config_.num_workers(), config_.num_servers()),
      strategy_(config_, nodes_, std::move(strategy), std::move(auto_plan)),
      registration_(config_, &nodes_, strategy_.keeper(), start_ms),
      barriers_(nodes_),
      declarations_(config_, nodes_),
      local_relay_(config_, nodes_),
      liveness_(config_, nodes_, start_ms) {}

Scheduler::~Scheduler() {
  status_.reset();  // the HTTP threads first
  if (socket_) {
    socket_->set(zmq::sockopt::linger, options_.shutdown_linger_ms);
    socket_->close();
  }
  // The ZAP handler outlives the socket it guards, and goes before the context it lives in.
  security_.reset();
  // Destroying the context waits (at most the linger) for queued messages to leave.
  context_.reset();
}

void Scheduler::Stop() { stop_requested_.store(true); }

void Scheduler::StopForSignal(int signal_number) {
  stop_signal_.store(signal_number);
  stop_requested_.store(true);
}

void Scheduler::RequestReload() { reload_requested_.store(true); }

absl::Status Scheduler::Run() {
  if (ran_) return absl::FailedPreconditionError("Scheduler::Run called twice");
  ran_ = true;
  BC_LOG_INFO("listening on ", options_.bind_host, ":", port_, " for ", config_.num_workers(),
              " workers and ", config_.num_servers(), " servers (registration timeout ",
              Seconds(config_.connect_timeout_ms()), ", heartbeat timeout ",
              Seconds(config_.heartbeat_timeout_ms()), "); ", security_->Describe());
  while (!final_status_.has_value()) {
    if (stop_requested_.load()) {
      const int signal_number = stop_signal_.load();
      Outbox out;
      liveness_.Stop(signal_number != 0
                         ? absl::StrCat("scheduler received ", SignalName(signal_number))
                         : std::string("scheduler was stopped"),
                     &out);
      Deliver(out);
      break;
    }
    if (reload_requested_.exchange(false)) {
      Outbox out;
      strategy_.Reload(&out);
      Deliver(out);
    }
    const int64_t now = MonotonicMs();
    const int64_t wait_ms = std::clamp<int64_t>(NextDeadlineMs(now) - now, 0, kMaxPollMs);
    zmq::pollitem_t item{socket_->handle(), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(wait_ms));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;  // a signal: the loop head looks at stop_requested_
      final_status_ = absl::InternalError(absl::StrCat("zmq poll: ", e.what()));
      break;
    }
    // Deadlines are checked only once the queue is drained: after a stall of this thread
    // (an overloaded machine), heartbeats still queued must count before anyone is declared
    // failed.
    bool drained = true;
    if (item.revents & ZMQ_POLLIN) {
      drained = false;
      for (int i = 0; i < 1024 && !final_status_.has_value(); ++i) {
        std::vector<zmq::message_t> frames;
        try {
          zmq::message_t frame;
          if (!socket_->recv(frame, zmq::recv_flags::dontwait)) {
            drained = true;
            break;
          }
          frames.push_back(std::move(frame));
          while (frames.back().more()) {
            zmq::message_t next;
            (void)socket_->recv(next, zmq::recv_flags::none);
            frames.push_back(std::move(next));
          }
        } catch (const zmq::error_t& e) {
          if (e.num() == EINTR) break;
          final_status_ = absl::InternalError(absl::StrCat("zmq recv: ", e.what()));
          break;
        }
        Outbox out;
        HandleFrames(frames, MonotonicMs(), &out);
        Deliver(out);
      }
    }
    if (!final_status_.has_value()) {
      // Nodes hear from the scheduler every interval, also while a peer floods it.
      Outbox out;
      liveness_.SendHeartbeats(MonotonicMs(), &out);
      Deliver(out);
    }
    if (drained && !final_status_.has_value()) {
      const int64_t checked_at = MonotonicMs();
      Outbox out;
      liveness_.OnTime(checked_at, &out);
      if (!out.job_end().has_value()) declarations_.OnTime(checked_at, &out);
      Deliver(out);
      if (status_ != nullptr) {
        status_->MaybePublish(checked_at, nodes_, strategy_.keeper().current(),
                              options_.auto_strategy ? "auto"
                              : options_.strategy_path.empty() ? "none"
                                                               : options_.strategy_path,
                              strategy_.predicted_us(), refusals_.refused());
      }
    }
  }
  if (refusals_.refused() > 0) BC_LOG_INFO("bad messages: ", refusals_.Summary());
  return *final_status_;
}

int64_t Scheduler::NextDeadlineMs(int64_t now_ms) const {
  int64_t next = now_ms + kMaxPollMs;
  for (const std::optional<int64_t>& due :
       {liveness_.NextDeadline(), liveness_.NextHeartbeat(), declarations_.NextDeadline()}) {
    if (due.has_value()) next = std::min(next, *due);
  }
  return next;
}

// ---------------------------------------------------------------------------------------
// Incoming messages

void Scheduler::HandleFrames(std::vector<zmq::message_t>& frames, int64_t now_ms,
                             Outbox* out) {
  if (frames.empty()) return;
  const std::string identity = FrameToString(frames[0]);
  const RegisteredNode* node = nodes_.Find(identity);
  std::string who = node != nullptr
                        ? NodeTable::Name(*node)
                        : absl::StrCat("unregistered peer ", PrintableIdentity(identity));

  if (frames.size() != 2) {
    out->Refuse(identity,
                absl::StrCat("expected one frame holding a ControlMessage, got ",
                             frames.size() - 1, " frames"),
                absl::StrCat("malformed message from ", who, ": ", frames.size() - 1,
                             " frames, expected 1 (a ControlMessage)"));
    return;
  }
  proto::ControlMessage message;
  if (absl::Status s = ParseFrame(frames[1], &message); !s.ok()) {
    out->Refuse(identity, std::string(s.message()), absl::StrCat("from ", who, ": ", s.message()));
    return;
  }
  if (message.has_register_()) {
    if (registration_.Handle(identity, message.register_(), now_ms, out)) {
      if (registration_.takeover() == true &&
          !TakeOver(registration_.rejoins(), nodes_, declarations_, strategy_, barriers_, out)) {
        return;  // the job ended
      }
      liveness_.StartMonitoring(now_ms);
      barriers_.ReleaseWaiting(out);
    }
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
  if (authentic && status_ != nullptr) status_->Seen(*node, now_ms);
  if (message.has_error() && (authentic || node == nullptr)) {
    // Never answer an error with an error: two confused peers would ping-pong forever.
    out->RefuseSilently(identity, absl::StrCat(who, " reports an error: ",
                                               Printable(message.error().message(), 512)));
    return;
  }
  if (node == nullptr) {
    // A node of a running job that this scheduler (restarted) does not know reads the flag as
    // "rejoin" (takeover.h).
    proto::ControlMessage reply;
    reply.mutable_error()->set_message(absl::StrCat(
        "received ", BodyName(message), " from a node that has not registered; send Register first"));
    reply.mutable_error()->set_not_registered(true);
    out->Refuse(identity, std::move(reply),
                absl::StrCat(who, " sent ", BodyName(message), " before registering"));
    return;
  }
  if (!authentic) {
    out->Refuse(identity,
                absl::StrCat(BodyName(message), " refused: it does not carry the token that ",
                             who, " registered with"),
                absl::StrCat(BodyName(message), " on the connection of ", who,
                             " without its token (", message.token().size(), " bytes)"));
    return;
  }
  Dispatch(*node, message, now_ms, out);
}

void Scheduler::Dispatch(const RegisteredNode& node, const proto::ControlMessage& message,
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
    case proto::ControlMessage::kStrategyPrepareReply:
      return strategy_.HandlePrepareReply(node, message.strategy_prepare_reply(), out);
    case proto::ControlMessage::kProfileReport:
      return strategy_.HandleProfileReport(node, message.profile_report(), out);
    case proto::ControlMessage::kLinkProbeReport:
      return strategy_.HandleLinkProbeReport(node, message.link_probe_report(), out);
    case proto::ControlMessage::kRatioReport:
      return strategy_.HandleRatioReport(node, message.ratio_report(), out);
    case proto::ControlMessage::kWorkerDone:
      if (status_ != nullptr) status_->WorkerDone(node);
      return liveness_.HandleWorkerDone(node, out);
    case proto::ControlMessage::kClockProbe:
      return AnswerClockProbe(node, message.clock_probe(), out);
    case proto::ControlMessage::kStatsReport:
      if (status_ != nullptr) status_->HandleStats(node, message.stats_report());
      return;
    case proto::ControlMessage::kShutdown:
      return liveness_.HandleShutdown(node, message.shutdown(), out);
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

// ---------------------------------------------------------------------------------------
// Outgoing messages

void Scheduler::Deliver(const Outbox& out) {
  for (const OutgoingControl& m : out.messages()) Send(m.to, m.message);
  const int64_t now = MonotonicMs();
  for (const Refusal& r : out.refusals()) {
    refusals_.RefuseAndLog(r.from, r.log_line, now);
    if (status_ != nullptr) status_->CountRefused();
  }
  if (out.job_end().has_value() && !final_status_.has_value()) final_status_ = *out.job_end();
}

void Scheduler::Send(const std::string& identity, const proto::ControlMessage& message) {
  std::vector<zmq::message_t> frames;
  frames.emplace_back(identity.data(), identity.size());
  frames.push_back(ProtoFrame(message));
  // ROUTER drops messages to peers that have gone; that is what we want for a dead node.
  if (absl::Status s = SendFrames(*socket_, frames, /*dont_wait=*/true); !s.ok()) {
    BC_LOG_WARNING("could not send ", BodyName(message), " to ", PrintableIdentity(identity),
                   ": ", s.message());
  }
}

}  // namespace bytecomp
