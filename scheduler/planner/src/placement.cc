#include "bytecomp/planner/placement.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_format.h"
#include "bytecomp/common/partition_assigner.h"
#include "bytecomp/planner/decision_tree.h"
#include "bytecomp/planner/explain.h"
#include "bytecomp/planner/inputs.h"

namespace bytecomp::planner {
namespace {

constexpr double kWarnImbalance = 1.1;

double BytesPerMs(const proto::LinkSpec& link) { return link.bandwidth_gbps() * 1e9 / 8 / 1e3; }

double ModelBytes(const proto::ModelProfile& profile) {
  double total = 0;
  for (const proto::TensorProfile& t : profile.tensors())
    total += static_cast<double>(TensorBytes(t));
  return total;
}

}  // namespace

ServerPlacement PlaceOnServers(const proto::ModelProfile& profile,
                               const proto::ClusterDescription& given) {
  const proto::ClusterDescription cluster = WithDefaults(given);
  ServerPlacement out;
  out.servers = cluster.servers();
  PartitionAssigner assigner(cluster.servers(), cluster.partition_bytes());
  std::vector<double> held(static_cast<size_t>(cluster.servers()), 0);
  double total = 0;
  for (const proto::TensorProfile& t : profile.tensors()) {
    const int64_t bytes = TensorBytes(t);
    const proto::DType dtype =
        bytes == 2 * t.elements() ? proto::DTYPE_FLOAT16 : proto::DTYPE_FLOAT32;
    absl::StatusOr<PartitionAssignment> a = assigner.Assign(t.elements(), dtype, 0);
    if (!a.ok()) continue;  // a profile the planner checks before (elements >= 1)
    const int64_t size = static_cast<int64_t>(DTypeSize(dtype));
    for (size_t p = 0; p < a->partition_server.size(); ++p) {
      const int64_t elements = std::min(
          a->partition_elements, t.elements() - static_cast<int64_t>(p) * a->partition_elements);
      held[static_cast<size_t>(a->partition_server[p])] += static_cast<double>(elements * size);
      ++out.partitions;
    }
    total += static_cast<double>(bytes);
  }
  for (double l : held) out.empty_servers += l == 0 ? 1 : 0;
  const double workers = cluster.workers();
  if (cluster.colocated_servers()) {
    const int machines = cluster.machines();
    std::vector<double> on_machine(static_cast<size_t>(machines), 0);
    for (size_t s = 0; s < held.size(); ++s)
      on_machine[s % static_cast<size_t>(machines)] += held[s];
    const double local = workers / machines;  // workers per machine
    for (double l : on_machine) {
      const double bytes = local * (total - l) + (workers - local) * l;
      out.busiest_link_bytes = std::max(out.busiest_link_bytes, bytes);
      out.mean_link_bytes += bytes / machines;
    }
    out.busiest_link_ms = out.busiest_link_bytes / BytesPerMs(cluster.worker_link());
    out.mean_link_ms = out.mean_link_bytes / BytesPerMs(cluster.worker_link());
  } else {
    for (double l : held) {
      out.busiest_link_bytes = std::max(out.busiest_link_bytes, workers * l);
      out.mean_link_bytes += workers * l / static_cast<double>(held.size());
    }
    out.busiest_link_ms = out.busiest_link_bytes / BytesPerMs(cluster.server_link());
    out.mean_link_ms = out.mean_link_bytes / BytesPerMs(cluster.server_link());
  }
  return out;
}

int64_t EvenPartitionBytes(const proto::ModelProfile& profile,
                           const proto::ClusterDescription& cluster) {
  const double per = ModelBytes(profile) / (4.0 * std::max(1, cluster.servers()));
  return std::max<int64_t>(int64_t{64} << 10, static_cast<int64_t>(per) / 4096 * 4096);
}

std::string PlacementWarning(const ServerPlacement& p, const proto::ModelProfile& profile,
                             const proto::ClusterDescription& given) {
  if (p.imbalance() <= kWarnImbalance) return "";
  const proto::ClusterDescription cluster = WithDefaults(given);
  return absl::StrFormat(
      "placement: the scheduler puts the model's %d partitions of %s on %d servers (%d hold "
      "none), so the busiest %s carries %s each way a round uncompressed, %.2fx the mean: at "
      "least %.1f ms, where the model spreads it (%.1f ms); partition_bytes of at most %s evens "
      "it out",
      p.partitions, HumanBytes(static_cast<double>(cluster.partition_bytes())), p.servers,
      p.empty_servers, cluster.colocated_servers() ? "machine's NIC" : "server's link",
      HumanBytes(p.busiest_link_bytes), p.imbalance(), p.busiest_link_ms, p.mean_link_ms,
      HumanBytes(static_cast<double>(EvenPartitionBytes(profile, cluster))));
}

}  // namespace bytecomp::planner
