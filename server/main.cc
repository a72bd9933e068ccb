// bytecomp-server: the aggregation daemon. See server/include/bytecomp/server/server.h.
#include <csignal>
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "bytecomp/common.h"
#include "bytecomp/server/server.h"

ABSL_FLAG(std::string, config, "", "ClusterConfig text file (proto/cluster_config.proto)");
ABSL_FLAG(std::string, scheduler, "", "scheduler host:port (overrides the file and BYTECOMP_SCHEDULER)");
ABSL_FLAG(int, rank, -1, "requested server rank (-1: the scheduler picks)");
ABSL_FLAG(std::string, bind_host, "0.0.0.0", "address to bind the data socket on");
ABSL_FLAG(int, port, 0, "data port (0: ephemeral)");
ABSL_FLAG(std::string, advertise_host, "", "host other nodes use to reach this server");

namespace {
bytecomp::server::AggregationServer* g_server = nullptr;
void OnSignal(int) {
  if (g_server != nullptr) g_server->RequestStop();
}
}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("ByteComp aggregation server: sums workers' pushes per key and round");
  absl::ParseCommandLine(argc, argv);
  bytecomp::SetLogIdentity("server");
  bytecomp::RouteProtobufLogs();
  absl::StatusOr<bytecomp::proto::ClusterConfig> config =
      bytecomp::LoadClusterConfig(absl::GetFlag(FLAGS_config));
  if (!config.ok()) {
    BC_LOG_ERROR(config.status().message());
    return 2;
  }
  if (!absl::GetFlag(FLAGS_scheduler).empty()) config->set_scheduler_address(absl::GetFlag(FLAGS_scheduler));
  if (!absl::GetFlag(FLAGS_advertise_host).empty()) config->set_advertise_host(absl::GetFlag(FLAGS_advertise_host));
  if (absl::Status s = bytecomp::ValidateClusterConfig(*config); !s.ok()) {
    BC_LOG_ERROR(s.message());
    return 2;
  }
  bytecomp::server::ServerOptions options;
  options.config = *config;
  options.requested_rank = absl::GetFlag(FLAGS_rank);
  options.bind_host = absl::GetFlag(FLAGS_bind_host);
  options.port = absl::GetFlag(FLAGS_port);
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
