// bytecomp-scheduler: parses flags and the cluster config, then runs the Scheduler.
// Exit status: 0 when every worker finished; 2 for a bad configuration; 128+N after SIGINT or
// SIGTERM (SIGHUP asks for a strategy reload and does not stop the job);
// 1 when the job failed (a node died, registration timed out, a node asked for shutdown).
#include <csignal>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "bytecomp/common/command_line.h"
#include "bytecomp/common/config.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/common/net.h"
#include "bytecomp/scheduler/scheduler.h"
#include "bytecomp/telemetry/http_server.h"

// 0 (or empty) means "the BYTECOMP_* environment variable, else --config's value, else the
// default" (common/config.h: LoadClusterConfig).
ABSL_FLAG(std::string, config, "", "Cluster config file (.pbtxt, proto/cluster_config.proto)");
ABSL_FLAG(std::string, scheduler_address, "",
          "host:port the nodes connect to (default 127.0.0.1:9000)");
ABSL_FLAG(int, port, 0, "Port to bind (default: the port of scheduler_address)");
ABSL_FLAG(std::string, bind_host, "",
          "Interface to bind (default: every interface with a cluster key or --allow_insecure, "
          "else 127.0.0.1)");
ABSL_FLAG(std::string, key_file, "",
          "Cluster key file (bytecomp-keygen): CURVE on every socket, only key holders admitted "
          "(overrides the config's key_file and BYTECOMP_KEY_FILE)");
ABSL_FLAG(bool, allow_insecure, false,
          "Without a cluster key, listen on addresses other than loopback anyway (unencrypted, "
          "unauthenticated; logged as a warning)");
ABSL_FLAG(int, num_workers, 0, "Number of workers (training processes; default 1)");
ABSL_FLAG(int, num_servers, 0, "Number of aggregation servers (default 1)");
ABSL_FLAG(int64_t, partition_bytes, 0, "Partition size in bytes (default 4 MiB)");
ABSL_FLAG(int, connections_per_server, 0, "DEALER connections per worker and server (default 2)");
ABSL_FLAG(int, key_shard_threads, 0,
          "Key shard threads per server, each owning a disjoint set of keys (default 2)");
ABSL_FLAG(int, heartbeat_interval_ms, 0, "Heartbeat interval of the nodes (default 1000)");
ABSL_FLAG(int, heartbeat_timeout_ms, 0,
          "Silence after which a node is declared failed (default 5000)");
ABSL_FLAG(int, connect_timeout_ms, 0, "Time allowed for every node to register (default 30000)");
ABSL_FLAG(int, declare_timeout_ms, 0,
          "Time allowed for every worker to declare a tensor (default 60000)");
ABSL_FLAG(
    int64_t, max_inflight_bytes_per_server, -1,
    "Bytes a worker keeps in flight per server (0: one partition; -1: from --config, default 0)");
ABSL_FLAG(std::string, advertise_host, "", "Host the nodes advertise (empty: auto)");
ABSL_FLAG(std::string, strategy, "",
          "Strategy file (proto/strategy.proto): which tensors to compress how; reloaded on "
          "SIGHUP. Empty: nothing is compressed. 'auto': planned from the workers' measured "
          "profile (needs --plan_cluster and --plan_costs)");
ABSL_FLAG(std::string, plan_cluster, "",
          "--strategy=auto: ClusterDescription (proto/planner.proto) of the links and GPUs");
ABSL_FLAG(std::string, plan_costs, "",
          "--strategy=auto: codec cost table (bytecomp-plan --calibrate writes one)");
ABSL_FLAG(std::string, plan_options, "",
          "--strategy=auto: PlannerOptions file (proto/planner.proto): codecs allowed, max_loss "
          "(default LOSS_COMPENSATED: no randomk, no codec without error feedback), `allowed`: "
          "the codecs the user accepts per tensor (never a lossier one), partition sizes, ...");
