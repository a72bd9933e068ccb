// Server failover through the scheduler's routing, without sockets, on a fake clock: a
// replacement that registers while the holder is only late waits, then takes the rank over
// with its topology, the declarations and a new epoch; a second server for a live rank is
// refused; a lost server not replaced in time has its partitions moved to the survivors, or,
// with none left, ends the job.
#include "bytecomp/scheduler/server_failover.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "bytecomp/scheduler/control_router.h"
#include "protocol_test_util.h"

namespace bytecomp {
namespace {

using proto::ControlMessage;
using testing::To;

class ServerFailoverTest : public ::testing::Test {
 protected:
  // W=2 workers and `servers` servers; heartbeats every 100 ms, a node silent for 1 s is
  // failed, a lost server waits 3 s for a replacement; 1000 fp32 per partition.
  void Start(int servers) {
    proto::ClusterConfig overrides;
    overrides.set_heartbeat_interval_ms(100);
    overrides.set_heartbeat_timeout_ms(1000);
    overrides.set_server_replacement_timeout_ms(3000);
    overrides.set_partition_bytes(4000);
    config_ = testing::JobConfig(2, servers, overrides);
    StrategyKeeper strategy;
    ASSERT_TRUE(strategy.LoadInitial("").ok());
    router_ = std::make_unique<ControlRouter>(config_, std::move(strategy), std::nullopt, 0);
    for (int w = 0; w < 2; ++w) Register(testing::WorkerId(w), proto::ROLE_WORKER, w);
    for (int s = 0; s < servers; ++s) Register(testing::ServerId(s), proto::ROLE_SERVER, s);
    for (int w = 0; w < 2; ++w) {  // one tensor of 10 partitions, spread over the servers
      ControlMessage m;
      m.mutable_declare_tensor()->set_name("t");
      m.mutable_declare_tensor()->set_element_count(10000);
      m.mutable_declare_tensor()->set_dtype(proto::DTYPE_FLOAT32);
      Send(testing::WorkerId(w), m, 10);
    }
  }
  Outbox Register(const std::string& identity, proto::Role role, int rank, int64_t now_ms = 0) {
    ControlMessage m;
    proto::Register* r = m.mutable_register_();
    r->set_role(role);
    r->set_requested_rank(rank);
    r->set_hostname("hostA");
    r->set_pid(100 + static_cast<int>(tokens_.size()));
    if (role == proto::ROLE_SERVER) r->set_data_address("tcp://127.0.0.1:7000");
    tokens_[identity] = TokenBytes(NewNodeToken());
    r->set_token(tokens_[identity]);
    Outbox out;
    router_->Handle(identity, m, now_ms, &out);
    return out;
  }
  Outbox Send(const std::string& identity, ControlMessage m, int64_t now_ms) {
    m.set_token(tokens_[identity]);
    Outbox out;
    router_->Handle(identity, m, now_ms, &out);
    return out;
  }
  // Heartbeats from `identities` at now_ms, then the deadlines.
  Outbox At(int64_t now_ms, const std::vector<std::string>& alive) {
    for (const std::string& id : alive) {
      ControlMessage beat;
      beat.mutable_heartbeat()->set_sequence(1);
      Send(id, beat, now_ms);
    }
    Outbox out;
    router_->OnTime(now_ms, &out);
    return out;
  }

  proto::ClusterConfig config_;
  std::unique_ptr<ControlRouter> router_;
  std::map<std::string, std::string> tokens_;
};

TEST_F(ServerFailoverTest, AReplacementWaitsForTheSilentHolderThenTakesTheRankOver) {
  Start(2);
  const std::vector<std::string> others = {"w0", "w1", "s1"};
  At(100, {"w0", "w1", "s0", "s1"});
  // Server 0 dies after 100 ms; its replacement registers at 150: the holder is not lost yet
  // (1 s of silence), so it waits, unanswered.
  Outbox early = Register("s0b", proto::ROLE_SERVER, 0, 150);
  EXPECT_TRUE(To(early, "s0b").empty());
  for (int64_t t = 200; t < 1100; t += 100) EXPECT_TRUE(To(At(t, others), "s0b").empty()) << t;
  // At 1100 the holder is lost, and the replacement takes over at once.
  Outbox out = At(1100, others);
  const std::vector<ControlMessage> got = To(out, "s0b");
  ASSERT_GE(got.size(), 2u);
  ASSERT_TRUE(got[0].has_topology()) << got[0].ShortDebugString();
  EXPECT_TRUE(got[0].topology().replaces_lost_server());
  EXPECT_EQ(got[0].topology().your_rank(), 0);
  EXPECT_EQ(got[0].topology().worker_tokens_size(), 2);
  const uint64_t epoch = got[0].topology().server_epoch();
  EXPECT_NE(epoch, 0u);
  ASSERT_TRUE(got[1].has_declare_reply());
  EXPECT_EQ(got[1].declare_reply().name(), "t");
  for (const char* w : {"w0", "w1"}) {
    const std::vector<ControlMessage> to_worker = To(out, w);
    ASSERT_EQ(to_worker.size(), 2u) << w;
    EXPECT_EQ(to_worker[0].node_failed().replacement_wait_ms(), 3000);
    EXPECT_EQ(to_worker[1].server_replaced().rank(), 0);
    EXPECT_EQ(to_worker[1].server_replaced().epoch(), epoch);
  }
  EXPECT_TRUE(To(out, "s0")[0].has_shutdown());  // the old one, if it only froze
  EXPECT_EQ(router_->nodes().At(proto::ROLE_SERVER, 0)->identity, "s0b");
  // The replacement is watched from now on; nothing ends while all are heard.
  EXPECT_FALSE(At(2000, {"w0", "w1", "s1", "s0b"}).job_end().has_value());
}

TEST_F(ServerFailoverTest, ASecondServerForALiveRankIsRefused) {
  Start(2);
  const std::vector<std::string> all = {"w0", "w1", "s0", "s1"};
  At(100, all);
  EXPECT_TRUE(To(Register("intruder", proto::ROLE_SERVER, 1, 150), "intruder").empty());
  // Refused once the holder is still heard a heartbeat timeout and an interval later.
  for (int64_t t = 200; t < 1250; t += 50) EXPECT_TRUE(To(At(t, all), "intruder").empty()) << t;
  const std::vector<ControlMessage> got = To(At(1250, all), "intruder");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].error().registration_refused());
  EXPECT_TRUE(
      testing::Contains(got[0].error().message(), "which is alive: two servers claim one rank"))
      << got[0].error().message();
  EXPECT_EQ(router_->nodes().At(proto::ROLE_SERVER, 1)->identity, "s1");
}

