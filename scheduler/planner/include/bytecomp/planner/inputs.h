// Planner inputs: model profile, cluster, codec cost table, options (proto/planner.proto).
// Loading is strict: syntax errors and invalid values name file:line:field.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bytecomp/common/text_proto.h"
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

// A tensor of the profile holds at most this many elements (2^40: 4 TiB of fp32).
inline constexpr int64_t kMaxProfileElements = int64_t{1} << 40;
// The checks ParseModelProfile makes, for a profile from elsewhere (the workers' measurements);
// `tree`: where its fields were set, or null; `source` prefixes every error.
absl::Status ValidateProfile(const proto::ModelProfile& m, const TextProtoTree* tree,
                             absl::string_view source);
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

// The same over any points with bytes() and `value(point)`; below the first point, its value
// kept (`scale_below_first` false) or scaled down in proportion to bytes (true). 0 without
// points.
template <typename Points, typename Value>
double InterpolatePoints(const Points& points, double bytes, Value value, bool scale_below_first) {
  if (points.empty()) return 0;
  const auto at = [&](int i) { return static_cast<double>(value(points[i])); };
  if (points.size() == 1) return at(0) * bytes / static_cast<double>(points[0].bytes());
  int hi = 1;
  while (hi + 1 < points.size() && points[hi].bytes() < bytes) ++hi;
  const double a_bytes = static_cast<double>(points[hi - 1].bytes());
  if (bytes < a_bytes && hi == 1) {
    return std::max(0.0, scale_below_first ? at(0) * bytes / a_bytes : at(0));
  }
  const double slope = (at(hi) - at(hi - 1)) / (static_cast<double>(points[hi].bytes()) - a_bytes);
  return std::max(0.0, at(hi - 1) + slope * (bytes - a_bytes));
}

}  // namespace bytecomp::planner