ABSL_FLAG(std::string, plan_out, "",
          "--strategy=auto: where the planned strategy is written, with a per-tensor table of "
          "what was chosen and why as comments (default: $TMPDIR or /tmp, "
          "bytecomp-auto-strategy-<pid>.pbtxt); --strategy=FILE runs it again");
ABSL_FLAG(bool, collectives, false,
          "Workers join gloo's collectives at start, so that strategy entries may name scheme "
          "allreduce or allgather (ClusterConfig.collectives)");
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
ABSL_FLAG(int64_t, link_probe_bytes, 0,
          "Bytes of one link probe transfer (0: from --config, default 1 MiB)");
ABSL_FLAG(std::string, http_address, "",
          "host:port (or a port, on loopback) of the status page (/) and Prometheus metrics "
          "(/metrics); empty: $BYTECOMP_SCHEDULER_HTTP, else none. Read-only");
ABSL_FLAG(std::string, timeline_dir, "",
          "Every node writes its runtime timeline (Chrome trace) to DIR/<role>-<rank>.json "
          "(ClusterConfig.timeline_dir; BYTECOMP_TIMELINE on a node overrides)");
ABSL_FLAG(int, push_pull_timeout_ms, 0,
          "How long a worker's wait without a time limit of its own waits (0: from --config, "
          "default 30 min)");
ABSL_FLAG(int, scheduler_timeout_ms, 0,
          "Silence of the scheduler after which nodes fail and stop (0: from --config, default "
          "the heartbeat timeout)");
