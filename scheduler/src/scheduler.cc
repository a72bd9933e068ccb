#include "bytecomp/scheduler/scheduler.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <deque>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/config.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/common/net.h"
#include "bytecomp/common/socket_limits.h"
#include "bytecomp/common/transport.h"
#include "log_format.h"
#include "status_service.h"

namespace bytecomp {
namespace {

// Upper bound on one poll, so that Stop() from another thread is seen promptly. Signals
// interrupt the poll at once.
constexpr int64_t kMaxPollMs = 100;
// The poll while messages wait in a node's backlog.
constexpr int64_t kBacklogPollMs = 2;

std::string SignalName(int signal_number) {
  switch (signal_number) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    default:
      return absl::StrCat("signal ", signal_number);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(SchedulerOptions options) {
  if (absl::Status s = ValidateClusterConfig(options.config); !s.ok()) return s;
  StrategyKeeper strategy(options.config);
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
    auto_plan->plan_out = options.plan_out_path.empty() ? DefaultPlanOut() : options.plan_out_path;
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
  if (absl::Status s =
          (*security)->SecureListening(*socket, SchedulerConnectionCaps(options.config));
      !s.ok()) {
    return s;
  }
  LimitSocket(*socket, SchedulerSocketLimits());
  // A send to a node whose queue is full fails (EAGAIN) instead of vanishing: the message
  // waits in the node's backlog (Send). A send to a peer that has gone fails too (dropped).
  socket->set(zmq::sockopt::router_mandatory, 1);
  // No ZMQ_ROUTER_HANDOVER: with it, a peer that connects with a node's routing id would take
  // that node's connection over, and with it every message the scheduler sends the node. A
  // routing id held by a live connection stays its own. A node is its token: a message with
  // it on a new connection moves the node there (HandleFrames).
  absl::StatusOr<int> bound = BindTcp(*socket, options.bind_host, port);
  if (!bound.ok()) {
    return absl::UnavailableError(absl::StrCat("scheduler: ", bound.status().message(),
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
      new Scheduler(std::move(options), std::move(context), *std::move(security), std::move(socket),
                    *bound, std::move(strategy), std::move(auto_plan), start_ms));
  scheduler->status_ = std::move(status);
  scheduler->router_.set_observer(scheduler->status_.get());
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
      router_(config_, std::move(strategy), std::move(auto_plan), start_ms) {}

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
      router_.Stop(signal_number != 0
                       ? absl::StrCat("scheduler received ", SignalName(signal_number))
                       : std::string("scheduler was stopped"),
                   &out);
      Deliver(out);
      break;
    }
    if (reload_requested_.exchange(false)) {
      Outbox out;
      router_.Reload(&out);
      Deliver(out);
    }
    FlushBacklog();
    const int64_t now = MonotonicMs();
    // While a node's messages wait for room, look again soon (a ROUTER is always writable to
    // zmq_poll, so room is not something to poll for).
    const int64_t max_wait = backlog_.empty() ? kMaxPollMs : kBacklogPollMs;
    const int64_t wait_ms =
        std::clamp<int64_t>(router_.NextDeadlineMs(now, now + max_wait) - now, 0, max_wait);
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
      router_.SendHeartbeats(MonotonicMs(), &out);
      Deliver(out);
    }
    if (drained && !final_status_.has_value()) {
      const int64_t checked_at = MonotonicMs();
      Outbox out;
      router_.OnTime(checked_at, &out);
      Deliver(out);
      if (status_ != nullptr) {
        status_->MaybePublish(checked_at, router_.nodes(), router_.strategy().keeper().current(),
                              options_.auto_strategy           ? "auto"
                              : options_.strategy_path.empty() ? "none"
                                                               : options_.strategy_path,
                              router_.strategy().predicted_us(), refusals_.refused());
      }
    }
  }
  // The last messages (Shutdown) get the linger time to find room.
  for (const int64_t until = MonotonicMs() + options_.shutdown_linger_ms;
       !backlog_.empty() && MonotonicMs() < until;) {
    FlushBacklog();
    if (!backlog_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(kBacklogPollMs));
  }
  if (refusals_.refused() > 0) BC_LOG_INFO("bad messages: ", refusals_.Summary());
  return *final_status_;
}

// ---------------------------------------------------------------------------------------
// Incoming messages

void Scheduler::HandleFrames(std::vector<zmq::message_t>& frames, int64_t now_ms, Outbox* out) {
  if (frames.empty()) return;
  const std::string identity = FrameToString(frames[0]);
  if (frames.size() != 2) {
    out->Refuse(identity,
                absl::StrCat("expected one frame holding a ControlMessage, got ", frames.size() - 1,
                             " frames"),
                absl::StrCat("malformed message from ", router_.Who(identity), ": ",
                             frames.size() - 1, " frames, expected 1 (a ControlMessage)"));
    return;
  }
  proto::ControlMessage message;
  if (absl::Status s = ParseFrame(frames[1], &message); !s.ok()) {
    out->Refuse(identity, std::string(s.message()),
                absl::StrCat("from ", router_.Who(identity), ": ", s.message()));
    return;
  }
  router_.Handle(identity, message, now_ms, out);
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

absl::Status Scheduler::TrySend(const std::string& identity, const proto::ControlMessage& message) {
  std::vector<zmq::message_t> frames;
  frames.emplace_back(identity.data(), identity.size());
  frames.push_back(ProtoFrame(message));
  return SendFrames(*socket_, frames, /*dont_wait=*/true);
}

void Scheduler::Send(const std::string& identity, const proto::ControlMessage& message) {
  if (auto waiting = backlog_.find(identity); waiting != backlog_.end()) {
    return Hold(waiting->second, identity, message);  // behind what waits already
  }
  const absl::Status sent = TrySend(identity, message);
  if (sent.ok()) return;
  if (absl::IsResourceExhausted(sent)) {
    // The node's queue is full (it reads slower than, say, a burst of declaration replies
    // comes): it waits here. A peer that is no node gets no such room: what it does not
    // read is dropped, so that nobody grows the scheduler by sending and never reading.
    if (router_.nodes().Find(identity) != nullptr) Hold(backlog_[identity], identity, message);
    return;
  }
  // The peer has gone (a dead node, a connection that closed): nothing to send it.
  BC_LOG_DEBUG("could not send ", BodyName(message), " to ", PrintableIdentity(identity), ": ",
               sent.message());
}

void Scheduler::Hold(Backlog& backlog, const std::string& identity,
                     const proto::ControlMessage& message) {
  const size_t limit = 4 * static_cast<size_t>(config_.max_tensors()) + 10000;
  if (backlog.messages.size() >= limit) {
    if (!backlog.overflowed) {
      BC_LOG_WARNING(router_.Who(identity), " has not read ", limit,
                     " messages of the scheduler's: dropping what comes beyond them");
    }
    backlog.overflowed = true;
    return;
  }
  backlog.messages.push_back(message);
}

void Scheduler::FlushBacklog() {
  for (auto it = backlog_.begin(); it != backlog_.end();) {
    std::deque<proto::ControlMessage>& waiting = it->second.messages;
    while (!waiting.empty()) {
      const absl::Status sent = TrySend(it->first, waiting.front());
      if (absl::IsResourceExhausted(sent)) break;
      if (!sent.ok()) {  // gone
        waiting.clear();
        break;
      }
      waiting.pop_front();
    }
    it = waiting.empty() ? backlog_.erase(it) : std::next(it);
  }
}

}  // namespace bytecomp
