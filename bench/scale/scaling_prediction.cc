// bytecomp-scaling-prediction: the data plane past this machine. For each shipped profile, a
// cluster of M machines (one GPU each, S = M servers beside the workers as BytePS advises, the
// links of --cluster) at each --machines and --partition_bytes:
// - the planner's cost model: the iteration uncompressed and as planned (planner.h);
// - the scheduler's placement of the partitions on the servers (planner/placement.h, with the
//   scheduler's own PartitionAssigner): how many servers hold nothing, and the busiest
//   machine's NIC time each way per round uncompressed, against the mean machine's. The cost
//   model spreads every partition evenly over the machines, so where the busiest machine
//   carries more than the mean its NIC is the limit the model does not see: the table gives
//   that machine's NIC time as a lower bound on the uncompressed iteration.
//
//   bytecomp-scaling-prediction [--machines=8,16,32,64,128,256]
//       [--partition_bytes=4194304,1048576,262144] [--models=resnet50,vgg16,bert-base,gpt2]
//       [--cluster=8x1gpu-10g]
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "bytecomp/planner/placement.h"
#include "bytecomp/planner/planner.h"
#include "count_list.h"

ABSL_FLAG(std::string, machines, "8,16,32,64,128,256", "machines of each cluster");
ABSL_FLAG(std::string, partition_bytes, "4194304,1048576,262144",
          "ClusterConfig.partition_bytes of each row");
ABSL_FLAG(std::string, models, "resnet50,vgg16,bert-base,gpt2", "shipped profiles");
ABSL_FLAG(std::string, cluster, "8x1gpu-10g",
          "shipped cluster whose links and threads every row uses (machines, servers and "
          "partitions replaced)");

using namespace bytecomp;

constexpr char kTool[] = "bytecomp-scaling-prediction";

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string dir = BYTECOMP_PLANNER_DIR;
  absl::StatusOr<proto::ClusterDescription> base =
      planner::LoadClusterDescription(dir + "/clusters/" + absl::GetFlag(FLAGS_cluster) + ".pbtxt");
  absl::StatusOr<proto::CostTable> costs = planner::LoadCostTable(dir + "/costs/nominal.pbtxt");
  if (!base.ok() || !costs.ok()) {
    std::fprintf(stderr, "bytecomp-scaling-prediction: %s %s\n", base.status().ToString().c_str(),
                 costs.status().ToString().c_str());
    return 1;
  }
  std::printf(
      "cluster %s's links (%.0f Gbit/s, %.0f us) and threads, M machines of one GPU, M servers "
      "beside the workers; nominal costs; times in ms\n",
      absl::GetFlag(FLAGS_cluster).c_str(), base->worker_link().bandwidth_gbps(),
      base->worker_link().latency_us());
  std::printf("%-10s %5s %9s %6s %8s | %9s %9s | %9s %9s %9s %9s | %s\n", "model", "M", "partition",
              "parts", "empty", "none", "planned", "mean NIC", "busiest", "busiest/", "busiest/",
              "limit");
  std::printf("%-10s %5s %9s %6s %8s | %9s %9s | %9s %9s %9s %9s |\n", "", "", "KiB", "", "servers",
              "(model)", "(model)", "ms", "NIC ms", "mean", "model none");
  const std::vector<std::string> models =
      absl::StrSplit(absl::GetFlag(FLAGS_models), ',', absl::SkipEmpty());
  for (const std::string& model : models) {
    absl::StatusOr<proto::ModelProfile> profile =
        planner::LoadModelProfile(dir + "/profiles/" + model + ".pbtxt");
    if (!profile.ok()) {
      std::fprintf(stderr, "bytecomp-scaling-prediction: %s\n",
                   profile.status().ToString().c_str());
      return 1;
    }
    for (int64_t machines : scale::CountList(absl::GetFlag(FLAGS_machines), kTool)) {
      for (int64_t partition_bytes :
           scale::CountList(absl::GetFlag(FLAGS_partition_bytes), kTool)) {
        std::fprintf(stderr, "bytecomp-scaling-prediction: %s M=%lld partitions of %lld bytes\n",
                     model.c_str(), static_cast<long long>(machines),
                     static_cast<long long>(partition_bytes));
        planner::PlannerInputs in;
        in.profile = *profile;
        in.cluster = *base;
        in.cluster.set_machines(static_cast<int32_t>(machines));
        in.cluster.set_gpus_per_machine(1);
        in.cluster.set_workers(0);
        in.cluster.set_servers(static_cast<int32_t>(machines));
        in.cluster.set_colocated_servers(true);
        in.cluster.set_partition_bytes(partition_bytes);
        in.costs = *costs;
        absl::StatusOr<planner::PreparedProblem> prepared = planner::Prepare(in);
        if (!prepared.ok()) {
          std::fprintf(stderr, "bytecomp-scaling-prediction: %s\n",
                       prepared.status().ToString().c_str());
          return 1;
        }
        const planner::PlanResult plan = planner::PlanByteComp(*prepared);
        const planner::ServerPlacement placed = planner::PlaceOnServers(*profile, in.cluster);
        const double mean_ms = placed.mean_link_ms;
        const double busiest_ms = placed.busiest_link_ms;
        const double none_ms = plan.no_compression_us / 1e3;
        const double ratio = busiest_ms / none_ms;
        std::printf("%-10s %5lld %9lld %6lld %8d | %9.1f %9.1f | %9.1f %9.1f %9.2f %9.2f | %s\n",
                    model.c_str(), static_cast<long long>(machines),
                    static_cast<long long>(partition_bytes >> 10),
                    static_cast<long long>(placed.partitions), placed.empty_servers, none_ms,
                    plan.predicted_us / 1e3, mean_ms, busiest_ms, busiest_ms / mean_ms, ratio,
                    ratio > 1.1 ? "the busiest server's NIC (placement)" : "as modelled");
      }
    }
  }
  std::printf(
      "none, planned: the cost model's iteration (it spreads every partition's bytes evenly over "
      "the machines); mean / busiest NIC: one machine's bytes each way per round uncompressed "
      "over its NIC, for the scheduler's placement of the partitions (PartitionAssigner); "
      "busiest / model none > 1: the model is optimistic by at least that factor\n");
  return 0;
}
