// KeyStore on a replacement server (resume_keys): each key waits for every pusher's first
// request, then goes on at the next round; a worker that had not got the last round's result
// gets the one a replay carried; bad replays are refused, and what waits is bounded.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bytecomp/server/key_store.h"
#include "server_test_util.h"

namespace bytecomp::server {
namespace {

using server_test::FloatsOf;
using server_test::IdentityOf;
using server_test::kN;
using server_test::Ops;

// A replacement server's store (or, resume false, any other's) of one 4-element tensor, and
// requests of 4 equal values.
struct ResumingStore : server_test::Store {
  explicit ResumingStore(int workers, bool resume = true)
      : Store(workers, {}, kN, proto::DTYPE_FLOAT32, resume) {}
  std::vector<OutgoingReply> Push(int sender, uint64_t round, float value, bool replay = false) {
    proto::DataHeader h = server_test::Request(proto::OP_PUSH, sender, round, kN);
    h.set_replay(replay);
    return Handle(h, server_test::Payload(std::vector<float>(kN, value), proto::DTYPE_FLOAT32));
  }
  std::vector<OutgoingReply> Replay(int sender, uint64_t round, float value) {
    return Push(sender, round, value, /*replay=*/true);
  }
};

TEST(KeyStoreResumeTest, EveryWorkerDoneWithTheSameRoundGoesOnAtTheNext) {
  ResumingStore s(3);
  EXPECT_TRUE(s.Replay(0, 5, 1).empty());  // waits: not every worker was heard
  EXPECT_TRUE(s.Push(0, 6, 1).empty());
  EXPECT_TRUE(s.Pull(0, 6).empty());
  EXPECT_TRUE(s.Replay(1, 5, 1).empty());
  // The last worker heard: every one completed round 5, so round 6 goes on; the replays are
  // dropped without a reply, worker 0's push of 6 is acknowledged now.
  std::vector<OutgoingReply> started = s.Replay(2, 5, 1);
  ASSERT_EQ(Ops(started), std::vector{proto::OP_PUSH_ACK});
  EXPECT_EQ(started[0].header.round(), 6u);
  EXPECT_EQ(Ops(s.Push(1, 6, 2)), std::vector{proto::OP_PUSH_ACK});
  std::vector<OutgoingReply> done = s.Push(2, 6, 4);
  ASSERT_EQ(Ops(done), (std::vector{proto::OP_PUSH_ACK, proto::OP_PULL_REPLY}));
  EXPECT_EQ(IdentityOf(done[1]), "worker-0");
  EXPECT_EQ(FloatsOf(done[1]), std::vector<float>(kN, 7));
  EXPECT_EQ(s.store.keys_resumed(), 1u);
  EXPECT_EQ(s.store.rounds_answered_from_replays(), 0u);
}

TEST(KeyStoreResumeTest, ARoundSomeWorkerHadNotGotIsAnsweredWithTheReplayedResult) {
  ResumingStore s(3);
  // Workers 0 and 1 got round 5's result (7 everywhere) from the lost server and pushed 6;
  // worker 2 never got it: it replays round 4's result, then pushes and pulls 5 again.
  EXPECT_TRUE(s.Replay(0, 5, 7).empty());
  EXPECT_TRUE(s.Push(0, 6, 10).empty());
  EXPECT_TRUE(s.Pull(0, 6).empty());
  EXPECT_TRUE(s.Replay(1, 5, 7).empty());
  // Every worker heard: the key goes on at round 6 (worker 0's push is acknowledged now).
  EXPECT_EQ(Ops(s.Replay(2, 4, 99)), std::vector{proto::OP_PUSH_ACK});
  EXPECT_EQ(Ops(s.Push(1, 6, 20)), std::vector{proto::OP_PUSH_ACK});
  // Worker 2's push of round 5 is acknowledged and not summed; its pull gets the replayed
  // result, the bytes the others got.
  EXPECT_EQ(Ops(s.Push(2, 5, 1000)), std::vector{proto::OP_PUSH_ACK});
  std::vector<OutgoingReply> fifth = s.Pull(2, 5);
  ASSERT_EQ(Ops(fifth), std::vector{proto::OP_PULL_REPLY});
  EXPECT_EQ(FloatsOf(fifth[0]), std::vector<float>(kN, 7));
  std::vector<OutgoingReply> sixth = s.Push(2, 6, 40);
  ASSERT_EQ(Ops(sixth), (std::vector{proto::OP_PUSH_ACK, proto::OP_PULL_REPLY}));
  EXPECT_EQ(IdentityOf(sixth[1]), "worker-0");
  EXPECT_EQ(FloatsOf(sixth[1]), std::vector<float>(kN, 70));
  // Round 5 is over: a push of it now is refused, as on any server.
  EXPECT_EQ(Ops(s.Push(2, 5, 1)), std::vector{proto::OP_ERROR});
  EXPECT_EQ(s.store.rounds_answered_from_replays(), 1u);
}

TEST(KeyStoreResumeTest, AKeyNoWorkerCompletedStartsAtItsFirstRound) {
  ResumingStore s(2);
  EXPECT_TRUE(s.Push(0, 0, 1).empty());
  ASSERT_EQ(Ops(s.Push(1, 0, 2)), (std::vector{proto::OP_PUSH_ACK, proto::OP_PUSH_ACK}));
  std::vector<OutgoingReply> pull = s.Pull(0, 0);
  ASSERT_EQ(Ops(pull), std::vector{proto::OP_PULL_REPLY});
  EXPECT_EQ(FloatsOf(pull[0]), std::vector<float>(kN, 3));
}

TEST(KeyStoreResumeTest, BadReplaysAreRefusedAndWhatWaitsIsBounded) {
  ResumingStore s(2);
  std::vector<OutgoingReply> pull_first = s.Pull(0, 3);
  ASSERT_EQ(Ops(pull_first), std::vector{proto::OP_ERROR});
  EXPECT_EQ(pull_first[0].header.error(),
            "server 0: pull for round 3 of key 1:0 refused: worker 0 has not pushed it");
  EXPECT_TRUE(s.Replay(0, 3, 1).empty());
  std::vector<OutgoingReply> twice = s.Replay(0, 3, 1);
  ASSERT_EQ(Ops(twice), std::vector{proto::OP_ERROR});
  EXPECT_EQ(twice[0].header.error(),
            "server 0: replay for key 1:0 refused: worker 0 was heard for it already");
  EXPECT_TRUE(s.Push(0, 4, 1).empty());
  EXPECT_TRUE(s.Pull(0, 4).empty());
  std::vector<OutgoingReply> fourth = s.Push(0, 5, 1);
  ASSERT_EQ(Ops(fourth), std::vector{proto::OP_ERROR});
  EXPECT_EQ(fourth[0].header.error(),
            "server 0: request for round 5 of key 1:0 refused: worker 0 sent 2 already while "
            "the key resumes");
  // Held pulls fail with the others when the server stops.
  std::vector<OutgoingReply> failed;
  s.store.FailHeldPulls("stopping", &failed);
  ASSERT_EQ(Ops(failed), std::vector{proto::OP_ERROR});
  EXPECT_EQ(failed[0].header.round(), 4u);
}

TEST(KeyStoreResumeTest, AServerThatReplacedNoOneRefusesReplays) {
  ResumingStore s(2, /*resume=*/false);
  std::vector<OutgoingReply> replay = s.Replay(0, 3, 1);
  ASSERT_EQ(Ops(replay), std::vector{proto::OP_ERROR});
  EXPECT_EQ(replay[0].header.error(),
            "server 0: replay for key 1:0 refused: the key is not resuming (this server did not "
            "replace a lost one, or every worker was heard already)");
}

}  // namespace
}  // namespace bytecomp::server
