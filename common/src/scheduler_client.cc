#include "bytecomp/common/scheduler_client.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bytecomp/common/config.h"
#include "bytecomp/common/control_parts.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/common/net.h"
#include "bytecomp/common/sealed_messages.h"
#include "bytecomp/common/socket_limits.h"
#include "bytecomp/common/transport.h"

namespace bytecomp {

SchedulerClient::SchedulerClient(zmq::context_t& context, proto::ClusterConfig config,
                                 const SocketSecurity& security)
    : config_(std::move(config)),
      security_(security),
      token_(NewNodeToken()),
      socket_(context, zmq::socket_type::dealer) {
  ConfigureSocket(socket_);
  LimitSocket(socket_, NodeControlSocketLimits());
  security_.SecureConnecting(socket_);
  // No routing id of our own: ZeroMQ gives each connection a fresh one, and the scheduler
  // knows this node by its token on whichever connection it comes (after a TCP reconnect,
  // the next message moves the node there). A fixed id would collide with the old
  // connection's until the scheduler drops it, and meanwhile ZeroMQ drops our messages.
}

absl::StatusOr<proto::Topology> SchedulerClient::Register(proto::Role role, int requested_rank,
                                                          const std::string& data_address) {
  // A name that does not resolve is said at once: ZeroMQ would retry it until the connect
  // timeout, which then reads as "the scheduler is not running".
  absl::StatusOr<HostPort> where = ParseHostPort(config_.scheduler_address());
  if (!where.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("scheduler address: ", where.status().message()));
  }
  if (absl::Status s = ResolveHost(where->host); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scheduler host '", where->host, "' (scheduler_address ", config_.scheduler_address(),
        ", BYTECOMP_SCHEDULER or --scheduler) does not resolve: ", s.message()));
  }
  const std::string endpoint = absl::StrCat("tcp://", config_.scheduler_address());
  if (absl::StatusOr<HostPort> hp = ParseHostPort(config_.scheduler_address()); hp.ok()) {
    if (absl::Status s = security_.CheckPlainHost(hp->host, "the scheduler address"); !s.ok()) {
      return s;
    }
  }
  // Registration only: a scheduler with another cluster key, or none, is reported at once.
  const std::unique_ptr<HandshakeWatch> handshakes = security_.WatchHandshakes(socket_);
  try {
    socket_.connect(endpoint);
  } catch (const zmq::error_t& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot connect to scheduler ", config_.scheduler_address(), ": ", e.what()));
  }
  proto::ControlMessage msg;
  proto::Register* reg = msg.mutable_register_();
  reg->set_role(role);
  reg->set_requested_rank(requested_rank);
  reg->set_data_address(data_address);
  reg->set_hostname(Hostname());
  reg->set_pid(getpid());
  reg->set_token(TokenBytes(token_));
  if (SealsDataFrames(config_) && data_key_.empty()) {
    absl::StatusOr<DataKey> key = NewDataKey(0);
    if (!key.ok()) return key.status();
    data_key_ = DataKeyBytes(*key);
  }
  reg->set_data_key(data_key_);
  if (role == proto::ROLE_WORKER) {
    reg->set_machine(machine_.empty() ? Hostname() : machine_);
    if (local_rank_.has_value()) reg->set_requested_local_rank(*local_rank_);
    if (local_size_.has_value()) reg->set_declared_local_size(*local_size_);
  }
  registration_ = *reg;
  // A connection whose handshake has already failed (a scheduler with another key, or none,
  // answers fast) leaves the DEALER no pipe, and the Register cannot go: it is tried again
  // below, where the handshake's failure is reported, until it goes or the deadline passes.
  bool register_sent = false;
  const auto send_register = [&]() -> absl::Status {
    absl::Status sent = Send(msg);
    if (absl::IsResourceExhausted(sent)) return absl::OkStatus();
    if (!sent.ok()) return sent;
    register_sent = true;
    SendClockProbe();
    return absl::OkStatus();
  };
  if (absl::Status s = send_register(); !s.ok()) return s;

  const int64_t deadline = MonotonicMs() + config_.connect_timeout_ms();
  while (true) {
    const int64_t left = deadline - MonotonicMs();
    if (left <= 0) {
      return absl::DeadlineExceededError(absl::StrCat(
          "no topology from the scheduler at ", config_.scheduler_address(), " within ",
          config_.connect_timeout_ms() / 1000.0,
          " s (is bytecomp-scheduler running there, and have all nodes started?",
          security_.keyed() ? " Does it use this node's cluster key? A scheduler with another "
                              "key, or none, never answers)"
                            : " If the job has a cluster key, this node needs it too: "
                              "BYTECOMP_KEY_FILE or key_file)"));
    }
    if (std::optional<std::string> failure = handshakes->Failure()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot register with the scheduler at ", config_.scheduler_address(), ": ", *failure));
    }
    // Registered nodes hear the scheduler's heartbeats while the others join: a scheduler that
    // fell silent after that is said as such.
    if (last_heard_ms_ > 0) {
      if (absl::Status s = CheckSchedulerHeard(); !s.ok()) return s;
    }
    if (!register_sent) {
      if (absl::Status s = send_register(); !s.ok()) return s;
    }
    // Keep heartbeating while waiting: the scheduler must not declare us dead during a slow
    // rendezvous.
    if (register_sent) HeartbeatIfDue();
    absl::StatusOr<std::optional<proto::ControlMessage>> reply =
        Receive(static_cast<int>(std::min<int64_t>(left, kClockProbeGapMs)));
    if (!reply.ok()) return reply.status();
    if (!reply->has_value()) continue;
    const proto::ControlMessage& m = **reply;
    if (m.has_topology()) {
      // Every node follows the job's timing: heartbeats, and when the scheduler counts as silent.
      const proto::ClusterConfig& job = m.topology().config();
      if (job.heartbeat_interval_ms() > 0)
        config_.set_heartbeat_interval_ms(job.heartbeat_interval_ms());
      if (job.heartbeat_timeout_ms() > 0)
        config_.set_heartbeat_timeout_ms(job.heartbeat_timeout_ms());
      config_.set_scheduler_timeout_ms(job.scheduler_timeout_ms());
      // What a rejoin (the scheduler restarted) says: this node's rank, machine slot and token.
      registration_.set_requested_rank(m.topology().your_rank());
      if (role == proto::ROLE_WORKER) {
        registration_.set_requested_local_rank(m.topology().local_rank());
        registration_.set_declared_local_size(m.topology().local_size());
      }
      record_.Registered(m.topology());
      registered_ = true;
      return m.topology();
    }
    if (m.has_error()) {
      return absl::FailedPreconditionError(
          absl::StrCat("scheduler at ", config_.scheduler_address(),
                       " rejected registration: ", m.error().message()));
    }
    if (m.has_shutdown()) {
      return absl::CancelledError(
          absl::StrCat("scheduler shut the job down during start-up: ", m.shutdown().reason()));
    }
  }
}

