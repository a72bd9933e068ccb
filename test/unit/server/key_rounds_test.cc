// KeyRounds, the round protocol of one key: which pushes a round admits (its round, once per
// worker, one version, codec, stage and iteration), aborts, when a round completes (its
// pushers), pulls answered, held or refused, and a resumed key's absorbed round.
#include "bytecomp/server/key_rounds.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "server_test_util.h"

namespace bytecomp::server {
namespace {

using server_test::kN;

proto::DataHeader RoundPush(int sender, uint64_t round) {
  return server_test::Request(proto::OP_PUSH, sender, round, kN);
}

proto::DataHeader RoundPull(int sender, uint64_t round) {
  return server_test::Request(proto::OP_PULL, sender, round, kN);
}

// The refusal text of a push the rounds must refuse ("" when admitted).
std::string PushRefusal(KeyRounds& rounds, const proto::DataHeader& h) {
  absl::StatusOr<KeyRounds::AcceptedPush> accepted = rounds.AdmitPush(h);
  if (accepted.ok()) return "";
  EXPECT_EQ(accepted.status().code(), absl::StatusCode::kFailedPrecondition);
  return std::string(accepted.status().message());
}

RoundResult ResultOf(const std::string& bytes, const std::string& codec = "") {
  RoundResult r;
  r.codec = codec;
  r.payload = zmq::message_t(bytes);
  return r;
}

std::string PayloadText(const zmq::message_t& m) {
  return std::string(static_cast<const char*>(m.data()), m.size());
}

TEST(KeyRoundsTest, APushMustBeForTheAccumulatingRoundOncePerWorker) {
  KeyRounds rounds(/*num_workers=*/3, /*num_pushers=*/3);
  absl::StatusOr<KeyRounds::AcceptedPush> first = rounds.AdmitPush(RoundPush(0, 0));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->starts_round);
  EXPECT_FALSE(first->completes_round);
  EXPECT_FALSE(first->absorbed);
  EXPECT_EQ(PushRefusal(rounds, RoundPush(0, 0)), "worker 0 already pushed round 0 of key 1:0");
  EXPECT_EQ(PushRefusal(rounds, RoundPush(1, 1)),
            "push for round 1 of key 1:0 refused: it is not the round the key accumulates");
  absl::StatusOr<KeyRounds::AcceptedPush> second = rounds.AdmitPush(RoundPush(1, 0));
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second->starts_round);
  EXPECT_FALSE(second->completes_round);
  absl::StatusOr<KeyRounds::AcceptedPush> last = rounds.AdmitPush(RoundPush(2, 0));
  ASSERT_TRUE(last.ok());
  EXPECT_TRUE(last->completes_round);
  EXPECT_TRUE(rounds.Complete(ResultOf("sum")).empty());
  EXPECT_EQ(rounds.accumulating_round(), 1u);
  // The next round admits every worker again.
  absl::StatusOr<KeyRounds::AcceptedPush> next = rounds.AdmitPush(RoundPush(0, 1));
  ASSERT_TRUE(next.ok());
  EXPECT_TRUE(next->starts_round);
}

TEST(KeyRoundsTest, OnlyThePushersMakeARound) {
  KeyRounds rounds(/*num_workers=*/4, /*num_pushers=*/2);  // two machines' local roots
  EXPECT_FALSE(rounds.AdmitPush(RoundPush(2, 0))->completes_round);
  EXPECT_TRUE(rounds.AdmitPush(RoundPush(0, 0))->completes_round);
}

