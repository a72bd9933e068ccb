// Planner inputs: model profile, cluster, codec cost table, options (proto/planner.proto).
// Loading is strict: syntax errors and invalid values name file:line:field.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "planner.pb.h"

namespace bytecomp::planner {

// Parse text format and validate; `source_name` prefixes every error
// ("resnet.pbtxt:12:3: tensors[4].elements: must be > 0, got 0").
absl::Status ParseModelProfile(absl::string_view text, absl::string_view source_name,
                               proto::ModelProfile* out);
absl::Status ParseClusterDescription(absl::string_view text, absl::string_view source_name,
                                     proto::ClusterDescription* out);
absl::Status ParseCostTable(absl::string_view text, absl::string_view source_name,
                            proto::CostTable* out);
absl::Status ParsePlannerOptions(absl::string_view text, absl::string_view source_name,
                                 proto::PlannerOptions* out);

absl::StatusOr<proto::ModelProfile> LoadModelProfile(const std::string& path);
absl::StatusOr<proto::ClusterDescription> LoadClusterDescription(const std::string& path);
absl::StatusOr<proto::CostTable> LoadCostTable(const std::string& path);
absl::StatusOr<proto::PlannerOptions> LoadPlannerOptions(const std::string& path);

// Fills documented defaults of unset fields (workers, pool threads, PCIe, partition size...).
proto::ClusterDescription WithDefaults(proto::ClusterDescription cluster);
proto::PlannerOptions WithDefaults(proto::PlannerOptions options);

// Piecewise-linear cost in us for `bytes` (points sorted by bytes): below the first point
// the first point's time (a fixed cost such as a kernel launch), beyond the last the last
// segment extended; a single point scales linearly from the origin.
double InterpolateCost(const google::protobuf::RepeatedPtrField<proto::CostPoint>& points,
                       double bytes);

}  // namespace bytecomp::planner
