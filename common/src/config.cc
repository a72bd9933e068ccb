#include "bytecomp/common/config.h"

#include <cstdlib>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bytecomp/common/cluster_key.h"
#include "bytecomp/common/link_probe.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/common/net.h"
#include "google/protobuf/descriptor.h"

namespace bytecomp {
namespace {

// Records "path:line:column" for every top-level field the file set.
void RecordFileOrigins(const std::string& path, const google::protobuf::Message& parsed,
                       const TextProtoTree& tree, ConfigOrigins* origins) {
  const google::protobuf::Descriptor* d = parsed.GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = d->field(i);
    if (field->is_repeated()) continue;  // ClusterConfig has none
    const TextPosition at = PositionOf(&tree, parsed, field->name(), -1);
    if (at.line < 0) continue;
    origins->Set(field->name(), absl::StrCat(path, ":", at.line + 1, ":", at.column + 1));
  }
}

// Each problem is "<origin>: <field> must ..., got <value>".
class Problems {
 public:
  explicit Problems(const ConfigOrigins* origins) : origins_(origins) {}
  void Add(absl::string_view field, absl::string_view what) {
    problems_.push_back(
        absl::StrCat(origins_ != nullptr ? origins_->Prefix(field) : "", field, " ", what));
  }
  // Adds a problem unless lo <= value <= hi.
  void InRange(absl::string_view field, int64_t value, int64_t lo, int64_t hi,
               absl::string_view note = "") {
    if (value >= lo && value <= hi) return;
    Add(field, absl::StrCat("must be in [", lo, ", ", hi, "]", note, ", got ", value));
  }
  absl::Status ToStatus() const {
    if (problems_.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("invalid cluster config: ", absl::StrJoin(problems_, "; ")));
  }

 private:
  const ConfigOrigins* origins_;
  std::vector<std::string> problems_;
};

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// The integer fields that BYTECOMP_* environment variables override.
struct EnvField {
  const char* variable;
  const char* field;
};
constexpr EnvField kEnvFields[] = {
    {"BYTECOMP_NUM_WORKERS", "num_workers"},
    {"BYTECOMP_NUM_SERVERS", "num_servers"},
    {"BYTECOMP_PARTITION_BYTES", "partition_bytes"},
    {"BYTECOMP_CONNECTIONS_PER_SERVER", "connections_per_server"},
    {"BYTECOMP_HEARTBEAT_TIMEOUT_MS", "heartbeat_timeout_ms"},
    {"BYTECOMP_CONNECT_TIMEOUT_MS", "connect_timeout_ms"},
    {"BYTECOMP_PUSH_PULL_TIMEOUT_MS", "push_pull_timeout_ms"},
};

// Sets an integer field from the variable's text; the error names the variable.
absl::Status SetFromEnv(const EnvField& env, const char* text, proto::ClusterConfig* c) {
  const google::protobuf::FieldDescriptor* field = c->GetDescriptor()->FindFieldByName(env.field);
  int64_t parsed = 0;
  if (!absl::SimpleAtoi(text, &parsed)) {
    return absl::InvalidArgumentError(absl::StrCat("environment variable ", env.variable, "='",
                                                   text, "' is not an integer (", env.field, ")"));
  }
  // 0 in the config means "the default", which a variable says by being unset: a variable
  // set to 0 is a mistake (a timeout of 0 is no wait at all), refused before any connection.
  if (parsed == 0) {
    return absl::InvalidArgumentError(absl::StrCat("environment variable ", env.variable,
                                                   "='0': ", env.field,
                                                   " must be at least 1 (unset the variable for "
                                                   "the default)"));
  }
  const google::protobuf::Reflection* reflection = c->GetReflection();
  if (field->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_INT32) {
    if (parsed < 1 || parsed > kInt32Max) {
      return absl::InvalidArgumentError(absl::StrCat("environment variable ", env.variable, "='",
                                                     text, "' is out of range for ", env.field,
                                                     " (1 .. ", kInt32Max, ")"));
    }
    reflection->SetInt32(c, field, static_cast<int32_t>(parsed));
  } else {
    if (parsed < 1) {
      return absl::InvalidArgumentError(absl::StrCat("environment variable ", env.variable, "='",
                                                     text, "' is below 1 (", env.field, ")"));
    }
    reflection->SetInt64(c, field, parsed);
  }
  return absl::OkStatus();
}

// key_shard_threads' first name: its value, cleared.
int32_t TakeServerEngineThreads(proto::ClusterConfig& c) {
  const int32_t n = c.server_engine_threads();
  c.clear_server_engine_threads();
  return n;
}

}  // namespace

