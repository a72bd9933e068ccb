// The scheduler's control plane at 256 simulated nodes (bench/scale/control_plane_sim.h): every
// step of a job's life completes through the real ControlRouter, and what the scheduler sends
// per node in the steps a job repeats (declarations, heartbeats, barriers, strategy switches,
// a server replacement) does not grow with the job: the same messages per node, each no larger,
// at 68 nodes and at 272.
#include <gtest/gtest.h>

#include <map>

#include "bytecomp/common/config.h"
#include "bytecomp/common/socket_limits.h"
#include "control_plane_sim.h"

namespace bytecomp::scale {
namespace {

std::map<std::string, ControlStep> Simulate(int workers, int servers) {
  ControlSimOptions options;
  options.workers = workers;
  options.servers = servers;
  options.tensors = 4;
  options.heartbeat_intervals = 3;
  options.scratch_dir = ::testing::TempDir();
  absl::StatusOr<std::vector<ControlStep>> steps = RunControlPlaneSim(options);
  EXPECT_TRUE(steps.ok()) << steps.status();
  std::map<std::string, ControlStep> by_name;
  if (steps.ok()) {
    for (const ControlStep& s : *steps) by_name[s.name] = s;
  }
  return by_name;
}

TEST(ControlPlaneScaleTest, EveryStepCompletesAt256WorkersAndItsWorkPerNodeDoesNotGrow) {
  const std::map<std::string, ControlStep> small = Simulate(64, 4), large = Simulate(256, 16);
  ASSERT_EQ(large.size(), 7u);
  EXPECT_EQ(large.at("registration").outcome, "topology to 272 nodes");
  EXPECT_EQ(large.at("server lost and replaced").outcome, "server 0 replaced; 256 workers told");
  EXPECT_EQ(large.at("scheduler restarted").outcome, "job taken over from 272 nodes' reports");
  const double small_nodes = 68, large_nodes = 272;
  for (const char* name :
       {"declarations", "heartbeats", "barrier", "strategy switch", "scheduler restarted"}) {
    const ControlStep& s = small.at(name);
    const ControlStep& l = large.at(name);
    SCOPED_TRACE(name);
    // Messages per node: the same at both sizes (within the workers' share of the nodes).
    EXPECT_NEAR(l.messages_out / large_nodes, s.messages_out / small_nodes, 0.05);
    EXPECT_NEAR(l.messages_in / large_nodes, s.messages_in / small_nodes, 0.05);
    // Each message no larger in the larger job.
    ASSERT_GT(s.messages_out, 0);
    EXPECT_LE(static_cast<double>(l.bytes_out) / l.messages_out,
              1.1 * static_cast<double>(s.bytes_out) / s.messages_out);
  }
  // A replacement tells each worker once, with a message that does not list the job.
  const ControlStep& replaced = large.at("server lost and replaced");
  EXPECT_GE(replaced.waited_ms, 5000);
}

// The bounds every control socket holds (socket_limits.h) against what a job of 1024 workers
// and 64 servers sends: every message of the scheduler's and of a node's, in every step, far
// under the limit of the socket that receives it.
TEST(ControlPlaneScaleTest, MessagesOfA1024WorkerJobFitTheSocketBounds) {
  ControlSimOptions options;
  options.workers = 1024;
  options.servers = 64;
  options.tensors = 2;
  options.heartbeat_intervals = 1;
  options.scratch_dir = ::testing::TempDir();
  absl::StatusOr<std::vector<ControlStep>> steps = RunControlPlaneSim(options);
  ASSERT_TRUE(steps.ok()) << steps.status();
  const int64_t to_scheduler = SchedulerSocketLimits().max_message_bytes;
  const int64_t to_node = NodeControlSocketLimits().max_message_bytes;
  for (const ControlStep& s : *steps) {
    SCOPED_TRACE(s.name);
    EXPECT_LT(s.largest_out_bytes, to_node / 100);  // the largest: a server's topology
    EXPECT_LT(s.largest_in_bytes, to_scheduler / 100);
    EXPECT_LT(s.most_to_one_node, kControlQueueMessages);
  }
}

}  // namespace
}  // namespace bytecomp::scale
