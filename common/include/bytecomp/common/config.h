// Strict protobuf text-format config loading: every error names file, line, column and field.
#pragma once

#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cluster_config.pb.h"
#include "google/protobuf/message.h"

namespace bytecomp {

// Parses text format into `out`. `source_name` (a path) prefixes every error:
// "strategy.pbtxt:3:7: Message type \"X\" has no field named \"codek\"".
absl::Status ParseTextProto(absl::string_view text, absl::string_view source_name,
                            google::protobuf::Message* out);
absl::Status ParseTextProtoFile(const std::string& path, google::protobuf::Message* out);

// Fills every unset (zero) field of the cluster config with its documented default.
proto::ClusterConfig WithClusterDefaults(proto::ClusterConfig config);
// Checks ranges: positive counts, a host:port scheduler address, sane timeouts.
absl::Status ValidateClusterConfig(const proto::ClusterConfig& config);
// Overrides fields from BYTECOMP_* environment variables (BYTECOMP_SCHEDULER,
// BYTECOMP_NUM_WORKERS, BYTECOMP_NUM_SERVERS, BYTECOMP_PARTITION_BYTES, ...).
absl::Status ApplyClusterEnv(proto::ClusterConfig* config);
// File (if path non-empty) -> env overrides -> defaults. Does not validate.
absl::StatusOr<proto::ClusterConfig> LoadClusterConfig(const std::string& path);

}  // namespace bytecomp