int64_t SchedulerTimeoutMs(const proto::ClusterConfig& config) {
  return config.scheduler_timeout_ms() > 0 ? config.scheduler_timeout_ms()
                                           : config.heartbeat_timeout_ms();
}

bool ServerFailoverOn(const proto::ClusterConfig& config) {
  return config.server_replacement_timeout_ms() > 0;
}

void ConfigOrigins::Set(absl::string_view field, std::string origin) {
  by_field_[field] = std::move(origin);
}

std::string ConfigOrigins::Prefix(absl::string_view field) const {
  auto it = by_field_.find(field);
  return it == by_field_.end() ? std::string() : absl::StrCat(it->second, ": ");
}

proto::ClusterConfig WithClusterDefaults(proto::ClusterConfig c) {
  if (c.scheduler_address().empty()) c.set_scheduler_address("127.0.0.1:9000");
  if (c.num_workers() == 0) c.set_num_workers(1);
  if (c.num_servers() == 0) c.set_num_servers(1);
  if (c.partition_bytes() == 0) c.set_partition_bytes(4 << 20);
  if (c.connections_per_server() == 0) c.set_connections_per_server(2);
  const int32_t first_name = TakeServerEngineThreads(c);
  if (c.key_shard_threads() == 0) c.set_key_shard_threads(first_name);
  if (c.key_shard_threads() == 0) c.set_key_shard_threads(2);
  if (c.heartbeat_interval_ms() == 0) c.set_heartbeat_interval_ms(1000);
  if (c.heartbeat_timeout_ms() == 0) c.set_heartbeat_timeout_ms(5000);
  if (c.connect_timeout_ms() == 0) c.set_connect_timeout_ms(30000);
  if (c.declare_timeout_ms() == 0) c.set_declare_timeout_ms(60000);
  if (!c.has_link_probe_count()) c.set_link_probe_count(3);
  if (c.link_probe_bytes() == 0) c.set_link_probe_bytes(1 << 20);
  if (c.link_latency_probes() == 0) c.set_link_latency_probes(16);
  if (c.link_probe_timeout_ms() == 0) c.set_link_probe_timeout_ms(5000);
  if (c.max_tensors() == 0) c.set_max_tensors(65536);
  if (c.max_tensor_name_bytes() == 0) c.set_max_tensor_name_bytes(1024);
  if (c.max_declared_bytes() == 0) c.set_max_declared_bytes(int64_t{1} << 40);
  if (c.push_pull_timeout_ms() == 0) c.set_push_pull_timeout_ms(1800000);
  if (c.server_replacement_timeout_ms() == 0) c.set_server_replacement_timeout_ms(60000);
  if (c.data_protection() == proto::ClusterConfig::data_protection_default) {
    c.set_data_protection(proto::ClusterConfig::encrypt);
  }
  return c;
}

