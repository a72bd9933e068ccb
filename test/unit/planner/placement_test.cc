// planner/placement.h: the scheduler's placement of a model's partitions and the links it
// loads, against the cost model's even spreading.
#include "bytecomp/planner/placement.h"

#include <gtest/gtest.h>

#include "bytecomp/planner/inputs.h"
#include "planner_test_util.h"

namespace bytecomp::planner {
namespace {

// The shared builders by their full names: in a unity build this file shares its anonymous
// namespace with the other planner tests, one of which has a Cluster() of its own.
// Two tensors of one 4 MiB partition each on 8 separate servers, 4 workers: two servers hold
// everything, each link carries 4 workers' pushes of 4 MiB; the mean server's is a quarter.
TEST(PlacementTest, FewPartitionsOnManyServersLoadTheirLinks) {
  proto::ModelProfile model;
  *model.add_tensors() = testing::Tensor(1 << 20, "a");
  *model.add_tensors() = testing::Tensor(1 << 20, "b");
  proto::ClusterDescription cluster = testing::Cluster(4, 8, 8.0);  // 8 Gbit/s: 1e6 bytes a ms
  const ServerPlacement p = PlaceOnServers(model, cluster);
  EXPECT_EQ(p.partitions, 2);
  EXPECT_EQ(p.empty_servers, 6);
  EXPECT_DOUBLE_EQ(p.busiest_link_bytes, 4.0 * (4 << 20));
  EXPECT_DOUBLE_EQ(p.mean_link_bytes, 4.0 * (8 << 20) / 8);
  EXPECT_DOUBLE_EQ(p.imbalance(), 4.0);
  EXPECT_NEAR(p.busiest_link_ms, 4.0 * (4 << 20) / 1e6, 1e-9);
  EXPECT_NE(PlacementWarning(p, model, cluster).find("6 hold none"), std::string::npos);
  // Partitions of a quarter of the model's bytes per server (64 KiB at least) even it out.
  cluster.set_partition_bytes(EvenPartitionBytes(model, cluster));
  EXPECT_EQ(cluster.partition_bytes(), 256 << 10);
  const ServerPlacement even = PlaceOnServers(model, cluster);
  EXPECT_EQ(even.partitions, 32);
  EXPECT_DOUBLE_EQ(even.imbalance(), 1.0);
  EXPECT_EQ(PlacementWarning(even, model, cluster), "");
}

// resnet50 on 256 machines with a server beside each worker (bytecomp-scaling-prediction's
// finding): at 4 MiB the busiest machine's NIC needs 934 ms a round, 5.7x the mean; the
// shipped 8-machine cluster is even.
TEST(PlacementTest, Resnet50On256ColocatedMachines) {
  absl::StatusOr<proto::ModelProfile> resnet50 =
      LoadModelProfile(testing::kPlannerDir + "/profiles/resnet50.pbtxt");
  absl::StatusOr<proto::ClusterDescription> shipped =
      LoadClusterDescription(testing::kPlannerDir + "/clusters/8x1gpu-10g.pbtxt");
  ASSERT_TRUE(resnet50.ok() && shipped.ok());
  EXPECT_LE(PlaceOnServers(*resnet50, *shipped).imbalance(), 1.1);
  proto::ClusterDescription large = *shipped;
  large.set_machines(256);
  large.set_servers(256);
  large.set_colocated_servers(true);
  const ServerPlacement p = PlaceOnServers(*resnet50, large);
  EXPECT_EQ(p.partitions, 169);
  EXPECT_EQ(p.empty_servers, 87);
  EXPECT_NEAR(p.imbalance(), 5.73, 0.01);
  EXPECT_NEAR(p.busiest_link_ms, 934.1, 0.5);
  large.set_partition_bytes(EvenPartitionBytes(*resnet50, large));
  EXPECT_LE(PlaceOnServers(*resnet50, large).imbalance(), 1.2);
}

}  // namespace
}  // namespace bytecomp::planner
