// Fuzz target: the other text files the daemons and the planner read, each strict protobuf
// text format whose errors must name file, line and field. The first input byte chooses the
// schema, the rest is the text:
//   0 ClusterConfig (--config of every daemon: common/config.h), defaulted and validated
//   1 ClusterDescription, 2 CostTable, 3 ModelProfile, 4 PlannerOptions (bytecomp-plan and
//     --strategy=auto: scheduler/planner inputs.h), each with its defaults filled in
// A refusal must be InvalidArgument.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "bytecomp/common/config.h"
#include "bytecomp/planner/inputs.h"
#include "codec_choice.h"

namespace {

void RequireInvalidArgument(const absl::Status& status, const char* what) {
  if (status.ok() || absl::IsInvalidArgument(status)) return;
  std::fprintf(stderr, "%s: %s\n", what, status.ToString().c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  bytecomp::fuzz::SilenceLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bytecomp;
  if (size == 0) return 0;
  const absl::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 5) {
    case 0: {
      proto::ClusterConfig config;
      const absl::Status parsed = ParseTextProto(text, "cluster.pbtxt", &config);
      RequireInvalidArgument(parsed, "ClusterConfig");
      if (parsed.ok()) {
        RequireInvalidArgument(ValidateClusterConfig(WithClusterDefaults(config)),
                               "ValidateClusterConfig");
      }
      break;
    }
    case 1: {
      proto::ClusterDescription cluster;
      const absl::Status parsed = planner::ParseClusterDescription(text, "c.pbtxt", &cluster);
      RequireInvalidArgument(parsed, "ClusterDescription");
      if (parsed.ok()) (void)planner::WithDefaults(cluster);
      break;
    }
    case 2: {
      proto::CostTable costs;
      RequireInvalidArgument(planner::ParseCostTable(text, "costs.pbtxt", &costs), "CostTable");
      break;
    }
    case 3: {
      proto::ModelProfile profile;
      RequireInvalidArgument(planner::ParseModelProfile(text, "p.pbtxt", &profile), "ModelProfile");
      break;
    }
    default: {
      proto::PlannerOptions options;
      const absl::Status parsed = planner::ParsePlannerOptions(text, "o.pbtxt", &options);
      RequireInvalidArgument(parsed, "PlannerOptions");
      if (parsed.ok()) (void)planner::WithDefaults(options);
    }
  }
  return 0;
}