void SchedulerClient::SetMachineSlot(std::string machine, std::optional<int> local_rank,
                                     std::optional<int> local_size) {
  machine_ = std::move(machine);
  local_rank_ = local_rank;
  local_size_ = local_size;
}

absl::Status SchedulerClient::Send(const proto::ControlMessage& message) {
  last_sent_ms_ = MonotonicMs();
  if (message.has_register_()) {
    // Register goes at once and alone (its caller watches the handshake), without a token.
    std::vector<zmq::message_t> frames;
    frames.push_back(ProtoFrame(message));
    return SendFrames(socket_, frames, /*dont_wait=*/true);
  }
  record_.Sent(message);
  // A message larger than the scheduler's frames (a profile or rejoin report of a large
  // model) goes in parts, each with the token.
  for (proto::ControlMessage& piece : SplitControlMessage(message, ++split_messages_)) {
    piece.set_token(TokenBytes(token_));
    if (absl::Status s = SendWaiting(piece); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status SchedulerClient::SendWaiting(const proto::ControlMessage& message) {
  std::vector<zmq::message_t> frames;
  frames.push_back(ProtoFrame(message));
  // Never blocks without a bound: a DEALER whose only connection failed its handshake (a key
  // mismatch) has no pipe left, and a blocking send would wait forever. A message whose queue
  // is full (a burst of declarations beyond the socket's bounded queue) waits for room while
  // the scheduler reads, at most the scheduler timeout.
  absl::Status sent = SendFrames(socket_, frames, /*dont_wait=*/true);
  if (!absl::IsResourceExhausted(sent)) return sent;
  const int64_t deadline = MonotonicMs() + SchedulerTimeoutMs(config_);
  while (absl::IsResourceExhausted(sent)) {
    const int64_t left = deadline - MonotonicMs();
    if (left <= 0) {
      return absl::UnavailableError(
          absl::StrCat("the scheduler at ", config_.scheduler_address(), " took no message for ",
                       SchedulerTimeoutMs(config_), " ms (its queue toward it is full)"));
    }
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLOUT, 0};
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(std::min<int64_t>(left, 100)));
    } catch (const zmq::error_t& e) {
      return absl::UnavailableError(absl::StrCat("zmq poll: ", e.what()));
    }
    sent = SendFrames(socket_, frames, /*dont_wait=*/true);
  }
  return sent;
}

void SchedulerClient::HeartbeatIfDue() {
  // Clock probes: the first ones kClockProbeGapMs apart (one at a time, so that none waits
  // behind another), then one per heartbeat interval.
  const int64_t now = MonotonicMs();
  const int64_t probe_gap =
      clock_probes_ < kQuickClockProbes ? kClockProbeGapMs : config_.heartbeat_interval_ms();
  if (now - last_probe_ms_ >= probe_gap) SendClockProbe();
  if (now - last_sent_ms_ < config_.heartbeat_interval_ms()) return;
  proto::ControlMessage msg;
  msg.mutable_heartbeat()->set_sequence(++heartbeat_sequence_);
  if (absl::Status s = Send(msg); !s.ok()) BC_LOG_WARNING("heartbeat not sent: ", s.ToString());
}