absl::Status ValidateClusterConfig(const proto::ClusterConfig& c, const ConfigOrigins* origins) {
  Problems p(origins);
  if (!ParseHostPort(c.scheduler_address()).ok()) {
    p.Add("scheduler_address", absl::StrCat("'", c.scheduler_address(), "' is not host:port"));
  }
  p.InRange("num_workers", c.num_workers(), 1, 65536);
  p.InRange("num_servers", c.num_servers(), 1, 65536);
  p.InRange("partition_bytes", c.partition_bytes(), 64, int64_t{1} << 30);
  p.InRange("connections_per_server", c.connections_per_server(), 1, 64);
  p.InRange("key_shard_threads", c.key_shard_threads(), 1, 256);
  p.InRange("heartbeat_interval_ms", c.heartbeat_interval_ms(), 1, kInt32Max);
  // In 64 bits: 2 x a large interval must not wrap around and pass.
  const int64_t two_intervals = 2 * int64_t{c.heartbeat_interval_ms()};
  if (int64_t{c.heartbeat_timeout_ms()} < two_intervals) {
    p.Add("heartbeat_timeout_ms", absl::StrCat("must be >= 2 x heartbeat_interval_ms (",
                                               two_intervals, "), got ", c.heartbeat_timeout_ms()));
  }
  if (c.scheduler_timeout_ms() != 0 && int64_t{c.scheduler_timeout_ms()} < two_intervals) {
    p.Add("scheduler_timeout_ms", absl::StrCat("must be >= 2 x heartbeat_interval_ms (",
                                               two_intervals, "), got ", c.scheduler_timeout_ms()));
  }
  p.InRange("connect_timeout_ms", c.connect_timeout_ms(), 1, kInt32Max);
  p.InRange("declare_timeout_ms", c.declare_timeout_ms(), 1, kInt32Max);
  p.InRange("push_pull_timeout_ms", c.push_pull_timeout_ms(), 1, kInt32Max);
  if (c.server_replacement_timeout_ms() != -1) {
    p.InRange("server_replacement_timeout_ms", c.server_replacement_timeout_ms(), 1, kInt32Max,
              " (-1: a lost server ends the job)");
  }
  if (c.max_inflight_bytes_per_server() < 0) {
    p.Add("max_inflight_bytes_per_server",
          absl::StrCat("must be >= 0, got ", c.max_inflight_bytes_per_server()));
  }
  p.InRange("profile_rounds", c.profile_rounds(), 0, 1000000);
  p.InRange("link_probe_count", c.link_probe_count(), 0, 100, " (0: no link probes)");
  p.InRange("link_probe_bytes", c.link_probe_bytes(), 1024, kMaxProbeBytes);
  p.InRange("link_latency_probes", c.link_latency_probes(), 1, 1000);
  p.InRange("link_probe_timeout_ms", c.link_probe_timeout_ms(), 1, 600000);
  p.InRange("max_tensors", c.max_tensors(), 1, int64_t{1} << 24);
  p.InRange("max_tensor_name_bytes", c.max_tensor_name_bytes(), 1, 65536);
  p.InRange("max_declared_bytes", c.max_declared_bytes(), 1, int64_t{1} << 50);
  // A worker's profile report names every tensor: it must fit the scheduler's message limit.
  const int64_t report_bytes = int64_t{c.max_tensors()} * (int64_t{c.max_tensor_name_bytes()} + 64);
  if (c.max_tensors() > 0 && c.max_tensor_name_bytes() > 0 && report_bytes > (int64_t{1} << 30)) {
    p.Add("max_tensors", absl::StrCat("x (max_tensor_name_bytes + 64) must be at most 1 GiB, got ",
                                      c.max_tensors(), " x ", c.max_tensor_name_bytes() + 64));
  }
  return p.ToStatus();
}

absl::Status ApplyClusterEnv(proto::ClusterConfig* c, ConfigOrigins* origins) {
  if (const char* v = std::getenv("BYTECOMP_SCHEDULER"); v != nullptr && *v != '\0') {
    c->set_scheduler_address(v);
    if (origins != nullptr) origins->Set("scheduler_address", "BYTECOMP_SCHEDULER");
  }
  if (const char* v = std::getenv("BYTECOMP_ADVERTISE_HOST"); v != nullptr && *v != '\0') {
    c->set_advertise_host(v);
  }
  std::vector<std::string> errors;
  for (const EnvField& env : kEnvFields) {
    const char* v = std::getenv(env.variable);
    if (v == nullptr || *v == '\0') continue;
    if (absl::Status s = SetFromEnv(env, v, c); !s.ok()) {
      errors.emplace_back(s.message());
    } else if (origins != nullptr) {
      origins->Set(env.field, absl::StrCat(env.variable, "='", v, "'"));
    }
  }
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(errors, "; "));
}

absl::StatusOr<proto::ClusterConfig> LoadClusterConfig(const std::string& path,
                                                       ConfigOrigins* origins) {
  proto::ClusterConfig config;
  if (!path.empty()) {
    absl::StatusOr<std::string> text = ReadTextFile(path, "config file");
    if (!text.ok()) return text.status();
    TextProtoTree tree;
    if (absl::Status s = ParseTextProto(*text, path, &config, &tree); !s.ok()) return s;
    if (origins != nullptr) RecordFileOrigins(path, config, tree, origins);
    const TextPosition old_name = PositionOf(&tree, config, "server_engine_threads", -1);
    if (old_name.line >= 0) {
      BC_LOG_WARNING(
          Located(path, old_name),
          "server_engine_threads is key_shard_threads' first "
          "name; write key_shard_threads (",
          config.key_shard_threads() != 0 ? "set too, and it wins)" : "the value is taken)");
    }
  }
  if (absl::Status s = ApplyClusterEnv(&config, origins); !s.ok()) return s;
  if (absl::Status s = ApplyClusterKeyEnv(&config); !s.ok()) return s;
  return WithClusterDefaults(std::move(config));
}

}  // namespace bytecomp