ABSL_FLAG(int, server_replacement_timeout_ms, 0,
          "How long the job waits for a replacement of a lost server (server failover; 0: from "
          "--config, default 60 s; -1: a lost server ends the job)");

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
  bytecomp::ParseCommandLine(
      argc, argv,
      "bytecomp-scheduler --config=cluster.pbtxt [--num_workers=N --num_servers=S ...]\n"
      "Rendezvous, topology, barriers, heartbeats, tensor declarations and the strategy of a "
      "ByteComp job.\nA flag left at 0 or empty takes the value of the BYTECOMP_* environment "
      "variable, else of the --config file, else the default (docs/CONFIGURATION.md).");
  bytecomp::SetLogIdentity("scheduler");
  bytecomp::RouteProtobufLogs();

  bytecomp::ConfigOrigins origins;
  absl::StatusOr<bytecomp::proto::ClusterConfig> loaded =
      bytecomp::LoadClusterConfig(absl::GetFlag(FLAGS_config), &origins);
  if (!loaded.ok()) {
    BC_LOG_ERROR(loaded.status().message());
    return 2;
  }
  bytecomp::proto::ClusterConfig config = *loaded;
  // A flag that is set overrides the file and the environment; an error names the flag.
  auto from_flag = [&](const char* field, bool set, auto apply) {
    if (!set) return;
    apply();
    origins.Set(field, absl::StrCat("--", field));
  };
  const std::string address = absl::GetFlag(FLAGS_scheduler_address);
  from_flag("scheduler_address", !address.empty(), [&] { config.set_scheduler_address(address); });
  const int workers = absl::GetFlag(FLAGS_num_workers);
  from_flag("num_workers", workers != 0, [&] { config.set_num_workers(workers); });
  const int servers = absl::GetFlag(FLAGS_num_servers);
  from_flag("num_servers", servers != 0, [&] { config.set_num_servers(servers); });
  const int64_t partition = absl::GetFlag(FLAGS_partition_bytes);
  from_flag("partition_bytes", partition != 0, [&] { config.set_partition_bytes(partition); });
  const int connections = absl::GetFlag(FLAGS_connections_per_server);
  from_flag("connections_per_server", connections != 0,
            [&] { config.set_connections_per_server(connections); });
  const int shard_threads = absl::GetFlag(FLAGS_key_shard_threads);
  from_flag("key_shard_threads", shard_threads != 0,
            [&] { config.set_key_shard_threads(shard_threads); });
  const int interval = absl::GetFlag(FLAGS_heartbeat_interval_ms);
  from_flag("heartbeat_interval_ms", interval != 0,
            [&] { config.set_heartbeat_interval_ms(interval); });
  const int timeout = absl::GetFlag(FLAGS_heartbeat_timeout_ms);
  from_flag("heartbeat_timeout_ms", timeout != 0,
            [&] { config.set_heartbeat_timeout_ms(timeout); });
  const int connect = absl::GetFlag(FLAGS_connect_timeout_ms);
  from_flag("connect_timeout_ms", connect != 0, [&] { config.set_connect_timeout_ms(connect); });
  if (absl::GetFlag(FLAGS_hierarchical)) config.set_hierarchical(true);
  if (absl::GetFlag(FLAGS_collectives)) config.set_collectives(true);
  const int declare = absl::GetFlag(FLAGS_declare_timeout_ms);
  from_flag("declare_timeout_ms", declare != 0, [&] { config.set_declare_timeout_ms(declare); });
  const int64_t inflight = absl::GetFlag(FLAGS_max_inflight_bytes_per_server);
  from_flag("max_inflight_bytes_per_server", inflight >= 0,
            [&] { config.set_max_inflight_bytes_per_server(inflight); });
  const std::string advertise = absl::GetFlag(FLAGS_advertise_host);
  from_flag("advertise_host", !advertise.empty(), [&] { config.set_advertise_host(advertise); });
  const int probes = absl::GetFlag(FLAGS_link_probe_count);
  from_flag("link_probe_count", probes >= 0, [&] { config.set_link_probe_count(probes); });
  const int64_t probe_bytes = absl::GetFlag(FLAGS_link_probe_bytes);
  from_flag("link_probe_bytes", probe_bytes != 0,
            [&] { config.set_link_probe_bytes(probe_bytes); });
  const int wait_timeout = absl::GetFlag(FLAGS_push_pull_timeout_ms);
  from_flag("push_pull_timeout_ms", wait_timeout != 0,
            [&] { config.set_push_pull_timeout_ms(wait_timeout); });
  const int silence = absl::GetFlag(FLAGS_scheduler_timeout_ms);
  from_flag("scheduler_timeout_ms", silence != 0,
            [&] { config.set_scheduler_timeout_ms(silence); });
  const int replacement = absl::GetFlag(FLAGS_server_replacement_timeout_ms);
  from_flag("server_replacement_timeout_ms", replacement != 0,
            [&] { config.set_server_replacement_timeout_ms(replacement); });
  const std::string key_file = absl::GetFlag(FLAGS_key_file);
  from_flag("key_file", !key_file.empty(), [&] { config.set_key_file(key_file); });
  if (absl::GetFlag(FLAGS_allow_insecure)) config.set_allow_insecure(true);
  const std::string timeline_dir = absl::GetFlag(FLAGS_timeline_dir);
  from_flag("timeline_dir", !timeline_dir.empty(), [&] { config.set_timeline_dir(timeline_dir); });
  if (absl::Status s = bytecomp::ValidateClusterConfig(config, &origins); !s.ok()) {
    BC_LOG_ERROR(s.message());
    return 2;
  }

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
  options.plan_options_path = absl::GetFlag(FLAGS_plan_options);
  options.plan_out_path = absl::GetFlag(FLAGS_plan_out);
  options.profile_rounds = absl::GetFlag(FLAGS_profile_rounds);
  absl::StatusOr<bytecomp::PlanLinks> plan_links =
      bytecomp::ParsePlanLinks(absl::GetFlag(FLAGS_plan_links));
  if (!plan_links.ok()) {
    BC_LOG_ERROR(plan_links.status().message());
    return 2;
  }
  options.plan_links = *plan_links;
  options.port = absl::GetFlag(FLAGS_port) > 0 ? absl::GetFlag(FLAGS_port) : -1;
  options.http_address = bytecomp::telemetry::HttpAddress(absl::GetFlag(FLAGS_http_address),
                                                          "BYTECOMP_SCHEDULER_HTTP");
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
