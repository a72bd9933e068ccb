// The cluster config: loaded from its file (bytecomp/common/text_proto.h), the environment and
// flags, checked, every error naming where the value came from.
#pragma once

#include <string>
#include "absl/strings/string_view.h"

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bytecomp/common/text_proto.h"
#include "cluster_config.pb.h"
#include "google/protobuf/message.h"
#include "google/protobuf/text_format.h"

namespace bytecomp {

// Where each top-level field of a loaded ClusterConfig came from, so that an error about its
// value names it: "cluster.pbtxt:4:1" (the line of the file that set it),
// "BYTECOMP_NUM_WORKERS='0'" (the environment), "--num_workers" (a flag). Fields left at
// their defaults have none.
class ConfigOrigins {
 public:
  void Set(absl::string_view field, std::string origin);
  bool Has(absl::string_view field) const { return by_field_.contains(field); }
  // "<origin>: ", or "" for a field without one.
  std::string Prefix(absl::string_view field) const;

 private:
  absl::flat_hash_map<std::string, std::string> by_field_;
};

// How long a node waits without hearing from the scheduler before it fails every wait naming
// it: scheduler_timeout_ms, or heartbeat_timeout_ms when unset (0). The one setting a later
// failover (a restarted scheduler taking the job up) extends.
int64_t SchedulerTimeoutMs(const proto::ClusterConfig& config);
// Whether a lost server may be replaced (server_replacement_timeout_ms > 0; its default,
// 60 s, applied by WithClusterDefaults): workers then keep what a replacement needs.
bool ServerFailoverOn(const proto::ClusterConfig& config);

// Fills every unset (zero) field of the cluster config with its documented default.
proto::ClusterConfig WithClusterDefaults(proto::ClusterConfig config);
// Checks every field's range (in 64-bit arithmetic, so that no product overflows): counts, a
// host:port scheduler address, timeouts and their relations, limits. Each problem names the
// field, its value and, with `origins`, where it was set.
absl::Status ValidateClusterConfig(const proto::ClusterConfig& config,
                                   const ConfigOrigins* origins = nullptr);
// Overrides fields from BYTECOMP_* environment variables (BYTECOMP_SCHEDULER,
// BYTECOMP_NUM_WORKERS, BYTECOMP_NUM_SERVERS, BYTECOMP_PARTITION_BYTES, ...). A value that is
// not an integer, or does not fit its field, is an error naming the variable.
absl::Status ApplyClusterEnv(proto::ClusterConfig* config, ConfigOrigins* origins = nullptr);
// File (if path non-empty) -> env overrides -> defaults. Does not validate.
absl::StatusOr<proto::ClusterConfig> LoadClusterConfig(const std::string& path,
                                                       ConfigOrigins* origins = nullptr);

}  // namespace bytecomp
