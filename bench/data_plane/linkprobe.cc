// bytecomp-linkprobe: measures latency and bandwidth from this host to the servers of a running
// job with the link probes every worker runs at start (common/link_probe.h), and prints a table
// (or JSON lines with --json). Server addresses are what each server logs at start ("serving
// data on tcp://host:port"). Like a worker, it takes each server's bandwidth turn for its
// transfers, so it never measures a share of a link a worker is probing. Exit status: 0 when
// every server was measured, 1 otherwise, 2 for bad flags.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_split.h"
#include "bytecomp/common.h"

ABSL_FLAG(std::vector<std::string>, servers, {},
          "comma-separated data addresses of the servers, e.g. tcp://10.0.0.2:9101");
ABSL_FLAG(int, count, 3, "transfers per direction and server (the median is reported)");
ABSL_FLAG(int64_t, bytes, 1 << 20, "bytes of one transfer (1 KiB .. 64 MiB)");
ABSL_FLAG(int, latency_probes, 16, "small probes per server (the median round trip is reported)");
ABSL_FLAG(int, timeout_ms, 10000, "time for every server together");
ABSL_FLAG(bool, json, false, "print one JSON line per server instead of a table");
ABSL_FLAG(std::string, key_file, "",
          "the job's cluster key file (default: $BYTECOMP_KEY_FILE); a keyed job's servers "
          "answer only key holders");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "bytecomp-linkprobe --servers=tcp://HOST:PORT[,...] [--count=3 --bytes=1048576 --json]\n"
      "                   [--key_file=cluster.key]\n"
      "Latency and bandwidth up/down to each server of a running ByteComp job.");
  absl::ParseCommandLine(argc, argv);
  const std::vector<std::string> addresses = absl::GetFlag(FLAGS_servers);
  bytecomp::LinkProbeOptions options;
  options.transfers = absl::GetFlag(FLAGS_count);
  options.transfer_bytes = absl::GetFlag(FLAGS_bytes);
  options.latency_probes = absl::GetFlag(FLAGS_latency_probes);
  options.timeout_ms = absl::GetFlag(FLAGS_timeout_ms);
  if (addresses.empty() || options.transfers < 1 || options.transfer_bytes < 1024 ||
      options.transfer_bytes > bytecomp::kMaxProbeBytes || options.latency_probes < 1 ||
      options.timeout_ms < 1) {
    std::fprintf(stderr,
                 "bytecomp-linkprobe: need --servers, --count >= 1, --bytes in [1024, %lld], "
                 "--latency_probes >= 1 and --timeout_ms >= 1\n",
                 static_cast<long long>(bytecomp::kMaxProbeBytes));
    return 2;
  }
  zmq::context_t ctx(1);
  bytecomp::proto::ClusterConfig key_config;
  if (absl::Status s = bytecomp::ApplyClusterKeyEnv(&key_config); !s.ok()) {
    std::fprintf(stderr, "bytecomp-linkprobe: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (!absl::GetFlag(FLAGS_key_file).empty())
    key_config.set_key_file(absl::GetFlag(FLAGS_key_file));
  absl::StatusOr<std::unique_ptr<bytecomp::SocketSecurity>> security =
      bytecomp::SocketSecurity::FromConfig(ctx, key_config);
  if (!security.ok()) {
    std::fprintf(stderr, "bytecomp-linkprobe: %s\n",
                 std::string(security.status().message()).c_str());
    return 2;
  }
  std::vector<zmq::socket_t> sockets;
  uint64_t next_request = 1;
  std::vector<bytecomp::ZmqProbeExchange> exchanges;
  exchanges.reserve(addresses.size());
  for (const std::string& address : addresses) {
    sockets.emplace_back(ctx, zmq::socket_type::dealer);
    bytecomp::ConfigureSocket(sockets.back());
    (*security)->SecureConnecting(sockets.back());
    bytecomp::SocketLimits limits;  // replies of at most --bytes (<= kMaxProbeBytes)
    limits.max_message_bytes = bytecomp::kMaxProbeBytes + bytecomp::kDataFrameSlack;
    bytecomp::LimitSocket(sockets.back(), limits);
    try {
      sockets.back().connect(address);
    } catch (const zmq::error_t& e) {
      std::fprintf(stderr, "bytecomp-linkprobe: cannot connect to '%s': %s\n", address.c_str(),
                   e.what());
      return 2;
    }
  }
  std::vector<bytecomp::ProbeExchange*> servers;
  for (auto& socket : sockets) {
    exchanges.emplace_back(socket, /*sender=*/-1, &next_request);
    servers.push_back(&exchanges.back());
  }
  const bytecomp::proto::LinkProbeReport report =
      bytecomp::ProbeLinks(servers, options, &bytecomp::MonotonicUs);
  int failed = 0;
  if (!absl::GetFlag(FLAGS_json)) {
    std::printf("%-28s %12s %10s %12s  %s\n", "server", "latency_us", "up_Gbit/s", "down_Gbit/s",
                "note");
  }
  for (const auto& link : report.links()) {
    const std::string& address = addresses[static_cast<size_t>(link.server())];
    if (!link.error().empty()) ++failed;
    if (absl::GetFlag(FLAGS_json)) {
      std::printf(
          "{\"bench\":\"linkprobe\",\"server\":\"%s\",\"latency_us\":%.1f,\"up_gbps\":%.4f,"
          "\"down_gbps\":%.4f,\"bytes\":%lld,\"ok\":%s}\n",
          address.c_str(), link.latency_us(), link.up_gbps(), link.down_gbps(),
          static_cast<long long>(link.probe_bytes()), link.error().empty() ? "true" : "false");
    } else {
      std::printf("%-28s %12.1f %10.3f %12.3f  %s\n", address.c_str(), link.latency_us(),
                  link.up_gbps(), link.down_gbps(), link.error().c_str());
    }
  }
  std::fflush(stdout);
  return failed == 0 ? 0 : 1;
}
