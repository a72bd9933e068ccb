// Liveness without sockets, on a fake clock: the registration deadline, missed heartbeats,
// WorkerDone, a node's Shutdown, and Stop; each ends the job once with its status.
#include "bytecomp/scheduler/liveness.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "protocol_test_util.h"

namespace bytecomp {
namespace {

using proto::ControlMessage;
using testing::Recipients;
using testing::ServerId;
using testing::WorkerId;

constexpr int64_t kStart = 1000;

class LivenessTest : public ::testing::Test {
 protected:
  // 2 workers and 2 servers; registration within 300 ms, heartbeats within 200 ms.
  LivenessTest() {
    proto::ClusterConfig config;
    config.set_connect_timeout_ms(300);
    config.set_heartbeat_timeout_ms(200);
    config_ = testing::JobConfig(2, 2, config);
  }
  // Every node registers and the topology goes out at `now_ms`.
  void Complete(int64_t now_ms) {
    testing::RegisterAll(nodes_);
    liveness_.StartMonitoring(now_ms);
  }
  const RegisteredNode& Worker(int rank) { return *nodes_.At(proto::ROLE_WORKER, rank); }
  const RegisteredNode& Server(int rank) { return *nodes_.At(proto::ROLE_SERVER, rank); }
  Outbox At(int64_t now_ms) {
    Outbox out;
    liveness_.OnTime(now_ms, &out);
    return out;
  }

