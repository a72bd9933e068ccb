// KeyStore: rounds kept apart, held pulls, raw sums per dtype, aborts, compressed pushes summed
// in worker-rank order, two-way re-encoding, hierarchical pushers, failing held pulls.
#include "bytecomp/server/key_store.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "bytecomp/common.h"
#include "bytecomp/compress.h"
#include "server_test_util.h"

namespace bytecomp::server {
namespace {

using server_test::DeclareTensor;
using server_test::FloatsOf;
using server_test::IdentityOf;
using server_test::kN;
using server_test::Ops;
using server_test::Store;

TEST(KeyStoreTest, RoundsAreKeptApart) {
  Store s(/*workers=*/2);
  EXPECT_EQ(Ops(s.Push(0, 0, {1, 2, 3, 4})), std::vector{proto::OP_PUSH_ACK});
  EXPECT_EQ(Ops(s.Push(1, 0, {10, 20, 30, 40})), std::vector{proto::OP_PUSH_ACK});
  // A fast worker pushes round 1 before the other pulled round 0: round 0 stays as it was.
  EXPECT_EQ(Ops(s.Push(0, 1, {100, 200, 300, 400})), std::vector{proto::OP_PUSH_ACK});
  std::vector<OutgoingReply> round0 = s.Pull(1, 0);
  ASSERT_EQ(Ops(round0), std::vector{proto::OP_PULL_REPLY});
  EXPECT_EQ(round0[0].header.round(), 0u);
  EXPECT_EQ(IdentityOf(round0[0]), "worker-1");
  EXPECT_EQ(FloatsOf(round0[0]), (std::vector<float>{11, 22, 33, 44}));

  // A pull for the accumulating round waits; one for a round the key does not hold is refused.
  EXPECT_TRUE(s.Pull(0, 1).empty());
  std::vector<OutgoingReply> too_far = s.Pull(1, 2);
  ASSERT_EQ(Ops(too_far), std::vector{proto::OP_ERROR});
  // The error names the round asked for, never which round the key is at.
  EXPECT_EQ(too_far[0].header.error(),
            "server 0: pull for round 2 of key 1:0 refused: the key has no such round ready or "
            "under way");

  std::vector<OutgoingReply> completes = s.Push(1, 1, {1000, 2000, 3000, 4000});
  ASSERT_EQ(Ops(completes), (std::vector{proto::OP_PUSH_ACK, proto::OP_PULL_REPLY}));
  EXPECT_EQ(IdentityOf(completes[1]), "worker-0");
  EXPECT_EQ(completes[1].header.round(), 1u);
  EXPECT_EQ(FloatsOf(completes[1]), (std::vector<float>{1100, 2200, 3300, 4400}));
  // The round-0 reply shares the round-0 buffer, which round 1 did not write into.
  EXPECT_EQ(FloatsOf(round0[0]), (std::vector<float>{11, 22, 33, 44}));

  // Round 0 is gone now; a push must be for the accumulating round, once per worker.
  EXPECT_EQ(s.Pull(1, 0)[0].header.error(),
            "server 0: pull for round 0 of key 1:0 refused: the key has no such round ready or "
            "under way");
  EXPECT_EQ(s.Push(0, 3, {1, 1, 1, 1})[0].header.error(),
            "server 0: push for round 3 of key 1:0 refused: it is not the round the key "
            "accumulates");
  EXPECT_EQ(Ops(s.Push(0, 2, {1, 1, 1, 1})), std::vector{proto::OP_PUSH_ACK});
  EXPECT_EQ(s.Push(0, 2, {1, 1, 1, 1})[0].header.error(),
            "server 0: worker 0 already pushed round 2 of key 1:0");
  EXPECT_EQ(s.store.rounds_completed(), 2u);
  EXPECT_EQ(s.store.pushes_by_worker(), (std::vector<int64_t>{3, 2}));
}

// A worker has at most one pull of a key waiting: more would each hold a reply (and, once
// answered, the round's buffer) for a peer that may never read them.
TEST(KeyStoreTest, OnePullPerWorkerAndKeyWaits) {
  Store s(/*workers=*/2);
  EXPECT_TRUE(s.Pull(1, 0).empty());
  for (int i = 0; i < 3; ++i) {
    std::vector<OutgoingReply> again = s.Pull(1, 0);
    ASSERT_EQ(Ops(again), std::vector{proto::OP_ERROR});
    EXPECT_EQ(again[0].header.error(),
              "server 0: pull for round 0 of key 1:0 refused: worker 1 already has a pull of it "
              "waiting");
  }
  EXPECT_TRUE(s.Pull(0, 0).empty());  // another worker's is its own
  s.Push(0, 0, {1, 1, 1, 1});
  EXPECT_EQ(Ops(s.Push(1, 0, {1, 1, 1, 1})),
            (std::vector{proto::OP_PUSH_ACK, proto::OP_PULL_REPLY, proto::OP_PULL_REPLY}));
  // Once answered, the next round's pull may wait again.
  EXPECT_TRUE(s.Pull(1, 1).empty());
  EXPECT_EQ(s.store.refused(), 3u);
}

TEST(KeyStoreTest, HeldPullsAreAnsweredWhenTheRoundCompletes) {
  Store s(/*workers=*/3);
  EXPECT_TRUE(s.Pull(2, 0).empty());
  EXPECT_TRUE(s.Pull(0, 0).empty());
  EXPECT_EQ(Ops(s.Push(0, 0, {1, 1, 1, 1})), std::vector{proto::OP_PUSH_ACK});
  EXPECT_EQ(Ops(s.Push(1, 0, {2, 2, 2, 2})), std::vector{proto::OP_PUSH_ACK});
  std::vector<OutgoingReply> last = s.Push(2, 0, {4, 4, 4, 4});
  ASSERT_EQ(Ops(last),
            (std::vector{proto::OP_PUSH_ACK, proto::OP_PULL_REPLY, proto::OP_PULL_REPLY}));
  // Answered in the order they were held, each with its own request id.
  EXPECT_EQ(IdentityOf(last[1]), "worker-2");
  EXPECT_EQ(last[1].header.request_id(), server_test::RequestId(2, 0));
  EXPECT_EQ(IdentityOf(last[2]), "worker-0");
  EXPECT_EQ(last[2].header.request_id(), server_test::RequestId(0, 0));
  for (int i : {1, 2}) {
    EXPECT_EQ(FloatsOf(last[i]), (std::vector<float>{7, 7, 7, 7}));
    EXPECT_EQ(last[i].header.payload_bytes(), 16);
    EXPECT_EQ(last[i].header.codec(), "");
  }
}

class RawSumTest : public ::testing::TestWithParam<proto::DType> {};

TEST_P(RawSumTest, SumsInFp32AndAnswersInTheTensorsDtype) {
  const proto::DType dtype = GetParam();
  Store s(/*workers=*/3, {}, kN, dtype);
  // Values exact in fp16 and bf16, and so are their sums.
  s.Push(0, 0, {0.5f, -1.25f, 3.0f, 1024.0f}, dtype);
  s.Push(2, 0, {1.5f, -1.25f, 2.0f, 2048.0f}, dtype);
  s.Push(1, 0, {1.0f, -1.25f, 4.0f, 3072.0f}, dtype);
  std::vector<OutgoingReply> pull = s.Pull(1, 0, kN, dtype);
  ASSERT_EQ(Ops(pull), std::vector{proto::OP_PULL_REPLY});
  EXPECT_EQ(pull[0].header.dtype(), dtype);
  EXPECT_EQ(pull[0].payload.size(), kN * DTypeSize(dtype));
  EXPECT_EQ(server_test::ValuesOf(pull[0].payload, dtype),
            (std::vector<float>{3.0f, -3.75f, 9.0f, 6144.0f}));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RawSumTest,
                         ::testing::Values(proto::DTYPE_FLOAT32, proto::DTYPE_FLOAT16,
                                           proto::DTYPE_BFLOAT16));

// A frame whose data is not float-aligned (ZeroMQ gives no alignment promise) is summed too.
TEST(KeyStoreTest, MisalignedFp32PushesAreSummed) {
  for (int misaligned : {0, 1, 2}) {
    Store s(/*workers=*/3);
    std::vector<char> storage(kN * sizeof(float) + 1);
    for (int w = 0; w < 3; ++w) {
      const std::vector<float> values = {1.0f * (w + 1), 2, 3, 4};
      zmq::message_t payload = server_test::Payload(values, proto::DTYPE_FLOAT32);
      if (w == misaligned) {
        std::memcpy(storage.data() + 1, values.data(), kN * sizeof(float));
        payload = zmq::message_t(storage.data() + 1, kN * sizeof(float), nullptr, nullptr);
      }
      s.Handle(server_test::Request(proto::OP_PUSH, w, 0, kN), std::move(payload));
    }
    EXPECT_EQ(FloatsOf(s.Pull(0, 0)[0]), (std::vector<float>{6, 6, 9, 12})) << misaligned;
  }
}

TEST(KeyStoreTest, AnAbortCompletesTheRoundWithItsErrorForEveryWorker) {
  Store s(/*workers=*/2);
  EXPECT_TRUE(s.Pull(1, 0).empty());
  proto::DataHeader abort = server_test::Request(proto::OP_PUSH, 0, 0, kN);
  abort.set_error("cannot encode: NaN at element 3");
  EXPECT_EQ(Ops(s.Handle(abort)), std::vector{proto::OP_PUSH_ACK});
  std::vector<OutgoingReply> last = s.Push(1, 0, {1, 2, 3, 4});
  const std::string why =
      "server 0: worker 0 aborted round 0 of key 1:0: cannot encode: NaN at element 3";
  ASSERT_EQ(Ops(last), (std::vector{proto::OP_PUSH_ACK, proto::OP_ERROR}));
  EXPECT_EQ(IdentityOf(last[1]), "worker-1");
  EXPECT_EQ(last[1].header.error(), why);
  std::vector<OutgoingReply> late = s.Pull(0, 0);
  ASSERT_EQ(Ops(late), std::vector{proto::OP_ERROR});
  EXPECT_EQ(late[0].header.error(), why);
  // The next round starts clean.
  s.Push(0, 1, {1, 1, 1, 1});
  s.Push(1, 1, {2, 2, 2, 2});
  EXPECT_EQ(FloatsOf(s.Pull(0, 1)[0]), (std::vector<float>{3, 3, 3, 3}));
}

TEST(KeyStoreTest, ARoundDoesNotMixCodecsOrVersions) {
  Store s(/*workers=*/2);
  ASSERT_TRUE(s.catalog.AddStrategy(server_test::StrategyWith(1, "fp16", "")).ok());
  s.Push(0, 0, {1, 2, 3, 4});
  proto::DataHeader h = server_test::Request(proto::OP_PUSH, 1, 0, kN);
  h.set_strategy_version(1);
  h.set_codec("fp16");
  std::vector<OutgoingReply> mixed = s.Handle(h, server_test::Encode("fp16", {1, 2, 3, 4}, h));
  ASSERT_EQ(Ops(mixed), std::vector{proto::OP_ERROR});
  EXPECT_EQ(mixed[0].header.error(),
            "server 0: push for round 0 of key 1:0 with strategy version 1 codec 'fp16' stage 0 "
            "iteration 0; the round has version 0 codec '' stage 0 iteration 0");
}

// Payload values for which summing in arrival order (2, 0, 1) gives another fp32 result than
// summing in rank order (0, 1, 2); each is exact in fp16.
const float kBig = 65504.0f;
const float kTiny = std::ldexp(1.0f, -14);

TEST(KeyStoreTest, CompressedPushesAreSummedInWorkerRankOrder) {
  volatile float big = kBig, tiny = kTiny;  // the premise, computed at run time
  ASSERT_EQ((big + -big) + tiny, kTiny);
  ASSERT_EQ((tiny + big) + -big, 0.0f);

  Store s(/*workers=*/3);
  ASSERT_TRUE(s.catalog.AddStrategy(server_test::StrategyWith(1, "fp16", "")).ok());
  const std::vector<std::vector<float>> by_rank = {
      {kBig, 1, 2, 3}, {-kBig, 1, 2, 3}, {kTiny, 1, 2, 3}};
  for (int w : {2, 0, 1}) {
    proto::DataHeader h = server_test::Request(proto::OP_PUSH, w, 0, kN);
    h.set_strategy_version(1);
    h.set_codec("fp16");
    EXPECT_EQ(Ops(s.Handle(h, server_test::Encode("fp16", by_rank[w], h))),
              std::vector{proto::OP_PUSH_ACK});
  }
  proto::DataHeader pull = server_test::Request(proto::OP_PULL, 0, 0, kN);
  pull.set_strategy_version(1);
  pull.set_codec("fp16");
  std::vector<OutgoingReply> reply = s.Handle(pull);
  ASSERT_EQ(Ops(reply), std::vector{proto::OP_PULL_REPLY});
  EXPECT_EQ(reply[0].header.codec(), "");  // one-way: the fp32 sum
  const std::vector<float> sum = FloatsOf(reply[0]);
  ASSERT_EQ(sum.size(), static_cast<size_t>(kN));
  EXPECT_EQ(std::memcmp(&sum[0], &kTiny, sizeof(float)), 0) << sum[0];
  EXPECT_EQ(sum[1], 3.0f);
  EXPECT_EQ(sum[3], 9.0f);
}

TEST(KeyStoreTest, TwoWayReencodesTheSumWithThePullCodec) {
  Store s(/*workers=*/2);
  proto::DataHeader h;
  std::vector<OutgoingReply> reply = s.TwoWayRound(&h);
  ASSERT_EQ(Ops(reply), std::vector{proto::OP_PULL_REPLY});
  EXPECT_EQ(reply[0].header.codec(), "onebit");
  EXPECT_EQ(reply[0].header.iteration(), 7u);
  // The server encodes as node 0 (its rank) with the round's context.
  proto::DataHeader as_server = h;
  as_server.set_sender(0);
  const zmq::message_t expected = server_test::Encode("onebit", {3, -6, -3, -3}, as_server);
  ASSERT_EQ(reply[0].payload.size(), expected.size());
  EXPECT_EQ(std::memcmp(reply[0].payload.data(), expected.data(), expected.size()), 0);
  EXPECT_EQ(reply[0].header.payload_bytes(), static_cast<int64_t>(expected.size()));
}

TEST(KeyStoreTest, OnlyThePushersMakeARound) {
  // Hierarchical: workers 0 and 2 are their machines' local roots.
  Store s(/*workers=*/4, /*pushers=*/{2, 0});
  EXPECT_TRUE(s.Pull(1, 0).empty());
  EXPECT_EQ(Ops(s.Push(2, 0, {1, 2, 3, 4})), std::vector{proto::OP_PUSH_ACK});
  std::vector<OutgoingReply> last = s.Push(0, 0, {10, 20, 30, 40});
  ASSERT_EQ(Ops(last), (std::vector{proto::OP_PUSH_ACK, proto::OP_PULL_REPLY}));
  EXPECT_EQ(FloatsOf(last[1]), (std::vector<float>{11, 22, 33, 44}));
  EXPECT_EQ(FloatsOf(s.Pull(3, 0)[0]), (std::vector<float>{11, 22, 33, 44}));
  EXPECT_EQ(s.store.rounds_completed(), 1u);
  EXPECT_EQ(s.store.pushes_by_worker(), (std::vector<int64_t>{1, 0, 1, 0}));
}

TEST(KeyStoreTest, FailHeldPullsAnswersEveryHeldPullWithTheReason) {
  Store s(/*workers=*/2);
  ASSERT_TRUE(s.catalog.AddTensor(DeclareTensor(kN, proto::DTYPE_FLOAT32, /*tensor_id=*/2)).ok());
  EXPECT_TRUE(s.Pull(0, 0).empty());
  proto::DataHeader other = server_test::Request(proto::OP_PULL, 1, 0, kN);
  other.set_key(MakeKey(2, 0));
  EXPECT_TRUE(s.Handle(other).empty());

  std::vector<OutgoingReply> failed;
  s.store.FailHeldPulls("worker 1 failed: heartbeat timeout", &failed);
  ASSERT_EQ(Ops(failed), (std::vector{proto::OP_ERROR, proto::OP_ERROR}));
  std::vector<std::string> who;
  for (const OutgoingReply& r : failed) {
    EXPECT_EQ(r.header.error(), "server 0: worker 1 failed: heartbeat timeout");
    who.push_back(IdentityOf(r));
  }
  std::sort(who.begin(), who.end());
  EXPECT_EQ(who, (std::vector<std::string>{"worker-0", "worker-1"}));
  // Nothing is held any more: completing the round answers no one.
  s.Push(0, 0, {1, 1, 1, 1});
  EXPECT_EQ(Ops(s.Push(1, 0, {1, 1, 1, 1})), std::vector{proto::OP_PUSH_ACK});
}

}  // namespace
}  // namespace bytecomp::server