TEST(KeyRoundsTest, ARoundIsOneVersionCodecStageAndIteration) {
  KeyRounds rounds(3, 3);
  proto::DataHeader h = RoundPush(0, 0);
  h.set_codec("none");  // raw values, however named: the round's codec is ""
  ASSERT_TRUE(rounds.AdmitPush(h).ok());
  EXPECT_EQ(rounds.round_codec(), "");
  proto::DataHeader raw = RoundPush(1, 0);
  EXPECT_EQ(PushRefusal(rounds, raw), "");
  proto::DataHeader fp16 = RoundPush(2, 0);
  fp16.set_codec("fp16");
  fp16.set_strategy_version(1);
  EXPECT_EQ(PushRefusal(rounds, fp16),
            "push for round 0 of key 1:0 with strategy version 1 codec 'fp16' stage 0 iteration "
            "0; the round has version 0 codec '' stage 0 iteration 0");
  proto::DataHeader later = RoundPush(2, 0);
  later.set_iteration(3);
  EXPECT_EQ(PushRefusal(rounds, later),
            "push for round 0 of key 1:0 with strategy version 0 codec '' stage 0 iteration 3; "
            "the round has version 0 codec '' stage 0 iteration 0");
  proto::DataHeader stage = RoundPush(2, 0);
  stage.set_stage(1);
  EXPECT_NE(PushRefusal(rounds, stage), "");
  EXPECT_TRUE(rounds.AdmitPush(RoundPush(2, 0))->completes_round);  // refusals did not count

  rounds.Complete(ResultOf("sum"));
  proto::DataHeader compressed = RoundPush(1, 1);
  compressed.set_codec("fp16");
  compressed.set_strategy_version(1);
  ASSERT_TRUE(rounds.AdmitPush(compressed).ok());
  EXPECT_EQ(rounds.round_codec(), "fp16");  // a new round takes its first push's kind
}

TEST(KeyRoundsTest, TheFirstAbortIsTheRoundsErrorUntilTheNextRound) {
  KeyRounds rounds(3, 3);
  ASSERT_TRUE(rounds.AdmitPush(RoundPush(0, 0)).ok());
  EXPECT_EQ(rounds.round_error(), "");
  proto::DataHeader abort = RoundPush(1, 0);
  abort.set_error("NaN at element 3");
  ASSERT_TRUE(rounds.AdmitPush(abort).ok());
  proto::DataHeader another = RoundPush(2, 0);
  another.set_error("out of memory");
  EXPECT_TRUE(rounds.AdmitPush(another)->completes_round);  // an abort still counts as a push
  EXPECT_EQ(rounds.round_error(), "worker 1 aborted round 0 of key 1:0: NaN at element 3");
  rounds.Complete(RoundResult{rounds.round_error(), "", zmq::message_t()});
  ASSERT_TRUE(rounds.AdmitPush(RoundPush(0, 1)).ok());
  EXPECT_EQ(rounds.round_error(), "");
}

TEST(KeyRoundsTest, PullsAreAnsweredHeldOrRefused) {
  KeyRounds rounds(3, 2);
  ASSERT_EQ(*rounds.JudgePull(RoundPull(2, 0)), KeyRounds::PullVerdict::kHold);
  rounds.HoldPull(server_test::Identity(2), RoundPull(2, 0));
  absl::StatusOr<KeyRounds::PullVerdict> again = rounds.JudgePull(RoundPull(2, 0));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().message(),
            "pull for round 0 of key 1:0 refused: worker 2 already has a pull of it waiting");
  ASSERT_EQ(*rounds.JudgePull(RoundPull(0, 0)), KeyRounds::PullVerdict::kHold);
  rounds.HoldPull(server_test::Identity(0), RoundPull(0, 0));
  absl::StatusOr<KeyRounds::PullVerdict> ahead = rounds.JudgePull(RoundPull(1, 1));
  ASSERT_FALSE(ahead.ok());
  EXPECT_EQ(ahead.status().message(),
            "pull for round 1 of key 1:0 refused: the key has no such round ready or under way");

  rounds.AdmitPush(RoundPush(0, 0)).IgnoreError();
  rounds.AdmitPush(RoundPush(1, 0)).IgnoreError();
  std::vector<HeldPull> answered = rounds.Complete(ResultOf("round 0", "onebit"));
  ASSERT_EQ(answered.size(), 2u);  // in the order they were held
  EXPECT_EQ(server_test::IdentityOf(answered[0]), "worker-2");
  EXPECT_EQ(answered[0].header.request_id(), server_test::RequestId(2, 0));
  EXPECT_EQ(server_test::IdentityOf(answered[1]), "worker-0");
  EXPECT_EQ(PayloadText(rounds.ready().payload), "round 0");
  EXPECT_EQ(rounds.ready().codec, "onebit");
  // Round 0 is ready, round 1 accumulates, round 2 is neither.
  EXPECT_EQ(*rounds.JudgePull(RoundPull(1, 0)), KeyRounds::PullVerdict::kAnswerNow);
  EXPECT_EQ(*rounds.JudgePull(RoundPull(1, 1)), KeyRounds::PullVerdict::kHold);
  EXPECT_FALSE(rounds.JudgePull(RoundPull(1, 2)).ok());
  // After round 1, round 0 is gone.
  rounds.AdmitPush(RoundPush(0, 1)).IgnoreError();
  rounds.AdmitPush(RoundPush(1, 1)).IgnoreError();
  EXPECT_TRUE(rounds.Complete(ResultOf("round 1")).empty());
  EXPECT_FALSE(rounds.JudgePull(RoundPull(1, 0)).ok());
  EXPECT_EQ(*rounds.JudgePull(RoundPull(1, 1)), KeyRounds::PullVerdict::kAnswerNow);
}

