// The per-job bounds a server and the scheduler hold (socket_limits.h, request_dispatcher.h)
// against what a job of 1,024 workers and 64 servers needs: room for every legitimate
// connection and request, and a share per worker that does not grow with the job. The
// control messages of such a job are checked against the control sockets' bounds in
// test/unit/scheduler/control_plane_scale_test.cc.
#include <gtest/gtest.h>

#include <algorithm>

#include "bytecomp/common/config.h"
#include "bytecomp/common/socket_limits.h"
#include "bytecomp/server/request_dispatcher.h"
#include "server_test_util.h"

namespace bytecomp::server {
namespace {

constexpr int kWorkers = 1024;
constexpr int kServers = 64;

proto::ClusterConfig JobConfig() {
  proto::ClusterConfig c;
  c.set_num_workers(kWorkers);
  c.set_num_servers(kServers);
  return WithClusterDefaults(c);
}

TEST(BoundsAtScaleTest, AServerOfA1024WorkerJobTakesEveryWorkersConnections) {
  const proto::ClusterConfig config = JobConfig();
  const ConnectionCaps data = DataConnectionCaps(config);
  // Every worker's connections to this server, each with a reconnection, whether the workers
  // sit on their own hosts or all behind one address (a NAT, an emulation on one host).
  const int opened = kWorkers * config.connections_per_server();
  EXPECT_GE(data.per_address, opened + 2 * kWorkers);
  EXPECT_GE(data.total, 2 * opened);
  const ConnectionCaps scheduler = SchedulerConnectionCaps(config);
  EXPECT_GE(scheduler.per_address, kWorkers + kServers);
  EXPECT_GE(scheduler.total, 2 * (kWorkers + kServers));
}

TEST(BoundsAtScaleTest, ParkingHasRoomForEveryWorkerAndAWorkersShareDoesNotGrow) {
  ServerJob job = server_test::Job(kWorkers, kServers);
  job.config = JobConfig();
  const ServerJob small = [&] {
    ServerJob s = server_test::Job(8, 1);
    s.config = job.config;
    return s;
  }();
  const proto::ClusterConfig& c = job.config;
  // What a worker may have in flight to one server before its tensor's declaration reaches it:
  // its in-flight budget (or a partition) and the largest message beyond it.
  const size_t in_flight =
      static_cast<size_t>(std::max(c.max_inflight_bytes_per_server(), c.partition_bytes()) +
                          MaxDataPayloadBytes(c.partition_bytes()));
  const RequestDispatcher dispatcher(job, 2);
  const size_t share = dispatcher.parked_bytes_bound() / kWorkers;
  EXPECT_GE(share, in_flight);
  // A worker's share is the same in a job of 8 workers as in one of 1,024.
  EXPECT_EQ(share, ParkedBytesBound(small) / 8);
  // A burst of declarations trailing the requests: each worker's first request for each of a
  // model's partitions on this server (resnet50's 169 of 4 MiB spread over 64 servers: 3;
  // 2,000 tiny tensors of a generated model: 32) waits.
  EXPECT_GE(kMaxParkedRequests, static_cast<size_t>(kWorkers) * 32);
}

}  // namespace
}  // namespace bytecomp::server
