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
  // Predicted iteration times, what was compressed, which codecs were not considered, the
  // link fit and what the profiled rounds were bound by: for the log and the plan file.
  std::string summary;
  // Per tensor of at least min_compress_bytes: the option chosen, its loss class, its
  // predicted saving, and why (planner/explain.h); the smaller ones counted.
  std::string table;
  // What was planned with (the merged, rounded profile, unfused; the cluster with the job's
  // counts and the fitted links; the options): bytecomp-plan with these and the cost table
  // gives the same plan (a fused one with --fusion_below at the size the summary names).
  proto::ModelProfile profile;
  proto::ClusterDescription cluster;
  proto::PlannerOptions options;
  double predicted_us = 0;  // the plan's predicted iteration
  double link_scale = 1;    // the link fit's fraction of the given bandwidth (1: none)
  bool cpu_bound = false;   // the profiled rounds were CPU-bound (then the links are not fitted)
};

// Measured values to two significant digits (0.44, 9.4, 1200). Profiles and link probes vary
// from run to run by more than the planner's tolerance; the same job on the same links then
// gives the same plan unless a value moves across a rounding boundary.
double TwoSignificantDigits(double x);

// The workers' profiles as one: profiles[0] with each tensor's ready time the median over the
// workers of its offset from the worker's first gradient, in the order of those medians, gaps
// to two significant digits. (Medians of each gap would lose the backward's span wherever
// tensors ready close together come in different orders on different workers: each gap is
// then measured from a different predecessor.)
proto::ModelProfile MergeReadyTimes(const std::vector<proto::ModelProfile>& profiles);

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
// round trip); both to two significant digits.
std::string ChooseLinks(PlanLinks mode, const std::optional<MeasuredLinks>& measured,
                        proto::ClusterDescription* cluster);

// True when no entry of `strategy` compresses: rounds run under it are uncompressed.
bool IsUncompressed(const proto::Strategy& strategy);

// The job being planned, as the scheduler knows it.
struct AutoPlanJob {
  int workers = 1;
  int servers = 1;
  // Hierarchical jobs (ClusterConfig.hierarchical): the machines the workers were grouped
  // into. The plan then has this many machines and only hierarchical options
  // (PlannerOptions.hierarchical_only). 0: a flat job; the cluster file's machines stand.
  int hierarchical_machines = 0;
  // The profiled rounds ran uncompressed (the link fit needs that).
  bool profiled_uncompressed = false;
  // The job's ClusterConfig.partition_bytes: the plan's default partitioning and the
  // placement of the partitions on the servers follow it (0: the cluster file's).
  int64_t partition_bytes = 0;
  // The workers joined collectives (ClusterConfig.collectives) and the job has no cluster key:
  // the plan may sum tensors among the workers (ClusterDescription.collectives). A keyed job's
  // plan stays on the servers: its strategy would have to allow unencrypted collectives.
  bool collectives = false;
};

// Merges the workers' profiles (worker 0's ready order; every tensor's gap, forward_us,
// measured_round_us and the CPU use the medians over the workers, to two significant
// digits), sets the cluster's worker and server counts (and, hierarchical, machines) to the
// job's, and plans with `options` (PlannerOptions: codecs, max_loss, ...).
//
// What bound the profiled rounds, judged from the CPU the job's own processes got: CPU-bound
// when the worker processes used at least 85% of the cores they may run on
// (measured_round_cpu_us over the round, cpu_cores) or their threads waited for a CPU at
// least a quarter of the round (measured_round_wait_us: the job's processes crowd the cores;
// a program at low priority beside the job does not make them wait); else network-bound.
// How busy the host's CPUs were (host_cpu_busy) decides only for workers that do not report
// their wait (at least 85% busy: CPU-bound), and is said beside it otherwise. The summary
// says which, or that the workers did not report it.
//
// Link fit: when the profiled rounds ran uncompressed (job.profiled_uncompressed), were not
// CPU-bound, and took longer than the model predicts for them, the links' bandwidth is
// scaled down (bisection, to a tenth at most; the scale to two significant digits) until the
// model's uncompressed round matches the measured one, and the plan uses the scaled links.
// Not when the model's round is mostly backward compute: the communication it exposes beyond
// the compute must be at least a quarter of the measured excess over the compute. Links carry
// less than a probe's lone transfer when every worker sends at once (W-way incast, both
// directions full); a slow CPU is not a slow link. The summary says what was fitted.
// A flat job's model is planned again with its small host fp32 tensors fused (fusion.h:
// PlanWithFusion, unless PlannerOptions.disable_fusion); a fused plan predicted at least 2%
// faster is kept, its groups in the strategy (Strategy.fusion_groups, set at the switch), and
// the summary says which was kept.
absl::StatusOr<AutoPlan> PlanFromProfiles(const std::vector<proto::ModelProfile>& profiles,
                                          proto::ClusterDescription cluster,
                                          const proto::CostTable& costs, const AutoPlanJob& job,
                                          const proto::PlannerOptions& options = {});

}  // namespace bytecomp
