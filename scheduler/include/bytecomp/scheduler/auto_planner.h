// --strategy=auto: the workers' measured profiles, planned with the ByteComp decision
// algorithm (scheduler/planner) into the Strategy the scheduler then switches every node to.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bytecomp/scheduler/link_book.h"
#include "planner.pb.h"
#include "strategy.pb.h"

namespace bytecomp {

struct AutoPlan {
  proto::Strategy strategy;
  std::string summary;  // predicted iteration times and what was compressed, for the log
};

// Where --strategy=auto takes the cluster's worker_link and server_link from
// (--plan_links): kMeasured, the workers' link probes when at least one (worker, server) pair
// measured latency and both bandwidths, else the --plan_cluster file's values; kFile, always
// the file's (the probes are only printed).
enum class PlanLinks { kMeasured, kFile };
absl::StatusOr<PlanLinks> ParsePlanLinks(absl::string_view text);

// Sets cluster->worker_link and server_link per `mode` and returns a line saying which values
// were used. From probes: each link's bandwidth is the slower of the median up and down
// bandwidths; each link's latency is a quarter of the median small-probe round trip (the
// planner adds worker_link and server_link latencies for one transfer, which takes half a
// round trip).
std::string ChooseLinks(PlanLinks mode, const std::optional<MeasuredLinks>& measured,
                        proto::ClusterDescription* cluster);

// Merges the workers' profiles (worker 0's ready order, every tensor's gap averaged over the
// workers, forward_us the median over workers), sets the cluster's worker and server counts
// to the job's, and plans.
absl::StatusOr<AutoPlan> PlanFromProfiles(const std::vector<proto::ModelProfile>& profiles,
                                          proto::ClusterDescription cluster,
                                          const proto::CostTable& costs, int num_workers,
                                          int num_servers);

}  // namespace bytecomp