  proto::ClusterConfig config_;
  NodeTable nodes_{2, 2};
  Liveness liveness_{config_, nodes_, kStart};
};

TEST_F(LivenessTest, RegistrationNotCompleteInTimeEndsTheJobNamingTheMissingRanks) {
  testing::AddWorker(nodes_, 1);
  testing::AddServer(nodes_, 0);
  EXPECT_EQ(liveness_.NextDeadline(), kStart + 300);
  EXPECT_FALSE(At(kStart + 299).job_end().has_value());
  const Outbox out = At(kStart + 300);
  ASSERT_TRUE(out.job_end().has_value());
  EXPECT_EQ(out.job_end()->code(), absl::StatusCode::kDeadlineExceeded);
  const std::string reason =
      "registration did not complete within 0.3 s: missing worker rank 0 (1 of 2 workers "
      "registered); server rank 1 (1 of 2 servers registered)";
  EXPECT_EQ(out.job_end()->message(), reason);
  EXPECT_EQ(Recipients(out), (std::vector<std::string>{WorkerId(1), ServerId(0)}));
  for (const OutgoingControl& m : out.messages()) EXPECT_EQ(m.message.shutdown().reason(), reason);
}

TEST_F(LivenessTest, HeartbeatsAreWatchedOnlyFromTheTopologyOn) {
  testing::RegisterAll(nodes_);
  EXPECT_EQ(liveness_.NextDeadline(), std::nullopt) << "registered, topology not yet out";
  EXPECT_FALSE(At(kStart + 5000).job_end().has_value());
  liveness_.StartMonitoring(kStart + 5000);
  EXPECT_EQ(liveness_.NextDeadline(), kStart + 5200);
}

TEST_F(LivenessTest, ASilentNodeIsReportedToTheOthersAndTheJobEnds) {
  Complete(kStart);
  // Every message counts; worker 1 is silent from the topology on.
  for (int64_t t = kStart + 50; t <= kStart + 250; t += 50) {
    liveness_.Seen(Worker(0), t);
    liveness_.Seen(Server(0), t);
    liveness_.Seen(Server(1), t);
  }
  EXPECT_EQ(liveness_.NextDeadline(), kStart + 200);
  EXPECT_TRUE(At(kStart + 199).messages().empty());
  const Outbox out = At(kStart + 200);
  ASSERT_TRUE(out.job_end().has_value());
  EXPECT_EQ(out.job_end()->code(), absl::StatusCode::kUnavailable);
  const std::string reason =
      "worker 1 failed (missed heartbeats for 0.2 s); a synchronous job cannot continue";
  EXPECT_EQ(out.job_end()->message(), reason);
  for (const std::string& id : {WorkerId(0), ServerId(0), ServerId(1)}) {
    const std::vector<ControlMessage> got = testing::To(out, id);
    ASSERT_EQ(got.size(), 2u) << id;
    ASSERT_TRUE(got[0].has_node_failed()) << got[0].ShortDebugString();
    EXPECT_EQ(got[0].node_failed().node().role(), proto::ROLE_WORKER);
    EXPECT_EQ(got[0].node_failed().node().rank(), 1);
    EXPECT_EQ(got[0].node_failed().reason(), "missed heartbeats for 0.2 s");
    ASSERT_TRUE(got[1].has_shutdown());
    EXPECT_EQ(got[1].shutdown().reason(), reason);
  }
  // The failed node itself is told to exit (it may only be frozen, and run again).
  const std::vector<ControlMessage> bye = testing::To(out, WorkerId(1));
  ASSERT_EQ(bye.size(), 1u);
  EXPECT_EQ(bye[0].shutdown().reason(),
            "the scheduler declared worker 1 failed: missed heartbeats for 0.2 s");
  EXPECT_FALSE(bye[0].shutdown().job_done());
}

// The other way: every registered node hears from the scheduler each interval, before the
// topology too, so that a node sees a silent scheduler.
TEST_F(LivenessTest, EveryRegisteredNodeGetsAHeartbeatEachInterval) {
  Outbox none;
  liveness_.SendHeartbeats(kStart, &none);
  EXPECT_TRUE(none.messages().empty());
  EXPECT_EQ(liveness_.NextHeartbeat(), std::nullopt);
  testing::AddWorker(nodes_, 0);
  testing::AddServer(nodes_, 1);
  Outbox first;
  liveness_.SendHeartbeats(kStart + 10, &first);
  EXPECT_EQ(Recipients(first), (std::vector<std::string>{WorkerId(0), ServerId(1)}));
  EXPECT_TRUE(first.messages()[0].message.has_heartbeat());
  EXPECT_EQ(liveness_.NextHeartbeat(), kStart + 10 + config_.heartbeat_interval_ms());
  Outbox early;
  liveness_.SendHeartbeats(kStart + 10 + config_.heartbeat_interval_ms() - 1, &early);
  EXPECT_TRUE(early.messages().empty());
  Outbox next;
  liveness_.SendHeartbeats(kStart + 10 + config_.heartbeat_interval_ms(), &next);
  EXPECT_EQ(next.messages().size(), 2u);
  EXPECT_GT(next.messages()[0].message.heartbeat().sequence(),
            first.messages()[0].message.heartbeat().sequence());
}

TEST_F(LivenessTest, FailedServersAreNamedWithTheirDataAddressesFirstToEveryOther) {
  config_.set_server_replacement_timeout_ms(-1);  // no failover: a lost server ends the job
  Complete(kStart);
  liveness_.Seen(Worker(0), kStart + 100);
  liveness_.Seen(Worker(1), kStart + 100);
  const Outbox out = At(kStart + 200);  // both servers silent
  const std::vector<ControlMessage> got = testing::To(out, WorkerId(0));
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].node_failed().node().role(), proto::ROLE_SERVER);
  EXPECT_EQ(got[0].node_failed().node().rank(), 0);
  EXPECT_EQ(got[0].node_failed().data_address(), "tcp://127.0.0.1:7000");
  EXPECT_EQ(got[1].node_failed().node().rank(), 1);
  EXPECT_EQ(got[1].node_failed().data_address(), "tcp://127.0.0.1:7001");
  EXPECT_EQ(got[2].shutdown().reason(),
            "server 0, server 1 failed (missed heartbeats for 0.2 s); a synchronous job cannot "
            "continue");
  EXPECT_EQ(Recipients(out).size(), 8u);  // 3 to each worker, 1 to each failed server
}

TEST_F(LivenessTest, WithFailoverASilentServerIsLostAndTheJobWaitsForItsReplacement) {
  config_.set_server_replacement_timeout_ms(1000);
  Complete(kStart);
  liveness_.Seen(Worker(0), kStart + 100);
  liveness_.Seen(Worker(1), kStart + 100);
  liveness_.Seen(Server(0), kStart + 100);
  const Outbox out = At(kStart + 200);  // server 1 silent
  EXPECT_FALSE(out.job_end().has_value());
  EXPECT_TRUE(liveness_.Lost(1));
  EXPECT_FALSE(liveness_.Lost(0));
  const std::vector<ControlMessage> got = testing::To(out, WorkerId(1));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].node_failed().node().rank(), 1);
  EXPECT_EQ(got[0].node_failed().replacement_wait_ms(), 1000);
  ASSERT_EQ(testing::To(out, ServerId(1)).size(), 1u);  // told it is lost, if it only froze
  EXPECT_TRUE(testing::To(out, ServerId(1))[0].has_shutdown());
  // A lost server is not watched, and gets no heartbeats: its silence fails nothing more.
  liveness_.Seen(Worker(0), kStart + 250);
  liveness_.Seen(Worker(1), kStart + 250);
  liveness_.Seen(Server(0), kStart + 250);
  EXPECT_FALSE(At(kStart + 300).job_end().has_value());
  Outbox beats;
  liveness_.SendHeartbeats(kStart + 300, &beats);
  EXPECT_EQ(beats.messages().size(), 3u);
  // Replaced: watched again from then on.
  liveness_.Replaced(1, kStart + 300);
  EXPECT_FALSE(liveness_.Lost(1));
  EXPECT_EQ(liveness_.LastSeen(Server(1)), kStart + 300);
}

