#include "bytecomp/server/server.h"

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/common.h"
#include "bytecomp/server/key_shard.h"
#include "bytecomp/server/request_dispatcher.h"
#include "bytecomp/telemetry.h"
#include "control.pb.h"
#include "server_threads.h"

namespace bytecomp::server {
namespace {

void SendCommand(zmq::socket_t& to_io, ShardMessageKind kind, const std::string& body = "") {
  std::vector<zmq::message_t> message = ShardCommand(kind, body);
  SendOrLog(to_io, message);
}

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

}  // namespace

absl::Status AggregationServer::Run() {
  const proto::ClusterConfig& config = options_.config;
  zmq::context_t ctx(2);  // two I/O threads: several TCP streams per server
  zmq::socket_t router(ctx, zmq::socket_type::router);
  ConfigureSocket(router);
  router.set(zmq::sockopt::router_mandatory, 0);
  absl::StatusOr<int> port = BindTcp(router, options_.bind_host, options_.port);
  if (!port.ok()) return port.status();

  std::string host = config.advertise_host();
  if (host.empty()) {
    absl::StatusOr<HostPort> sched = ParseHostPort(config.scheduler_address());
    if (!sched.ok()) return sched.status();
    absl::StatusOr<std::string> local = LocalAddressToward(sched->host);
    if (!local.ok()) return local.status();
    host = *local;
  }
  const std::string data_address = TcpEndpoint(host, *port);

  SchedulerClient scheduler(ctx, config);
  absl::StatusOr<proto::Topology> topology =
      scheduler.Register(proto::ROLE_SERVER, options_.requested_rank, data_address);
  if (!topology.ok()) return topology.status();
  const int rank = topology->your_rank();
  SetLogIdentity(absl::StrCat("server ", rank));
  const proto::ClusterConfig& effective = topology->config();
  // The config field keeps its old name (server_engine_threads) so that config files stay valid.
  const size_t num_shards = static_cast<size_t>(std::max(1, effective.server_engine_threads()));
  BC_LOG_INFO("serving data on ", data_address, " for ", topology->num_workers(), " workers with ",
              num_shards, " key shard threads");

  ServerTelemetry telemetry = StartTelemetry(options_, effective, rank, scheduler.shared_clock());
  zmq::socket_t to_io(ctx, zmq::socket_type::pair);
  to_io.bind(kControlEndpoint);
  const std::vector<int> pushers(topology->pushers().begin(), topology->pushers().end());
  RequestDispatcher dispatcher(rank, topology->num_workers(), topology->num_servers(), num_shards,
                               pushers);
  dispatcher.Observe(telemetry.metrics.get());
  IoLoop io(ctx, router, std::move(dispatcher), num_shards);
  std::vector<std::unique_ptr<KeyShard>> shards;
  std::vector<std::thread> shard_threads;
  for (size_t i = 0; i < num_shards; ++i) {
    shards.push_back(std::make_unique<KeyShard>(static_cast<int>(i), rank, topology->num_workers(),
                                                topology->num_servers(), pushers));
    shards.back()->Observe(telemetry.timeline.get(), telemetry.metrics.get());
    shard_threads.emplace_back(RunKeyShard, std::ref(ctx), i, std::ref(*shards.back()));
  }
  std::thread io_thread([&io] { io.Run(); });
  SendCommand(to_io, ShardMessageKind::kStrategy, topology->strategy().SerializeAsString());

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
    if (!msg->has_value()) continue;
    const proto::ControlMessage& m = **msg;
    if (m.has_declare_reply() && m.declare_reply().ok()) {
      SendCommand(to_io, ShardMessageKind::kDeclare, m.declare_reply().SerializeAsString());
    } else if (m.has_strategy_commit()) {
      SendCommand(to_io, ShardMessageKind::kStrategy,
                  m.strategy_commit().strategy().SerializeAsString());
    } else if (m.has_node_failed()) {
      // Named as the workers name it ("worker 2 failed: ..."), whichever news reaches them first.
      const proto::NodeId& node = m.node_failed().node();
      const std::string reason =
          absl::StrCat(node.role() == proto::ROLE_SERVER ? "server " : "worker ", node.rank(),
                       " failed: ", m.node_failed().reason());
      BC_LOG_ERROR(reason);
      SendCommand(to_io, ShardMessageKind::kFail, reason);
    } else if (m.has_shutdown()) {
      BC_LOG_INFO("shutdown: ", m.shutdown().reason());
      break;
    }
  }
  SendCommand(to_io, ShardMessageKind::kStop);
  io_thread.join();
  for (std::thread& t : shard_threads) t.join();
  return result;
}

}  // namespace bytecomp::server
