// The cost model's newer parts: measured sizes, two-round codecs (powersgd), colocated
// servers.
#include <cmath>

#include "bytecomp/planner/decision_tree.h"
#include "bytecomp/planner/inputs.h"
#include "gtest/gtest.h"
#include "planner_test_util.h"

namespace bytecomp::planner {
namespace {

using testing::Point;
using testing::Tensor;

proto::SizePoint Size(int64_t bytes, int64_t encoded) {
  proto::SizePoint p;
  p.set_bytes(bytes);
  p.set_encoded_bytes(encoded);
  return p;
}

// 4 machines of one CPU worker, 4 servers, 8 Gbit/s = 1000 bytes/us, 10 us latency.
proto::ClusterDescription Cluster() {
  proto::ClusterDescription c;
  c.set_machines(4);
  c.set_servers(4);
  for (auto* link : {c.mutable_worker_link(), c.mutable_server_link()}) {
    link->set_bandwidth_gbps(8);
    link->set_latency_us(10);
  }
  return WithDefaults(c);
}

// powersgd as --calibrate writes it: 100 us per MiB before, 200 between, 50 after the rounds.
proto::CostTable PowerSgd() {
  proto::CostTable costs;
  proto::CodecCost* c = costs.add_codecs();
  c->set_name("powersgd");
  c->set_memory("powersgd");
  c->set_ratio(0.01);
  c->set_two_round(true);
  proto::DeviceCost* cpu = c->add_costs();
  cpu->set_device(proto::DEVICE_CPU);
  *cpu->add_encode() = Point(1 << 20, 100);
  *cpu->add_between_rounds() = Point(1 << 20, 200);
  *cpu->add_decode() = Point(1 << 20, 50);
  *c->add_sizes() = Size(64 << 10, 1032);
  *c->add_sizes() = Size(1 << 20, 4104);
  *c->add_sizes() = Size(16 << 20, 16392);
  return costs;
}

TEST(CostModelTest, MeasuredSizesReplaceTheRatio) {
  proto::CodecCost codec = PowerSgd().codecs(0);
  EXPECT_DOUBLE_EQ(CompressedBytes(codec, 1 << 20), 4104);
  // Linear between points, scaled down below the first, never more than the input.
  EXPECT_NEAR(CompressedBytes(codec, (1 << 20) + (15 << 19)), (4104 + 16392) / 2.0, 1e-9);
  EXPECT_NEAR(CompressedBytes(codec, 32 << 10), 516, 1e-9);
  codec.clear_sizes();
  EXPECT_DOUBLE_EQ(CompressedBytes(codec, 1 << 20), 0.01 * (1 << 20));
  codec.set_ratio(1.5);
  EXPECT_DOUBLE_EQ(CompressedBytes(codec, 1000), 1000);
}

TEST(CostModelTest, TwoRoundCodecsMakeTwoRoundTripsOfHalfTheirSize) {
  const proto::CostTable costs = PowerSgd();
  const auto options =
      EnumerateOptions(Tensor(1 << 18), Cluster(), costs, WithDefaults(proto::PlannerOptions()));
  // none, and powersgd on the CPU pool: never two-way (it pulls its summed factors).
  ASSERT_EQ(options.size(), 2u);
  EXPECT_FALSE(options[1].two_way);
  EXPECT_EQ(DescribeOption(options[1], costs), "powersgd(CPU,2-round)");
  const OptionCost cost = CostOf(options[1], Tensor(1 << 18), Cluster(), costs);
  // encode, push, server, pull, between, push, server, pull, decode.
  ASSERT_EQ(cost.num_stages, 9);
  const int expected[] = {kCpuPool, kNicUp,  kServer,  kNicDown, kCpuPool,
                          kNicUp,   kServer, kNicDown, kCpuPool};
  for (int k = 0; k < 9; ++k) EXPECT_EQ(cost.stages[k].resource, expected[k]) << k;
  EXPECT_NEAR(cost.stages[0].duration_us, 100, 1e-3);
  EXPECT_NEAR(cost.stages[4].duration_us, 200, 1e-3);
  EXPECT_NEAR(cost.stages[8].duration_us, 50, 1e-3);
  // Each round trip carries half of the 4104 bytes: 20 us latency + 4 senders into 4 servers.
  EXPECT_NEAR(cost.stages[1].duration_us, 20 + 2052 / 1000.0, 1e-3);
  EXPECT_NEAR(cost.stages[7].duration_us, 20 + 2052 / 1000.0, 1e-3);
  // The servers add 4 workers' f32 vectors of 2052 bytes at 8 GB/s.
  EXPECT_NEAR(cost.stages[2].duration_us, 4 * 2052 / 8e3, 1e-3);
}

TEST(CostModelTest, ColocatedServersShareTheMachinesNicBothWaysAndItsCpu) {
  proto::ClusterDescription cluster = Cluster();
  cluster.set_colocated_servers(true);
  const proto::TensorProfile t = Tensor(250000);  // 1 MB
  const OptionCost cost = CostOf(TensorOption{}, t, cluster, proto::CostTable());
  // Push out and (others' pushes) in, the servers' work on the pool, replies out, pull in:
  // 3/4 of the bytes cross each machine's NIC each way (a quarter stay on the machine).
  ASSERT_EQ(cost.num_stages, 5);
  const double wire = 1e6 * 3 / 4 / 1000.0;
  EXPECT_EQ(cost.stages[0].resource, kNicUp);
  EXPECT_NEAR(cost.stages[0].duration_us, 20 + wire, 1e-3);
  EXPECT_EQ(cost.stages[1].resource, kNicDown);
  EXPECT_NEAR(cost.stages[1].duration_us, wire, 1e-3);
  // Each machine's server sums a quarter of the keys: 4 pushes at 8 GB/s, a quarter of it.
  EXPECT_EQ(cost.stages[2].resource, kCpuPool);
  EXPECT_NEAR(cost.stages[2].duration_us, 4 * 1e6 / 8e3 / 4, 1e-3);
  EXPECT_EQ(cost.stages[3].resource, kNicUp);
  EXPECT_EQ(cost.stages[4].resource, kNicDown);
  EXPECT_NEAR(cost.stages[4].duration_us, 20 + wire, 1e-3);
  EXPECT_NEAR(cost.work_us[kNicUp], 20 + 2 * wire, 1e-3);
  EXPECT_NEAR(cost.work_us[kNicDown], 20 + 2 * wire, 1e-3);
  EXPECT_EQ(cost.work_us[kServer], 0);
  // Apart, each NIC carries the whole push one way and the pull the other.
  const OptionCost apart = CostOf(TensorOption{}, t, Cluster(), proto::CostTable());
  EXPECT_NEAR(apart.work_us[kNicUp], 20 + 1e6 / 1000.0, 1e-3);
  // One machine: nothing crosses a NIC.
  cluster.set_machines(1);
  cluster.set_servers(1);
  cluster.set_workers(1);
  EXPECT_NEAR(CostOf(TensorOption{}, t, cluster, proto::CostTable()).work_us[kNicUp], 20, 1e-3);
}

TEST(CostModelTest, ColocatedServersMustBeSpreadEvenly) {
  proto::ClusterDescription c;
  const std::string text =
      "machines: 4 servers: 3 colocated_servers: true "
      "worker_link { bandwidth_gbps: 10 } server_link { bandwidth_gbps: 10 }";
  absl::Status s = ParseClusterDescription(text, "c.pbtxt", &c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("colocated_servers: needs servers spread evenly over the "
                             "machines: 3 servers on 4 machines"),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace bytecomp::planner
