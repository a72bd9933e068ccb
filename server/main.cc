// bytecomp-server: the aggregation daemon. See server/include/bytecomp/server/server.h.
#include <malloc.h>

#include <csignal>
#include <cstdio>

#include "absl/flags/flag.h"
#include "bytecomp/common.h"
#include "bytecomp/common/command_line.h"
#include "bytecomp/server/server.h"
#include "bytecomp/telemetry/http_server.h"

ABSL_FLAG(std::string, config, "", "ClusterConfig text file (proto/cluster_config.proto)");
ABSL_FLAG(std::string, scheduler, "",
          "scheduler host:port (overrides the file and BYTECOMP_SCHEDULER)");
ABSL_FLAG(int, rank, -1, "requested server rank (-1: the scheduler picks)");
ABSL_FLAG(std::string, bind_host, "",
          "address to bind the data socket on (default: every interface with a cluster key or "
          "--allow_insecure, else 127.0.0.1)");
ABSL_FLAG(std::string, key_file, "",
          "cluster key file (bytecomp-keygen): CURVE on every socket, only key holders admitted "
          "(overrides the config's key_file and BYTECOMP_KEY_FILE)");
ABSL_FLAG(bool, allow_insecure, false,
          "without a cluster key, listen and connect on addresses other than loopback anyway "
          "(unencrypted, unauthenticated; logged as a warning)");
ABSL_FLAG(int, port, 0, "data port (0: ephemeral)");
ABSL_FLAG(std::string, advertise_host, "", "host other nodes use to reach this server");
ABSL_FLAG(std::string, http_address, "",
          "host:port (or a port, on loopback) of the Prometheus metrics (/metrics); empty: "
          "$BYTECOMP_SERVER_HTTP, else none. Read-only");

namespace {
bytecomp::server::AggregationServer* g_server = nullptr;
void OnSignal(int) {
  if (g_server != nullptr) g_server->RequestStop();
}
}  // namespace

int main(int argc, char** argv) {
  // ZeroMQ allocates every received message afresh (a push: up to a 4 MiB partition) and the
  // key shard frees it a round later. With glibc's defaults such a buffer goes back to the
  // kernel when freed (mmap above the dynamic threshold, madvise when a thread's heap is
  // trimmed), so every round faulted in fresh zeroed pages: a fifth of an uncompressed
  // server's CPU. Kept in the process, the next round's messages reuse them.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  bytecomp::ParseCommandLine(
      argc, argv,
      "bytecomp-server --config=cluster.pbtxt [--scheduler=host:port --rank=R ...]\n"
      "ByteComp aggregation server: sums the workers' pushes per key and round and answers "
      "their pulls (docs/CONFIGURATION.md).");
  bytecomp::SetLogIdentity("server");
  bytecomp::RouteProtobufLogs();
  bytecomp::ConfigOrigins origins;
  absl::StatusOr<bytecomp::proto::ClusterConfig> config =
      bytecomp::LoadClusterConfig(absl::GetFlag(FLAGS_config), &origins);
  if (!config.ok()) {
    BC_LOG_ERROR(config.status().message());
    return 2;
  }
  if (!absl::GetFlag(FLAGS_scheduler).empty()) {
    config->set_scheduler_address(absl::GetFlag(FLAGS_scheduler));
    origins.Set("scheduler_address", "--scheduler");
  }
  if (!absl::GetFlag(FLAGS_advertise_host).empty()) {
    config->set_advertise_host(absl::GetFlag(FLAGS_advertise_host));
  }
  if (!absl::GetFlag(FLAGS_key_file).empty()) {
    config->set_key_file(absl::GetFlag(FLAGS_key_file));
    origins.Set("key_file", "--key_file");
  }
  if (absl::GetFlag(FLAGS_allow_insecure)) config->set_allow_insecure(true);
  if (absl::Status s = bytecomp::ValidateClusterConfig(*config, &origins); !s.ok()) {
    BC_LOG_ERROR(s.message());
    return 2;
  }
  bytecomp::server::ServerOptions options;
  options.config = *config;
  options.requested_rank = absl::GetFlag(FLAGS_rank);
  options.bind_host = absl::GetFlag(FLAGS_bind_host);
  options.port = absl::GetFlag(FLAGS_port);
  options.http_address =
      bytecomp::telemetry::HttpAddress(absl::GetFlag(FLAGS_http_address), "BYTECOMP_SERVER_HTTP");
  bytecomp::server::AggregationServer server(options);
  g_server = &server;
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  absl::Status s = server.Run();
  if (!s.ok()) {
    BC_LOG_ERROR("exiting: ", s.ToString());
    return 1;
  }
  return 0;
}
