#include "bytecomp/common/config.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bytecomp/common/cluster_key.h"
#include "bytecomp/common/link_probe.h"
#include "bytecomp/common/net.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace bytecomp {
namespace {

class CollectingErrors : public google::protobuf::io::ErrorCollector {
 public:
  explicit CollectingErrors(absl::string_view source) : source_(source) {}
  void AddError(int line, int column, const std::string& message) override {
    errors_.push_back(absl::StrCat(source_, ":", line + 1, ":", column + 1, ": ", message));
  }
  void AddWarning(int line, int column, const std::string& message) override {
    AddError(line, column, message);
  }
  std::string Joined() const { return absl::StrJoin(errors_, "; "); }
  bool empty() const { return errors_.empty(); }

 private:
  std::string source_;
  std::vector<std::string> errors_;
};

}  // namespace

absl::Status ParseTextProto(absl::string_view text, absl::string_view source_name,
                            google::protobuf::Message* out) {
  CollectingErrors errors(source_name);
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  parser.AllowUnknownField(false);
  if (!parser.ParseFromString(std::string(text), out) || !errors.empty()) {
    return absl::InvalidArgumentError(errors.empty()
                                          ? absl::StrCat(source_name, ": could not parse as ",
                                                         out->GetTypeName())
                                          : errors.Joined());
  }
  return absl::OkStatus();
}

absl::Status ParseTextProtoFile(const std::string& path, google::protobuf::Message* out) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open config file '", path, "'"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return ParseTextProto(buffer.str(), path, out);
}

proto::ClusterConfig WithClusterDefaults(proto::ClusterConfig c) {
  if (c.scheduler_address().empty()) c.set_scheduler_address("127.0.0.1:9000");
  if (c.num_workers() == 0) c.set_num_workers(1);
  if (c.num_servers() == 0) c.set_num_servers(1);
  if (c.partition_bytes() == 0) c.set_partition_bytes(4 << 20);
  if (c.connections_per_server() == 0) c.set_connections_per_server(2);
  if (c.server_engine_threads() == 0) c.set_server_engine_threads(2);
  if (c.heartbeat_interval_ms() == 0) c.set_heartbeat_interval_ms(1000);
  if (c.heartbeat_timeout_ms() == 0) c.set_heartbeat_timeout_ms(5000);
  if (c.connect_timeout_ms() == 0) c.set_connect_timeout_ms(30000);
  if (c.declare_timeout_ms() == 0) c.set_declare_timeout_ms(60000);
  if (!c.has_link_probe_count()) c.set_link_probe_count(3);
  if (c.link_probe_bytes() == 0) c.set_link_probe_bytes(1 << 20);
  if (c.link_latency_probes() == 0) c.set_link_latency_probes(16);
  if (c.link_probe_timeout_ms() == 0) c.set_link_probe_timeout_ms(5000);
  return c;
}

absl::Status ValidateClusterConfig(const proto::ClusterConfig& c) {
  std::vector<std::string> problems;
  if (!ParseHostPort(c.scheduler_address()).ok()) {
    problems.push_back(absl::StrCat("scheduler_address '", c.scheduler_address(),
                                    "' is not host:port"));
  }
  if (c.num_workers() < 1) problems.push_back("num_workers must be >= 1");
  if (c.num_servers() < 1) problems.push_back("num_servers must be >= 1");
  if (c.partition_bytes() < 64) problems.push_back("partition_bytes must be >= 64");
  if (c.connections_per_server() < 1 || c.connections_per_server() > 64) {
    problems.push_back("connections_per_server must be in [1, 64]");
  }
  if (c.server_engine_threads() < 1 || c.server_engine_threads() > 256) {
    problems.push_back("server_engine_threads must be in [1, 256]");
  }
  if (c.heartbeat_interval_ms() < 1) problems.push_back("heartbeat_interval_ms must be >= 1");
  if (c.heartbeat_timeout_ms() < 2 * c.heartbeat_interval_ms()) {
    problems.push_back("heartbeat_timeout_ms must be >= 2 x heartbeat_interval_ms");
  }
  if (c.connect_timeout_ms() < 1) problems.push_back("connect_timeout_ms must be >= 1");
  if (c.declare_timeout_ms() < 1) problems.push_back("declare_timeout_ms must be >= 1");
  if (c.max_inflight_bytes_per_server() < 0) {
    problems.push_back("max_inflight_bytes_per_server must be >= 0");
  }
  if (c.link_probe_count() < 0 || c.link_probe_count() > 100) {
    problems.push_back("link_probe_count must be in [0, 100] (0: no link probes)");
  }
  if (c.link_probe_bytes() < 1024 || c.link_probe_bytes() > kMaxProbeBytes) {
    problems.push_back(absl::StrCat("link_probe_bytes must be in [1024, ", kMaxProbeBytes, "]"));
  }
  if (c.link_latency_probes() < 1 || c.link_latency_probes() > 1000) {
    problems.push_back("link_latency_probes must be in [1, 1000]");
  }
  if (c.link_probe_timeout_ms() < 1 || c.link_probe_timeout_ms() > 600000) {
    problems.push_back("link_probe_timeout_ms must be in [1, 600000]");
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("invalid cluster config: ", absl::StrJoin(problems, "; ")));
}

absl::Status ApplyClusterEnv(proto::ClusterConfig* c) {
  auto env_int = [](const char* name, auto setter) -> absl::Status {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return absl::OkStatus();
    int64_t parsed;
    if (!absl::SimpleAtoi(v, &parsed)) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment variable ", name, "='", v, "' is not an integer"));
    }
    setter(parsed);
    return absl::OkStatus();
  };
  if (const char* v = std::getenv("BYTECOMP_SCHEDULER"); v != nullptr && *v != '\0') {
    c->set_scheduler_address(v);
  }
  if (const char* v = std::getenv("BYTECOMP_ADVERTISE_HOST"); v != nullptr && *v != '\0') {
    c->set_advertise_host(v);
  }
  absl::Status s;
  s.Update(env_int("BYTECOMP_NUM_WORKERS", [&](int64_t x) { c->set_num_workers(x); }));
  s.Update(env_int("BYTECOMP_NUM_SERVERS", [&](int64_t x) { c->set_num_servers(x); }));
  s.Update(env_int("BYTECOMP_PARTITION_BYTES", [&](int64_t x) { c->set_partition_bytes(x); }));
  s.Update(env_int("BYTECOMP_CONNECTIONS_PER_SERVER",
                   [&](int64_t x) { c->set_connections_per_server(x); }));
  s.Update(env_int("BYTECOMP_HEARTBEAT_TIMEOUT_MS",
                   [&](int64_t x) { c->set_heartbeat_timeout_ms(x); }));
  s.Update(env_int("BYTECOMP_CONNECT_TIMEOUT_MS",
                   [&](int64_t x) { c->set_connect_timeout_ms(x); }));
  return s;
}

absl::StatusOr<proto::ClusterConfig> LoadClusterConfig(const std::string& path) {
  proto::ClusterConfig config;
  if (!path.empty()) {
    if (absl::Status s = ParseTextProtoFile(path, &config); !s.ok()) return s;
  }
  if (absl::Status s = ApplyClusterEnv(&config); !s.ok()) return s;
  if (absl::Status s = ApplyClusterKeyEnv(&config); !s.ok()) return s;
  return WithClusterDefaults(std::move(config));
}

}  // namespace bytecomp