TEST_F(ServerFailoverTest, WithoutAReplacementTheKeysMoveToTheSurvivors) {
  Start(2);
  const std::vector<std::string> others = {"w0", "w1", "s0"};
  At(100, {"w0", "w1", "s0", "s1"});
  for (int64_t t = 200; t <= 1100; t += 100) {
    EXPECT_FALSE(At(t, others).job_end().has_value());
  }
  // Lost at 1100 (silent since 100); the grace period ends at 4100.
  for (int64_t t = 1200; t < 4100; t += 100) {
    const Outbox out = At(t, others);
    EXPECT_FALSE(out.job_end().has_value());
    EXPECT_TRUE(To(out, "w0").empty() || !To(out, "w0")[0].has_keys_moved()) << t;
  }
  const Outbox out = At(4100, others);
  EXPECT_FALSE(out.job_end().has_value());
  const std::vector<ControlMessage> to_server = To(out, "s0");
  ASSERT_EQ(to_server.size(), 1u);
  const proto::KeysMoved& moved = to_server[0].keys_moved();
  EXPECT_EQ(moved.from_rank(), 1);
  ASSERT_EQ(moved.tensors_size(), 1);
  EXPECT_EQ(moved.tensors(0).partition_server_size(), 10);
  for (int32_t s : moved.tensors(0).partition_server()) EXPECT_EQ(s, 0);
  for (const char* w : {"w0", "w1"}) {
    ASSERT_EQ(To(out, w).size(), 1u) << w;
    EXPECT_EQ(To(out, w)[0].keys_moved().ShortDebugString(), moved.ShortDebugString());
  }
  // The rank is retired: a server registering for it now is refused.
  const std::vector<ControlMessage> late =
      To(Register("late", proto::ROLE_SERVER, 1, 4200), "late");
  ASSERT_EQ(late.size(), 1u);
  EXPECT_TRUE(testing::Contains(late[0].error().message(), "its keys moved to the surviving"));
  // A tensor declared now is placed on the survivor only.
  Outbox declared;
  for (const char* w : {"w0", "w1"}) {
    ControlMessage m;
    m.mutable_declare_tensor()->set_name("later");
    m.mutable_declare_tensor()->set_element_count(5000);
    m.mutable_declare_tensor()->set_dtype(proto::DTYPE_FLOAT32);
    declared = Send(w, m, 4300);
  }
  const ControlMessage reply = To(declared, "w0").back();
  ASSERT_TRUE(reply.declare_reply().ok()) << reply.ShortDebugString();
  for (int32_t s : reply.declare_reply().partition_server()) EXPECT_EQ(s, 0);
  EXPECT_FALSE(At(5000, others).job_end().has_value());
}

TEST_F(ServerFailoverTest, WithNoServerLeftALostServerEndsTheJobAfterTheWait) {
  Start(1);
  At(100, {"w0", "w1", "s0"});
  for (int64_t t = 200; t < 4100; t += 100) {
    EXPECT_FALSE(At(t, {"w0", "w1"}).job_end().has_value()) << t;
  }
  const Outbox out = At(4100, {"w0", "w1"});
  ASSERT_TRUE(out.job_end().has_value());
  EXPECT_EQ(out.job_end()->code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(out.job_end()->message(),
            "server 0 was lost and no replacement registered for its rank within 3.0 s "
            "(server_replacement_timeout_ms), and no other server is left to take its keys");
  EXPECT_TRUE(To(out, "w0").back().has_shutdown());
}

}  // namespace
}  // namespace bytecomp
