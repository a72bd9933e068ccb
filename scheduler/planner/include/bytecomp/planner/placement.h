// Where the scheduler puts a model's partitions, and what that does to the links that carry
// the servers' traffic. The cost model simulates one machine and spreads every partition's
// bytes evenly over the servers; the scheduler places each partition whole on the server with
// the fewest bytes so far (common/partition_assigner.h). With a few partitions per server the
// two agree; with fewer partitions than a few per server (a model of 169 partitions of 4 MiB on
// 256 servers) one server holds a partition that every worker pushes and pulls, and its link,
// not the mean one, bounds the round: the model's prediction is then optimistic.
#pragma once

#include <cstdint>
#include <string>

#include "planner.pb.h"

namespace bytecomp::planner {

struct ServerPlacement {
  int64_t partitions = 0;  // of the model at the cluster's partition_bytes
  int servers = 0;
  int empty_servers = 0;  // servers that hold no partition
  // Bytes each way per round, uncompressed, through the busiest and the mean link that carries
  // servers' traffic: with colocated servers a machine's NIC (its workers' pushes to the other
  // machines' servers, and its servers' share of the other machines' workers: pushes in, sums
  // out); else a server's link (every worker's pushes of its partitions in, the sums out).
  double busiest_link_bytes = 0;
  double mean_link_bytes = 0;
  // The same at the link's bandwidth (ms).
  double busiest_link_ms = 0;
  double mean_link_ms = 0;
  double imbalance() const {
    return mean_link_bytes > 0 ? busiest_link_bytes / mean_link_bytes : 1;
  }
};

// The model's partitions placed as the scheduler places them (in profile order; the
// cluster's partition_bytes, defaults applied); servers of a colocated cluster sit on machine
// rank % machines.
ServerPlacement PlaceOnServers(const proto::ModelProfile& profile,
                               const proto::ClusterDescription& cluster);

// The largest partition_bytes that keeps every server's link within about 1.1x of the mean for
// this model: its bytes over four times the servers (what bytecomp-scaling-prediction found for
// the shipped profiles at 32 to 256 machines), at least 64 KiB.
int64_t EvenPartitionBytes(const proto::ModelProfile& profile,
                           const proto::ClusterDescription& cluster);

// A line for the plan's summary when the busiest link carries over 1.1x the mean ("" when
// not): what the placement does and the partition_bytes that evens it out.
std::string PlacementWarning(const ServerPlacement& placement, const proto::ModelProfile& profile,
                             const proto::ClusterDescription& cluster);

}  // namespace bytecomp::planner
