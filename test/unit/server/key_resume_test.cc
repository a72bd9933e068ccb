// KeyResume, a replacement's key until every pusher was heard: where each worker stands (its
// replay, or its first push), the round the key goes on at, the replayed result for a worker
// that had not got it, the requests kept in arrival order, and what it refuses.
#include "bytecomp/server/key_resume.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server_test_util.h"

namespace bytecomp::server {
namespace {

using server_test::kN;

proto::DataHeader ResumeRequest(proto::DataOp op, int sender, uint64_t round, bool replay = false) {
  proto::DataHeader h = server_test::Request(op, sender, round, kN);
  h.set_replay(replay);
  return h;
}

// Admits and keeps a request; returns the refusal ("" when kept).
std::string Hear(KeyResume& resume, const proto::DataHeader& h, const std::string& payload = "") {
  if (absl::Status s = resume.Admit(h); !s.ok()) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    return std::string(s.message());
  }
  resume.Keep(server_test::Identity(h.sender()), h, zmq::message_t(payload));
  return "";
}

std::string BytesOf(const zmq::message_t& m) {
  return std::string(static_cast<const char*>(m.data()), m.size());
}

TEST(KeyResumeTest, WorkersDoneWithTheSameRoundGoOnAtTheNext) {
  KeyResume resume(3);
  EXPECT_EQ(Hear(resume, ResumeRequest(proto::OP_PUSH, 0, 5, true), "five"), "");
  EXPECT_EQ(Hear(resume, ResumeRequest(proto::OP_PUSH, 0, 6)), "");
  EXPECT_EQ(Hear(resume, ResumeRequest(proto::OP_PULL, 0, 6)), "");
  EXPECT_EQ(Hear(resume, ResumeRequest(proto::OP_PUSH, 1, 5, true), "five"), "");
  EXPECT_EQ(resume.heard(), 2u);
  EXPECT_EQ(Hear(resume, ResumeRequest(proto::OP_PUSH, 2, 5, true), "five"), "");
  EXPECT_EQ(resume.heard(), 3u);
  KeyResume::Resumed resumed = std::move(resume).Finish({0, 1, 2});
  EXPECT_EQ(resumed.next_round, 6u);
  EXPECT_FALSE(resumed.replayed.has_value());  // everyone has round 5's result
  ASSERT_EQ(resumed.held.size(), 2u);  // worker 0's push and pull, in arrival order; no replay
  EXPECT_EQ(resumed.held[0].header.op(), proto::OP_PUSH);
  EXPECT_EQ(resumed.held[1].header.op(), proto::OP_PULL);
  EXPECT_EQ(server_test::IdentityOf(resumed.held[1]), "worker-0");
}

// Workers 0 and 1 got round 5's result; worker 2 got only round 4's: the key goes on at 6,
// and round 5's result is the one the highest replay carried, codec and bytes.
TEST(KeyResumeTest, AWorkerBehindGetsTheHighestReplaysResult) {
  KeyResume resume(3);
  EXPECT_EQ(Hear(resume, ResumeRequest(proto::OP_PUSH, 2, 4, true), "round 4"), "");
  proto::DataHeader five = ResumeRequest(proto::OP_PUSH, 0, 5, true);
  five.set_codec("onebit");
  EXPECT_EQ(Hear(resume, five, "round 5"), "");
  EXPECT_EQ(Hear(resume, ResumeRequest(proto::OP_PUSH, 1, 5, true), "round 5 again"), "");
  KeyResume::Resumed resumed = std::move(resume).Finish({0, 1, 2});
  EXPECT_EQ(resumed.next_round, 6u);
  ASSERT_TRUE(resumed.replayed.has_value());
  EXPECT_EQ(resumed.replayed->codec, "onebit");
  EXPECT_EQ(BytesOf(resumed.replayed->payload), "round 5");  // the first replay of the highest
  EXPECT_EQ(resumed.replayed->error, "");
  EXPECT_TRUE(resumed.held.empty());
}

TEST(KeyResumeTest, AKeyNoWorkerCompletedStartsAtItsFirstRound) {
  KeyResume resume(2);
  EXPECT_EQ(Hear(resume, ResumeRequest(proto::OP_PUSH, 1, 0), "from 1"), "");
  EXPECT_EQ(Hear(resume, ResumeRequest(proto::OP_PUSH, 0, 0), "from 0"), "");
  KeyResume::Resumed resumed = std::move(resume).Finish({0, 1});
  EXPECT_EQ(resumed.next_round, 0u);
  EXPECT_FALSE(resumed.replayed.has_value());
  ASSERT_EQ(resumed.held.size(), 2u);
  EXPECT_EQ(BytesOf(resumed.held[0].payload), "from 1");
  EXPECT_EQ(BytesOf(resumed.held[1].payload), "from 0");
}

// Only the pushers say where the key stands (a hierarchical job's local roots 0 and 2).
TEST(KeyResumeTest, OnlyThePushersPlaceTheKey) {
  KeyResume resume(4);
  EXPECT_EQ(Hear(resume, ResumeRequest(proto::OP_PUSH, 0, 3, true)), "");
  EXPECT_EQ(Hear(resume, ResumeRequest(proto::OP_PUSH, 2, 3, true)), "");
  KeyResume::Resumed resumed = std::move(resume).Finish({0, 2});
  EXPECT_EQ(resumed.next_round, 4u);
  EXPECT_FALSE(resumed.replayed.has_value());  // workers 1 and 3 are not behind: they pull only
}

TEST(KeyResumeTest, WhatCannotWaitIsRefused) {
  KeyResume resume(2);
  EXPECT_EQ(Hear(resume, ResumeRequest(proto::OP_PULL, 0, 3)),
            "pull for round 3 of key 1:0 refused: worker 0 has not pushed it");
  EXPECT_EQ(resume.heard(), 0u);
  EXPECT_EQ(Hear(resume, ResumeRequest(proto::OP_PUSH, 0, 3, true)), "");
  EXPECT_EQ(Hear(resume, ResumeRequest(proto::OP_PUSH, 0, 3, true)),
            "replay for key 1:0 refused: worker 0 was heard for it already");
  EXPECT_EQ(Hear(resume, ResumeRequest(proto::OP_PUSH, 0, 4)), "");
  EXPECT_EQ(Hear(resume, ResumeRequest(proto::OP_PULL, 0, 4)), "");
  EXPECT_EQ(Hear(resume, ResumeRequest(proto::OP_PUSH, 0, 5)),
            "request for round 5 of key 1:0 refused: worker 0 sent 2 already while the key "
            "resumes");
  EXPECT_EQ(resume.heard(), 1u);
  // The held requests can be taken (their pulls failed); the key then holds none.
  std::vector<KeyResume::HeldRequest> held = resume.TakeHeld();
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(held[1].header.op(), proto::OP_PULL);
  EXPECT_EQ(held[1].header.round(), 4u);
  EXPECT_TRUE(resume.TakeHeld().empty());
}

}  // namespace
}  // namespace bytecomp::server
