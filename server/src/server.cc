#include "bytecomp/server/server.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/common.h"
#include "bytecomp/server/key_shard.h"
#include "bytecomp/server/request_dispatcher.h"
#include "bytecomp/server/server_job.h"
#include "bytecomp/server/shard_messages.h"
#include "bytecomp/telemetry.h"
#include "control.pb.h"
#include "server_threads.h"

namespace bytecomp::server {
namespace {

// What a server shows of itself when asked: its timeline and its metrics (and their HTTP
// server). Declared before the threads that use them, so that it outlives them.
struct ServerTelemetry {
  std::unique_ptr<telemetry::Timeline> timeline;
  std::unique_ptr<telemetry::NodeMetrics> metrics;
  std::unique_ptr<telemetry::HttpServer> http;  // last: stopped before the metrics go
};

ServerTelemetry StartTelemetry(const ServerOptions& options, const proto::ClusterConfig& config,
                               int rank, std::shared_ptr<const ClockOffset> clock) {
  ServerTelemetry t;
  t.timeline = telemetry::OpenNodeTimeline(config.timeline_dir(), "server", rank, std::move(clock));
  if (!options.http_address.empty()) {
    t.metrics = std::make_unique<telemetry::NodeMetrics>("server", rank);
    t.http = telemetry::ServeMetrics(options.http_address, t.metrics.get());
    if (t.http == nullptr) t.metrics.reset();
  }
  return t;
}

// The data socket's limits follow the job's configuration, which the server learns only with
// the topology, after it bound (its address goes into its Register); it bound with its own
// configuration's. Options apply to connections accepted later, so when the job's messages may
// be larger, the same port is bound again with the job's limits, at once: workers connect
// once they have the topology, and ZeroMQ retries a refused connect. (A smaller job limit
// keeps the larger bound one.)
absl::Status RebindWithLimits(zmq::socket_t& router, const SocketLimits& bound_with,
                              const SocketLimits& job) {
  if (job.max_message_bytes <= bound_with.max_message_bytes) return absl::OkStatus();
  const std::string endpoint = router.get(zmq::sockopt::last_endpoint);
  try {
    router.unbind(endpoint);
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("cannot unbind ", endpoint, ": ", e.what()));
  }
  LimitSocket(router, job);
  // ZeroMQ closes the old listener on its I/O thread: the port is free a moment later.
  const int64_t deadline = MonotonicMs() + 2000;
  while (true) {
    try {
      router.bind(endpoint);
      return absl::OkStatus();
    } catch (const zmq::error_t& e) {
      if (e.num() != EADDRINUSE || MonotonicMs() > deadline) {
        return absl::UnavailableError(absl::StrCat(
            "cannot bind ", endpoint, " again with the job's message limit: ", e.what()));
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// One thread's sealer of this server's replies (its own key, id = its rank; `seal_key`, made
// by the first call, shared by all) and opener of the workers' requests; none where the job
// does not seal (no worker keys in the topology).
absl::StatusOr<DataSeals> MakeDataSeals(const ServerJob& job, const std::string& own_key,
                                        std::unique_ptr<SealKey>& seal_key) {
  DataSeals seals;
  if (job.worker_data_keys.empty() && own_key.empty()) return seals;
  if (job.worker_data_keys.empty() || own_key.empty()) {
    return absl::FailedPreconditionError(
        own_key.empty() ? "the job seals its data messages and this server does not: give every "
                          "node the job's data_protection"
                        : "this server seals its data messages and the job does not: give every "
                          "node the job's data_protection");
  }
  const uint32_t rank = static_cast<uint32_t>(job.my_rank);
  absl::StatusOr<DataKey> key = DataKeyFromBytes(own_key, rank, "this server");
  if (!key.ok()) return key.status();
  // One key, one counter: every thread's sealer shares it.
  if (seal_key == nullptr) {
    seal_key = std::make_unique<SealKey>(DataProtectionOf(job.config), *key, rank);
  }
  return NewDataSeals(seal_key.get(), job.worker_data_keys);
}

}  // namespace

absl::Status AggregationServer::Run() {
  const proto::ClusterConfig& config = options_.config;
  // Two I/O threads by default: several TCP streams per server (more for CURVE on a fast link).
  absl::StatusOr<int> io_threads = ZmqIoThreads(2);
  if (!io_threads.ok()) return io_threads.status();
  zmq::context_t ctx(*io_threads);
  // Declared after the context and before the sockets: its ZAP handler outlives the ROUTER.
  absl::StatusOr<std::unique_ptr<SocketSecurity>> security =
      SocketSecurity::FromConfig(ctx, config);
  if (!security.ok()) return security.status();
  absl::StatusOr<std::string> bind_host = (*security)->ListenHost(options_.bind_host, "server");
  if (!bind_host.ok()) return bind_host.status();

  absl::StatusOr<std::string> advertised =
      AdvertisedHost(config.advertise_host(), config.scheduler_address());
  if (!advertised.ok()) return advertised.status();
  const std::string host = *advertised;
  if (absl::Status s = (*security)->CheckPlainHost(host, "server: the data address it advertises");
      !s.ok()) {
    return s;
  }

  zmq::socket_t router(ctx, zmq::socket_type::router);
  ConfigureSocket(router);
  const SocketLimits bound_with = DataSocketLimits(config);
  LimitSocket(router, bound_with);
  router.set(zmq::sockopt::router_mandatory, 0);
  // Sealed data messages (sealed_messages.h) need no CURVE below them: every message a peer
  // without a worker's data key sends is refused by the I/O thread.
  const bool sealed = SealsDataFrames(config);
  // Connections are capped from the job either way (partial messages hold memory).
  if (absl::Status s = sealed ? (*security)->CapConnections(router, DataConnectionCaps(config))
                              : (*security)->SecureListening(router, DataConnectionCaps(config));
      !s.ok()) {
    return s;
  }
  absl::StatusOr<int> port = BindTcp(router, *bind_host, options_.port);
  if (!port.ok()) return port.status();
  const std::string data_address = TcpEndpoint(host, *port);

  SchedulerClient scheduler(ctx, config, **security);
  absl::StatusOr<proto::Topology> topology =
      scheduler.Register(proto::ROLE_SERVER, options_.requested_rank, data_address);
  if (!topology.ok()) return topology.status();
  absl::StatusOr<ServerJob> job = ServerJob::FromTopology(*topology);
  if (!job.ok()) return job.status();
  const int rank = job->my_rank;
  SetLogIdentity(absl::StrCat("server ", rank));
  // The caps were set from this server's own config; the job's worker count is the topology's.
  (*security)->UpdateConnectionCaps(router, DataConnectionCaps(job->config));
  if (absl::Status s = RebindWithLimits(router, bound_with, DataSocketLimits(job->config));
      !s.ok()) {
    // Tell the others at once rather than let them wait for this server's heartbeats to stop.
    proto::ControlMessage bye;
    bye.mutable_shutdown()->set_reason(absl::StrCat("server ", rank, ": ", s.message()));
    (void)scheduler.Send(bye);
    scheduler.socket().set(zmq::sockopt::linger, 1000);  // let the Shutdown leave
    return s;
  }
  const size_t num_shards = static_cast<size_t>(std::max(1, job->config.key_shard_threads()));
  BC_LOG_INFO("serving data on ", data_address, " for ", job->num_workers, " workers with ",
              num_shards, " key shard threads; ", (*security)->Describe(),
              sealed ? absl::StrCat("; data messages sealed (data_protection: ",
                                    DataProtectionSetting(job->config), ")")
                     : "");
  if (job->replaces_lost_server) {
    BC_LOG_WARNING("this server replaces the lost server ", rank,
                   ": each key resumes once every worker told where it stands (its replays), "
                   "and the two-way error-feedback memory of these keys starts from zero");
  }

  ServerTelemetry telemetry = StartTelemetry(options_, job->config, rank, scheduler.shared_clock());
  ServerQueues queues(num_shards);
  WakeQueue<ServerCommand>& to_io = queues.commands;
  RequestDispatcher dispatcher(*job, num_shards);
  std::unique_ptr<SealKey> seal_key;  // outlives the I/O thread's sealer
  dispatcher.Observe(telemetry.metrics.get());
  absl::StatusOr<DataSeals> seals = MakeDataSeals(*job, scheduler.data_key(), seal_key);
  if (!seals.ok()) return seals.status();
  const bool sealing = seals->on();
  IoLoop io(router, std::move(dispatcher), queues, *std::move(seals));
  // Each shard thread opens its requests' payloads and seals its replies (where the job seals):
  // the work spreads over them.
  std::vector<DataSeals> shard_seals(num_shards);
  for (size_t i = 0; sealing && i < num_shards; ++i) {
    absl::StatusOr<DataSeals> made = MakeDataSeals(*job, scheduler.data_key(), seal_key);
    if (!made.ok()) return made.status();
    shard_seals[i] = *std::move(made);
  }
  std::vector<std::unique_ptr<KeyShard>> shards;
  std::vector<std::thread> shard_threads;
  for (size_t i = 0; i < num_shards; ++i) {
    shards.push_back(std::make_unique<KeyShard>(static_cast<int>(i), *job));
    shards.back()->Observe(telemetry.timeline.get(), telemetry.metrics.get());
    shard_threads.emplace_back(RunKeyShard, std::ref(*queues.to_shards[i]),
                               std::ref(queues.replies), std::ref(*shards.back()),
                               sealing ? &shard_seals[i] : nullptr);
  }
  std::thread io_thread([&io] { io.Run(); });
  to_io.Push(StrategyCommand{std::make_shared<const proto::Strategy>(topology->strategy())});

  absl::Status result = absl::OkStatus();
  while (true) {
    if (stop_requested_.load()) {
      BC_LOG_INFO("stop requested by signal");
      proto::ControlMessage bye;
      bye.mutable_shutdown()->set_reason(absl::StrCat("server ", rank, " received a stop signal"));
      (void)scheduler.Send(bye);
      result = absl::CancelledError("stopped by signal");
      break;
    }
    scheduler.HeartbeatIfDue();
    absl::StatusOr<std::optional<proto::ControlMessage>> msg = scheduler.Receive(200);
    if (!msg.ok()) {
      result = msg.status();
      break;
    }
    if (!msg->has_value()) {
      // A scheduler that fell silent (killed, frozen, cut off; or this server was frozen and
      // the job went on without it) ends this server too, naming it.
      if (absl::Status heard = scheduler.CheckSchedulerHeard(); !heard.ok()) {
        to_io.Push(FailCommand{std::string(heard.message())});
        result = heard;
        break;
      }
      continue;
    }
    const proto::ControlMessage& m = **msg;
    if (m.has_declare_reply() && m.declare_reply().ok()) {
      to_io.Push(DeclareCommand{std::make_shared<const proto::DeclareReply>(m.declare_reply())});
    } else if (m.has_strategy_commit()) {
      to_io.Push(
          StrategyCommand{std::make_shared<const proto::Strategy>(m.strategy_commit().strategy())});
    } else if (m.has_node_failed() && m.node_failed().replacement_wait_ms() > 0) {
      // A lost server: the job waits for its replacement, or moves its keys here (KeysMoved).
      BC_LOG_WARNING("server ", m.node_failed().node().rank(), " was lost (",
                     Printable(m.node_failed().reason(), 512),
                     "); the job waits for its replacement");
      to_io.Push(LostCommand{m.node_failed().node().rank()});
    } else if (m.has_keys_moved()) {
      to_io.Push(MoveCommand{std::make_shared<const proto::KeysMoved>(m.keys_moved())});
    } else if (m.has_node_failed()) {
      // Named as the workers name it ("worker 2 failed: ..."), whichever news reaches them first.
      const proto::NodeId& node = m.node_failed().node();
      const std::string reason =
          absl::StrCat(node.role() == proto::ROLE_SERVER ? "server " : "worker ", node.rank(),
                       " failed: ", Printable(m.node_failed().reason(), 512));
      BC_LOG_ERROR(reason);
      to_io.Push(FailCommand{reason});
    } else if (m.has_shutdown()) {
      const std::string reason = Printable(m.shutdown().reason(), 1024);
      BC_LOG_INFO("shutdown: ", reason);
      // Only the end of a finished job is a clean exit.
      if (!m.shutdown().job_done()) {
        result = absl::AbortedError(absl::StrCat("the job stopped: ", reason));
      }
      break;
    }
  }
  to_io.Push(StopCommand{});
  io_thread.join();
  for (std::thread& t : shard_threads) t.join();
  return result;
}

}  // namespace bytecomp::server
