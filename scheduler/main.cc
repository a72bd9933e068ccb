// bytecomp-scheduler: parses flags and the cluster config, then runs the Scheduler.
// Exit status: 0 when every worker finished; 2 for a bad configuration; 128+N after SIGINT or
// SIGTERM (SIGHUP asks for a strategy reload and does not stop the job);
// 1 when the job failed (a node died, registration timed out, a node asked for shutdown).
#include <csignal>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "bytecomp/common/config.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/common/net.h"
#include "bytecomp/scheduler/scheduler.h"

// 0 (or empty) means "take the value from --config, then BYTECOMP_* env, then the default".
ABSL_FLAG(std::string, config, "", "Cluster config file (.pbtxt, proto/cluster_config.proto)");
ABSL_FLAG(std::string, scheduler_address, "", "host:port the nodes connect to");
ABSL_FLAG(int, port, 0, "Port to bind (default: the port of scheduler_address)");
ABSL_FLAG(std::string, bind_host, "0.0.0.0", "Interface to bind");
ABSL_FLAG(int, num_workers, 0, "Number of workers (training processes)");
ABSL_FLAG(int, num_servers, 0, "Number of servers");
ABSL_FLAG(int64_t, partition_bytes, 0, "Partition size in bytes");
ABSL_FLAG(int, connections_per_server, 0, "DEALER connections per worker and server");
ABSL_FLAG(int, server_engine_threads, 0,
          "Threads per server, each owning a disjoint set of keys (ClusterConfig field)");
ABSL_FLAG(int, heartbeat_interval_ms, 0, "Heartbeat interval of the nodes");
ABSL_FLAG(int, heartbeat_timeout_ms, 0, "Silence after which a node is declared failed");
ABSL_FLAG(int, connect_timeout_ms, 0, "Time allowed for every node to register");
ABSL_FLAG(int, declare_timeout_ms, 0, "Time allowed for every worker to declare a tensor");
ABSL_FLAG(int64_t, max_inflight_bytes_per_server, -1,
          "Bytes a worker keeps in flight per server (0: one partition)");
ABSL_FLAG(std::string, advertise_host, "", "Host the nodes advertise (empty: auto)");
ABSL_FLAG(std::string, strategy, "",
          "Strategy file (proto/strategy.proto): which tensors to compress how; reloaded on "
          "SIGHUP. Empty: nothing is compressed. 'auto': planned from the workers' measured "
          "profile (needs --plan_cluster and --plan_costs)");
ABSL_FLAG(std::string, plan_cluster, "",
          "--strategy=auto: ClusterDescription (proto/planner.proto) of the links and GPUs");
ABSL_FLAG(std::string, plan_costs, "",
          "--strategy=auto: codec cost table (bytecomp-plan --calibrate writes one)");
ABSL_FLAG(bool, hierarchical, false,
          "Reduce inside each machine first; only local roots push (ClusterConfig.hierarchical)");
ABSL_FLAG(int, profile_rounds, 5, "--strategy=auto: rounds the workers profile before planning");
ABSL_FLAG(std::string, plan_links, "measured",
          "--strategy=auto: where the planned worker_link and server_link come from: 'measured' "
          "(the workers' link probes; the --plan_cluster file's values where no probe "
          "measured) or 'file' (the --plan_cluster file's values)");
ABSL_FLAG(int, link_probe_count, -1,
          "Link probe transfers per direction and server at each worker's start; 0: no probes "
          "(-1: from --config, default 3)");
ABSL_FLAG(int64_t, link_probe_bytes, 0, "Bytes of one link probe transfer (0: from --config)");

namespace {

bytecomp::Scheduler* g_scheduler = nullptr;

void OnSignal(int signal_number) {
  if (g_scheduler == nullptr) return;
  if (signal_number == SIGHUP) {
    g_scheduler->RequestReload();  // SIGHUP means "reload the strategy", never "stop"
  } else {
    g_scheduler->StopForSignal(signal_number);
  }
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "bytecomp-scheduler --config=cluster.pbtxt [--num_workers=N --num_servers=S ...]\n"
      "Rendezvous, topology, barriers, heartbeats and tensor declarations of a ByteComp job.");
  absl::ParseCommandLine(argc, argv);
  bytecomp::SetLogIdentity("scheduler");
  bytecomp::RouteProtobufLogs();

