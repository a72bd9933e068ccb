#include "control_loop.h"

#include "absl/strings/str_cat.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/common/refusal_log.h"

namespace bytecomp::worker {

void ControlLoop::Run() {
  bool stop = false;
  while (!stop) {
    zmq::pollitem_t items[] = {{client_->socket().handle(), 0, ZMQ_POLLIN, 0},
                               {nullptr, commands_.fd(), ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 2, std::chrono::milliseconds(client_->config().heartbeat_interval_ms()));
    } catch (const zmq::error_t& e) {
      engine_.OnJobFailed(absl::UnavailableError(absl::StrCat("control poll: ", e.what())));
      return;
    }
    if (items[1].revents & ZMQ_POLLIN) {
      for (ControlCommand& cmd : commands_.TakeAll()) {
        if (std::holds_alternative<StopControl>(cmd)) {
          stop = true;
        } else if (auto* send = std::get_if<SendControl>(&cmd)) {
          if (send->message.has_worker_done()) done_sent_ = true;
          if (absl::Status s = client_->Send(send->message); !s.ok()) {
            engine_.OnJobFailed(absl::UnavailableError(
                absl::StrCat("cannot reach the scheduler at ",
                             client_->config().scheduler_address(), ": ", s.message())));
          }
        }
      }
    }
    while (items[0].revents & ZMQ_POLLIN) {
      absl::StatusOr<std::optional<proto::ControlMessage>> msg = client_->Receive(0);
      if (!msg.ok()) {
        engine_.OnJobFailed(msg.status());  // e.g. a restarted scheduler refused the rejoin
        break;
      }
      if (!msg->has_value()) break;  // none, or one the client took (clock, rejoin): poll again
      Handle(**msg);
    }
    if (!done_sent_) {
      if (std::optional<proto::ControlMessage> report = engine_.DueReport())
        (void)client_->Send(*report);
      client_->HeartbeatIfDue();
      // A scheduler that fell silent (killed, frozen, cut off) fails every wait, naming it.
      if (absl::Status heard = client_->CheckSchedulerHeard(); !heard.ok() && !scheduler_silent_) {
        scheduler_silent_ = true;
        engine_.OnJobFailed(heard);
      }
    }
  }
}

void ControlLoop::Handle(const proto::ControlMessage& m) {
  if (m.has_declare_reply()) {
    engine_.OnDeclareReply(m.declare_reply());
  } else if (m.has_strategy_prepare()) {
    proto::ControlMessage reply;
    proto::StrategyPrepareReply* r = reply.mutable_strategy_prepare_reply();
    r->set_version(m.strategy_prepare().version());
    r->set_highest_started_round(engine_.OnStrategyPrepare(m.strategy_prepare().version()));
    if (absl::Status s = client_->Send(reply); !s.ok())
      BC_LOG_ERROR("strategy reply: ", s.message());
  } else if (m.has_strategy_commit()) {
    engine_.OnStrategyCommit(m.strategy_commit().strategy());
  } else if (m.has_barrier_release()) {
    engine_.OnBarrierRelease(m.barrier_release());
  } else if (m.has_collective_store_value()) {
    engine_.OnCollectiveStoreValue(m.collective_store_value());
  } else if (m.has_node_failed() && m.node_failed().replacement_wait_ms() > 0) {
    // A lost server, with failover: its rounds wait for the replacement (ServerReplaced).
    const proto::NodeFailed& f = m.node_failed();
    BC_LOG_WARNING("server ", f.node().rank(), " (", Printable(f.data_address(), 256),
                   ") was lost: ", Printable(f.reason(), 512), "; its rounds wait up to ",
                   f.replacement_wait_ms() / 1000.0, " s for a replacement");
  } else if (m.has_keys_moved()) {
    BC_LOG_WARNING("server ", m.keys_moved().from_rank(),
                   " was not replaced in time: its partitions move to the other servers; pushing "
                   "to them what it had not answered");
    engine_.OnKeysMoved(m.keys_moved());
  } else if (m.has_server_replaced()) {
    const proto::ServerReplaced& r = m.server_replaced();
    BC_LOG_WARNING("server ", r.rank(), " is replaced by ", Printable(r.data_address(), 256),
                   ": pushing to it again what the lost one had not answered");
    engine_.OnServerReplaced(r);
  } else if (m.has_node_failed()) {
    const proto::NodeFailed& f = m.node_failed();
    const bool server = f.node().role() == proto::ROLE_SERVER;
    std::string who = absl::StrCat(server ? "server " : "worker ", f.node().rank());
    if (!f.data_address().empty()) absl::StrAppend(&who, " (", f.data_address(), ")");
    engine_.OnJobFailed(absl::UnavailableError(absl::StrCat(who, " failed: ", f.reason())));
  } else if (m.has_shutdown()) {
    if (!done_sent_) {
      engine_.OnJobFailed(absl::UnavailableError(
          absl::StrCat("the scheduler shut the job down: ", m.shutdown().reason())));
    }
  } else if (m.has_error()) {
    BC_LOG_ERROR("scheduler: ", Printable(m.error().message(), 1024));
  }
}

}  // namespace bytecomp::worker