void SchedulerClient::SendClockProbe() {
  ++clock_probes_;
  last_probe_ms_ = MonotonicMs();
  proto::ControlMessage probe;
  probe.mutable_clock_probe()->set_node_sent_us(ClockOffset::NowUs());
  (void)Send(probe);  // a lost probe only leaves the estimate as it was
}

absl::StatusOr<std::optional<proto::ControlMessage>> SchedulerClient::Receive(int timeout_ms) {
  absl::StatusOr<std::vector<zmq::message_t>> frames =
      RecvFrames(socket_, std::chrono::milliseconds(timeout_ms));
  if (!frames.ok()) return frames.status();
  if (frames->empty()) return std::optional<proto::ControlMessage>();
  proto::ControlMessage msg;
  if (absl::Status s = ParseFrame(frames->back(), &msg); !s.ok()) {
    BC_LOG_WARNING("ignoring control frame from scheduler: ", s.ToString());
    return std::optional<proto::ControlMessage>();
  }
  last_heard_ms_ = MonotonicMs();
  if (msg.has_clock_reply()) {
    clock_->AddSample(msg.clock_reply().node_sent_us(), msg.clock_reply().scheduler_us(),
                      ClockOffset::NowUs());
    return std::optional<proto::ControlMessage>();
  }
  if (registered_) {
    if (msg.has_error() && msg.error().not_registered()) {
      // The scheduler does not know this node: it restarted. Rejoin (at most once per
      // heartbeat interval: every message sent meanwhile gets the same answer).
      if (absl::Status s = Rejoin(); !s.ok()) return s;
      return std::optional<proto::ControlMessage>();
    }
    if (msg.has_error() && msg.error().registration_refused() && rejoining_) {
      return absl::FailedPreconditionError(
          absl::StrCat("the scheduler at ", config_.scheduler_address(),
                       " restarted and refused this node's rejoin: ", msg.error().message()));
    }
    if (msg.has_rejoined()) {
      rejoining_ = false;
      const std::vector<proto::ControlMessage> again = record_.Unanswered();
      BC_LOG_INFO("the restarted scheduler at ", config_.scheduler_address(),
                  " took the job up (strategy version ", msg.rejoined().strategy_version(),
                  "); sending again ", again.size(), " unanswered messages");
      for (const proto::ControlMessage& m : again) {
        if (absl::Status s = Send(m); !s.ok()) return s;
      }
      return std::optional<proto::ControlMessage>();
    }
    record_.Received(msg);
  }
  return std::optional<proto::ControlMessage>(std::move(msg));
}

absl::Status SchedulerClient::Rejoin() {
  const int64_t now = MonotonicMs();
  if (rejoining_ && now - last_rejoin_ms_ < config_.heartbeat_interval_ms()) {
    return absl::OkStatus();
  }
  if (!rejoining_) {
    BC_LOG_WARNING("the scheduler at ", config_.scheduler_address(),
                   " does not know this node: it restarted; rejoining the job as ",
                   registration_.role() == proto::ROLE_SERVER ? "server " : "worker ",
                   registration_.requested_rank());
  }
  rejoining_ = true;
  last_rejoin_ms_ = now;
  proto::ControlMessage msg;
  *msg.mutable_register_() = registration_;
  msg.mutable_register_()->set_rejoining(true);
  if (absl::Status s = Send(msg); !s.ok()) return s;
  // What this node knows follows on the same connection, after the Register.
  proto::ControlMessage report;
  *report.mutable_rejoin_report() = record_.Report();
  return Send(report);
}

absl::Status SchedulerClient::CheckSchedulerHeard() const {
  const int64_t now = MonotonicMs();
  const int64_t stalled = last_checked_ms_ > 0 ? now - last_checked_ms_ : 0;
  last_checked_ms_ = now;
  const int64_t silent = now - last_heard_ms_;
  const int64_t limit = SchedulerTimeoutMs(config_);
  if (last_heard_ms_ == 0 || silent < limit) return absl::OkStatus();
  if (2 * stalled >= silent) {
    return absl::UnavailableError(absl::StrFormat(
        "this process did not run for %.1f s (stopped, e.g. by SIGSTOP, or its host stalled) "
        "and has not heard the scheduler at %s for %.1f s (scheduler_timeout_ms %d): the job "
        "has gone on without it",
        stalled / 1000.0, config_.scheduler_address(), silent / 1000.0, limit));
  }
  return absl::UnavailableError(absl::StrFormat(
      "the scheduler at %s has been silent for %.1f s (scheduler_timeout_ms %d): it died, hangs "
      "or cannot be reached",
      config_.scheduler_address(), silent / 1000.0, limit));
}

}  // namespace bytecomp