TEST_F(LivenessTest, EveryWorkerDoneShutsTheServersDownAndEndsOk) {
  Complete(kStart);
  Outbox out;
  liveness_.HandleWorkerDone(Worker(0), &out);
  liveness_.HandleWorkerDone(Worker(0), &out);  // a repeat counts once
  EXPECT_EQ(liveness_.workers_done(), 1);
  EXPECT_FALSE(out.job_end().has_value());
  // A worker that is done is no longer watched: its silence fails nothing.
  for (const RegisteredNode* node : nodes_.Registered()) {
    if (node->identity != WorkerId(0)) liveness_.Seen(*node, kStart + 150);
  }
  EXPECT_EQ(liveness_.NextDeadline(), kStart + 350);
  EXPECT_TRUE(At(kStart + 300).messages().empty());
  liveness_.HandleWorkerDone(Worker(1), &out);
  ASSERT_TRUE(out.job_end().has_value());
  EXPECT_TRUE(out.job_end()->ok()) << *out.job_end();
  // The workers are leaving already; the servers are told.
  EXPECT_EQ(Recipients(out), (std::vector<std::string>{ServerId(0), ServerId(1)}));
  for (const OutgoingControl& m : out.messages()) {
    EXPECT_EQ(m.message.shutdown().reason(), "every worker is done");
    EXPECT_TRUE(m.message.shutdown().job_done());
  }
}

TEST_F(LivenessTest, WorkerDoneFromAServerIsAnError) {
  Complete(kStart);
  Outbox out;
  liveness_.HandleWorkerDone(Server(1), &out);
  EXPECT_EQ(testing::Only(out, ServerId(1), ControlMessage::kError).error().message(),
            "WorkerDone from server 1, which is not a worker");
  EXPECT_EQ(liveness_.workers_done(), 0);
  EXPECT_FALSE(out.job_end().has_value());
}

TEST_F(LivenessTest, ANodesShutdownIsForwardedToEveryOtherNodeAndAbortsTheJob) {
  Complete(kStart);
  proto::Shutdown shutdown;
  shutdown.set_reason("CUDA out of memory");
  Outbox out;
  liveness_.HandleShutdown(Worker(1), shutdown, &out);
  ASSERT_TRUE(out.job_end().has_value());
  EXPECT_EQ(out.job_end()->code(), absl::StatusCode::kAborted);
  EXPECT_EQ(Recipients(out), (std::vector<std::string>{WorkerId(0), ServerId(0), ServerId(1)}));
  for (const OutgoingControl& m : out.messages()) {
    EXPECT_EQ(m.message.shutdown().reason(),
              "worker 1 asked to shut the job down: CUDA out of memory");
  }
  Outbox no_reason;
  liveness_.HandleShutdown(Server(0), proto::Shutdown(), &no_reason);
  EXPECT_EQ(no_reason.messages()[0].message.shutdown().reason(),
            "server 0 asked to shut the job down: no reason given");
}

TEST_F(LivenessTest, StopTellsEveryRegisteredNodeAndCancels) {
  testing::AddWorker(nodes_, 0);
  testing::AddServer(nodes_, 1);
  Outbox out;
  liveness_.Stop("scheduler received SIGTERM", &out);
  ASSERT_TRUE(out.job_end().has_value());
  EXPECT_EQ(out.job_end()->code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(Recipients(out), (std::vector<std::string>{WorkerId(0), ServerId(1)}));
  EXPECT_EQ(out.messages()[0].message.shutdown().reason(), "scheduler received SIGTERM");
}

TEST(OutboxTest, OnlyTheFirstEndOfTheJobCounts) {
  Outbox out;
  out.EndJob(absl::UnavailableError("first"), "first", {"a", "b"});
  out.EndJob(absl::OkStatus(), "second", {"c"});
  ASSERT_TRUE(out.job_end().has_value());
  EXPECT_EQ(out.job_end()->message(), "first");
  EXPECT_EQ(Recipients(out), (std::vector<std::string>{"a", "b"}));
}

}  // namespace
}  // namespace bytecomp