TEST(KeyRoundsTest, TakenHeldPullsAreNotAnsweredByTheRound) {
  KeyRounds rounds(2, 2);
  rounds.HoldPull(server_test::Identity(0), RoundPull(0, 0));
  rounds.HoldPull(server_test::Identity(1), RoundPull(1, 0));
  EXPECT_EQ(rounds.TakeHeldPulls().size(), 2u);
  EXPECT_TRUE(rounds.TakeHeldPulls().empty());
  rounds.AdmitPush(RoundPush(0, 0)).IgnoreError();
  rounds.AdmitPush(RoundPush(1, 0)).IgnoreError();
  EXPECT_TRUE(rounds.Complete(ResultOf("sum")).empty());
}

// A replacement's key resumed at round 6 with round 5's replayed result: a worker that never
// got it pushes 5 again (absorbed) and pulls it; once round 6 completes, 5 is over.
TEST(KeyRoundsTest, AResumedKeyAbsorbsPushesOfTheReplayedRound) {
  KeyRounds rounds(3, 3);
  rounds.ResumeAt(6, ResultOf("round 5", "fp16"));
  EXPECT_EQ(rounds.accumulating_round(), 6u);
  absl::StatusOr<KeyRounds::AcceptedPush> late = rounds.AdmitPush(RoundPush(2, 5));
  ASSERT_TRUE(late.ok());
  EXPECT_TRUE(late->absorbed);
  EXPECT_FALSE(late->starts_round);
  EXPECT_EQ(*rounds.JudgePull(RoundPull(2, 5)), KeyRounds::PullVerdict::kAnswerNow);
  EXPECT_EQ(PayloadText(rounds.ready().payload), "round 5");
  EXPECT_EQ(rounds.ready().codec, "fp16");
  for (int w : {0, 1, 2}) ASSERT_TRUE(rounds.AdmitPush(RoundPush(w, 6)).ok());
  rounds.Complete(ResultOf("round 6"));
  EXPECT_EQ(PushRefusal(rounds, RoundPush(2, 5)),
            "push for round 5 of key 1:0 refused: it is not the round the key accumulates");
}

TEST(KeyRoundsTest, AKeyResumedWithoutAReplayHasNoReadyRound) {
  KeyRounds rounds(2, 2);
  rounds.ResumeAt(3, std::nullopt);
  EXPECT_EQ(rounds.accumulating_round(), 3u);
  EXPECT_FALSE(rounds.JudgePull(RoundPull(0, 2)).ok());
  EXPECT_NE(PushRefusal(rounds, RoundPush(0, 2)), "");
  EXPECT_TRUE(rounds.AdmitPush(RoundPush(0, 3))->starts_round);
}

}  // namespace
}  // namespace bytecomp::server