  absl::StatusOr<bytecomp::proto::ClusterConfig> loaded =
      bytecomp::LoadClusterConfig(absl::GetFlag(FLAGS_config));
  if (!loaded.ok()) {
    BC_LOG_ERROR(loaded.status().message());
    return 2;
  }
  bytecomp::proto::ClusterConfig config = *loaded;
  if (const std::string v = absl::GetFlag(FLAGS_scheduler_address); !v.empty()) {
    config.set_scheduler_address(v);
  }
  if (int v = absl::GetFlag(FLAGS_num_workers); v != 0) config.set_num_workers(v);
  if (int v = absl::GetFlag(FLAGS_num_servers); v != 0) config.set_num_servers(v);
  if (int64_t v = absl::GetFlag(FLAGS_partition_bytes); v != 0) config.set_partition_bytes(v);
  if (int v = absl::GetFlag(FLAGS_connections_per_server); v != 0) {
    config.set_connections_per_server(v);
  }
  if (int v = absl::GetFlag(FLAGS_server_engine_threads); v != 0) {
    config.set_server_engine_threads(v);
  }
  if (int v = absl::GetFlag(FLAGS_heartbeat_interval_ms); v != 0) {
    config.set_heartbeat_interval_ms(v);
  }
  if (int v = absl::GetFlag(FLAGS_heartbeat_timeout_ms); v != 0) {
    config.set_heartbeat_timeout_ms(v);
  }
  if (int v = absl::GetFlag(FLAGS_connect_timeout_ms); v != 0) config.set_connect_timeout_ms(v);
  if (absl::GetFlag(FLAGS_hierarchical)) config.set_hierarchical(true);
  if (int v = absl::GetFlag(FLAGS_declare_timeout_ms); v != 0) config.set_declare_timeout_ms(v);
  if (int64_t v = absl::GetFlag(FLAGS_max_inflight_bytes_per_server); v >= 0) {
    config.set_max_inflight_bytes_per_server(v);
  }
  if (const std::string v = absl::GetFlag(FLAGS_advertise_host); !v.empty()) {
    config.set_advertise_host(v);
  }
  if (int v = absl::GetFlag(FLAGS_link_probe_count); v >= 0) config.set_link_probe_count(v);
  if (int64_t v = absl::GetFlag(FLAGS_link_probe_bytes); v != 0) config.set_link_probe_bytes(v);

  if (int port = absl::GetFlag(FLAGS_port); port > 0) {
    // The topology tells nodes the effective config, so it names the port really bound.
    absl::StatusOr<bytecomp::HostPort> hp = bytecomp::ParseHostPort(config.scheduler_address());
    if (hp.ok()) config.set_scheduler_address(absl::StrCat(hp->host, ":", port));
  }

  bytecomp::SchedulerOptions options;
  options.config = config;
  options.bind_host = absl::GetFlag(FLAGS_bind_host);
  options.strategy_path = absl::GetFlag(FLAGS_strategy);
  options.auto_strategy = options.strategy_path == "auto";
  options.plan_cluster_path = absl::GetFlag(FLAGS_plan_cluster);
  options.plan_costs_path = absl::GetFlag(FLAGS_plan_costs);
  options.profile_rounds = absl::GetFlag(FLAGS_profile_rounds);
  absl::StatusOr<bytecomp::PlanLinks> plan_links =
      bytecomp::ParsePlanLinks(absl::GetFlag(FLAGS_plan_links));
  if (!plan_links.ok()) {
    BC_LOG_ERROR(plan_links.status().message());
    return 2;
  }
  options.plan_links = *plan_links;
  options.port = absl::GetFlag(FLAGS_port) > 0 ? absl::GetFlag(FLAGS_port) : -1;
  absl::StatusOr<std::unique_ptr<bytecomp::Scheduler>> scheduler =
      bytecomp::Scheduler::Create(std::move(options));
  if (!scheduler.ok()) {
    BC_LOG_ERROR(scheduler.status().message());
    return 2;
  }

  g_scheduler = scheduler->get();
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: the poll returns EINTR and sees the request at once
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGHUP, &action, nullptr);

  const absl::Status status = (*scheduler)->Run();
  const int exit_code = [&] {
    if (status.ok()) return 0;
    // A signal: the conventional 128+N status.
    if ((*scheduler)->stop_signal() != 0) return 128 + (*scheduler)->stop_signal();
    return 1;
  }();
  if (status.ok()) {
    BC_LOG_INFO("job finished");
  } else {
    BC_LOG_ERROR("job stopped: ", status.message());
  }
  g_scheduler = nullptr;
  scheduler->reset();  // flushes queued Shutdown messages (bounded by the linger)
  return exit_code;
}
