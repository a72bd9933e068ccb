// The tensor table without sockets: declarations, one operation at a time per tensor with its
// rounds and wire rounds, failures that stick, the strategy switch's held tensors, the
// hierarchical tags, error-feedback checkpoints, and nothing but its own code under its lock.
#include "tensor_table.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "operation.h"
#include "strategy_switch.h"
#include "tensor_checkpoint.h"

namespace bytecomp::worker {
namespace {

class TensorTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<proto::Strategy> s = compress::ParseStrategy(
        "tensors { name_pattern: \"w*\" push_codec { name: \"topk\" memory: \"residual\" } }\n"
        "tensors { name_pattern: \"p*\" push_codec { name: \"powersgd\" } }\n"
        "tensors { name_pattern: \"a*\" push_codec { name: \"artopk\" memory: \"residual\" } }",
        "test");
    ASSERT_TRUE(s.ok()) << s.status();
    s->set_version(1);
    ASSERT_TRUE(strategies_.Add(*s).ok());
  }

  std::shared_ptr<Operation> Op(const std::string& name, int64_t count = kCount) {
    return std::make_shared<Operation>(PushPullRequest{.name = name, .element_count = count});
  }
  // Queues op; returns what started.
  TensorTable::Started Queue(const std::shared_ptr<Operation>& op) {
    TensorTable::Started started;
    int accepted = 0;
    EXPECT_TRUE(table_
                    .Queue(
                        op, [&] { ++accepted; }, &started)
                    .ok());
    EXPECT_EQ(accepted, 1);
    return started;
  }
  // The scheduler's answer: 3 partitions on servers 1, 0, 1.
  TensorTable::Started Declared(const std::string& name, uint32_t id = 5) {
    proto::DeclareReply reply;
    reply.set_name(name);
    reply.set_ok(true);
    reply.set_tensor_id(id);
    reply.set_element_count(kCount);
    reply.set_dtype(proto::DTYPE_FLOAT32);
    reply.set_partition_elements(kCount / 3 + 1);
    for (int s : {1, 0, 1}) reply.add_partition_server(s);
    TensorTable::Started started;
    table_.OnDeclareReply(reply, &started);
    return started;
  }
  TensorTable::Started Finished(const Operation& op, const absl::Status& status) {
    TensorTable::Started started;
    table_.Finished(op, status, &started);
    return started;
  }

  // Whether another thread gets through one of the table's calls (and so its lock) within 10 s:
  // false while the calling thread holds the lock. The thread is joined when the test ends (a
  // join here would wait for a lock this thread may hold).
  bool TableIsFree() {
    others_.push_back(std::async(std::launch::async, [this] {
      int64_t round = 0, version = 0;
      table_.TensorStrategy("w", false, &round, &version).IgnoreError();
    }));
    return others_.back().wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  }

  static constexpr int64_t kCount = 300000;  // 1.2 MB: above min_compress_bytes
  StrategySwitch strategies_;
  std::vector<proto::ControlMessage> sent_;
  std::function<void()> on_send_;  // runs with each declaration the table sends
  TensorTable table_{2, strategies_, [this](proto::ControlMessage m) {
                       if (on_send_) on_send_();
                       sent_.push_back(m);
                     }};
  std::vector<std::future<void>> others_;  // TableIsFree's threads; after table_: joined first
};

TEST_F(TensorTableTest, DeclaresOnceAndChecksEveryUse) {
  ASSERT_TRUE(table_.Declare("w", kCount, proto::DTYPE_FLOAT32).ok());
  ASSERT_TRUE(table_.Declare("w", kCount, proto::DTYPE_FLOAT32).ok());
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0].declare_tensor().name(), "w");
  EXPECT_EQ(sent_[0].declare_tensor().element_count(), kCount);
  absl::Status mismatch = table_.Declare("w", 10, proto::DTYPE_FLOAT16);
  EXPECT_EQ(mismatch.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(mismatch.message(),
            "tensor 'w' was declared with 300000 elements of fp32, now "
            "used with 10 elements of fp16");
  EXPECT_EQ(table_.Declare("", 1, proto::DTYPE_FLOAT32).message(), "tensor name must not be empty");
  EXPECT_EQ(table_.Declare("x", 0, proto::DTYPE_FLOAT32).message(),
            "tensor 'x': element count 0 must be >= 1");
  EXPECT_EQ(table_.Declare("x", 1, static_cast<proto::DType>(9)).code(),
            absl::StatusCode::kInvalidArgument);
  // A refused use is not accepted, and not queued.
  TensorTable::Started started;
  bool accepted = false;
  EXPECT_FALSE(table_
                   .Queue(
                       Op("w", 10), [&] { accepted = true; }, &started)
                   .ok());
  EXPECT_FALSE(accepted);
  EXPECT_TRUE(started.empty());
  EXPECT_EQ(sent_.size(), 1u);
}

TEST_F(TensorTableTest, AnOperationStartsOnceDeclaredWithItsLayoutRoundAndPlan) {
  std::shared_ptr<Operation> op = Op("w");
  EXPECT_TRUE(Queue(op).empty()) << "the declaration is pending";
  TensorTable::Started started = Declared("w");
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0], op);
  EXPECT_EQ(op->layout().tensor_id, 5u);
  EXPECT_EQ(op->layout().num_partitions(), 3);
  EXPECT_EQ(op->layout().partition_server, (std::vector<int32_t>{1, 0, 1}));
  EXPECT_EQ(op->round(), 0u);
  EXPECT_EQ(op->wire_round(), 0u);
  EXPECT_EQ(op->plan().version, 1u);
  EXPECT_EQ(op->plan().push.name(), "topk");
  EXPECT_FALSE(op->two_round());
  ASSERT_NE(op->codecs(), nullptr);
}

TEST_F(TensorTableTest, AStartedOperationCannotBeStartedAgain) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::shared_ptr<Operation> op = Op("w");
  Queue(op);
  ASSERT_EQ(Declared("w").size(), 1u);
  EXPECT_DEATH(op->Start(OperationStart{.round = 7}),
               "push_pull of 'w' started twice \\(round 0, then 7\\)");
  EXPECT_EQ(op->round(), 0u);
}

TEST_F(TensorTableTest, ATensorsOperationsRunOneAtATimeInOrder) {
  ASSERT_TRUE(table_.Declare("w", kCount, proto::DTYPE_FLOAT32).ok());
  EXPECT_TRUE(Declared("w").empty()) << "nothing queued yet";
  std::shared_ptr<Operation> first = Op("w"), second = Op("w"), third = Op("w");
  ASSERT_EQ(Queue(first).size(), 1u);
  EXPECT_TRUE(Queue(second).empty());
  EXPECT_TRUE(Queue(third).empty());
  TensorTable::Started next = Finished(*first, absl::OkStatus());
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0], second);
  EXPECT_EQ(second->round(), 1u);
  EXPECT_EQ(second->wire_round(), 1u);
  next = Finished(*second, absl::OkStatus());
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(third->round(), 2u);
  EXPECT_TRUE(Finished(*third, absl::OkStatus()).empty());
  int64_t round = -1, version = -1;
  ASSERT_TRUE(table_.TensorStrategy("w", false, &round, &version).ok());
  EXPECT_EQ(round, 2);
  EXPECT_EQ(version, 1);
}

TEST_F(TensorTableTest, TwoRoundCodecsTakeTwoWireRoundsPerRound) {
  ASSERT_TRUE(table_.Declare("p", kCount, proto::DTYPE_FLOAT32).ok());
  Declared("p");
  std::shared_ptr<Operation> first = Op("p"), second = Op("p");
  ASSERT_EQ(Queue(first).size(), 1u);
  Queue(second);
  EXPECT_TRUE(first->two_round());
  ASSERT_EQ(Finished(*first, absl::OkStatus()).size(), 1u);
  EXPECT_EQ(second->round(), 1u);
  EXPECT_EQ(second->wire_round(), 2u);
  // artopk's two stages are two exchanges as well (its codec's facts: two_round).
  ASSERT_TRUE(table_.Declare("a", kCount, proto::DTYPE_FLOAT32).ok());
  Declared("a", 6);
  std::shared_ptr<Operation> artopk = Op("a"), after = Op("a");
  ASSERT_EQ(Queue(artopk).size(), 1u);
  Queue(after);
  EXPECT_TRUE(artopk->two_round());
  ASSERT_EQ(Finished(*artopk, absl::OkStatus()).size(), 1u);
  EXPECT_EQ(after->wire_round(), 2u);
}

TEST_F(TensorTableTest, AFailedRoundFailsTheTensorForGood) {
  ASSERT_TRUE(table_.Declare("w", kCount, proto::DTYPE_FLOAT32).ok());
  Declared("w");
  std::shared_ptr<Operation> first = Op("w"), waiting = Op("w");
  Queue(first);
  Queue(waiting);
  EXPECT_TRUE(Finished(*first, absl::DataLossError("server 1 returned 3 bytes")).empty());
  ASSERT_TRUE(waiting->outcome().has_value());
  EXPECT_EQ(waiting->outcome()->code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(waiting->outcome()->message(),
            "tensor 'w' failed in round 0: server 1 returned 3 bytes");
  std::shared_ptr<Operation> later = Op("w");
  EXPECT_TRUE(Queue(later).empty());
  EXPECT_EQ(later->outcome()->message(), "tensor 'w' failed in round 0: server 1 returned 3 bytes");
}

TEST_F(TensorTableTest, ARefusedDeclarationFailsWhatWaitsForIt) {
  std::shared_ptr<Operation> queued = Op("w"), in_machine = Op("w");
  Queue(queued);
  std::string tag;
  ASSERT_TRUE(table_
                  .BeginMachineRound(
                      in_machine, [] {}, &tag)
                  .ok());
  EXPECT_EQ(tag, "w@0");
  proto::DeclareReply reply;
  reply.set_name("w");
  reply.set_ok(false);
  reply.set_error("worker 1 declared 'w' with 10 elements");
  TensorTable::Started started;
  table_.OnDeclareReply(reply, &started);
  EXPECT_TRUE(started.empty());
  for (const auto& op : {queued, in_machine}) {
    ASSERT_TRUE(op->outcome().has_value());
    EXPECT_EQ(op->outcome()->code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(op->outcome()->message(), "worker 1 declared 'w' with 10 elements");
  }
}

TEST_F(TensorTableTest, MachineRoundsAreTaggedByCallCount) {
  std::string tag;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(table_
                    .BeginMachineRound(
                        Op("w"), [] {}, &tag)
                    .ok());
    EXPECT_EQ(tag, "w@" + std::to_string(i));
  }
  int64_t round = -1, version = -1;
  ASSERT_TRUE(table_.TensorStrategy("w", /*machine_rounds=*/true, &round, &version).ok());
  EXPECT_EQ(round, 2);
  EXPECT_EQ(version, 1);
  EXPECT_EQ(table_.TensorStrategy("nope", true, &round, &version).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(TensorTableTest, AStrategySwitchHoldsTheNextRoundUntilReleased) {
  ASSERT_TRUE(table_.Declare("w", kCount, proto::DTYPE_FLOAT32).ok());
  Declared("w");
  std::shared_ptr<Operation> r0 = Op("w"), r1 = Op("w"), r2 = Op("w");
  Queue(r0);
  EXPECT_EQ(strategies_.Prepare(2), 0u);  // rounds beyond 1 are held
  Queue(r1);
  ASSERT_EQ(Finished(*r0, absl::OkStatus()).size(), 1u);  // round 1 may start
  Queue(r2);
  EXPECT_TRUE(Finished(*r1, absl::OkStatus()).empty()) << "round 2 is held";
  absl::StatusOr<proto::Strategy> v2 = compress::ParseStrategy(
      "tensors { name_pattern: \"*\" push_codec { name: \"fp16\" } }", "v2");
  ASSERT_TRUE(v2.ok());
  v2->set_version(2);
  v2->set_first_round(2);
  strategies_.Commit(*v2);
  TensorTable::Started started;
  table_.ReleaseHeld(&started);
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0], r2);
  EXPECT_EQ(r2->round(), 2u);
  EXPECT_EQ(r2->plan().version, 2u);
  EXPECT_EQ(r2->plan().push.name(), "fp16");
}

TEST_F(TensorTableTest, FusionGroupsSetAtASwitchCarryTheMembersRoundsOnTheGroupsOwnKey) {
  ASSERT_TRUE(table_.Declare("w", kCount, proto::DTYPE_FLOAT32).ok());
  Declared("w");
  std::shared_ptr<Operation> r0 = Op("w"), r1 = Op("w"), r2 = Op("w");
  Queue(r0);
  absl::StatusOr<proto::Strategy> v2 = compress::ParseStrategy(
      "tensors { name_pattern: \"fused.0\" push_codec { name: \"fp16\" } force: true }\n"
      "fusion_groups { name: \"fused.0\" tensors: \"w\" tensors: \"b\" }",
      "v2");
  ASSERT_TRUE(v2.ok()) << v2.status();
  v2->set_version(2);
  v2->set_first_round(1);
  strategies_.Commit(*v2);
  Queue(r1);
  ASSERT_EQ(Finished(*r0, absl::OkStatus()).size(), 1u);
  // Round 1 is the group's: the member travels in it, its own key's next round stays.
  EXPECT_EQ(r1->round(), 1u);
  EXPECT_EQ(r1->plan().fusion_group, "fused.0");
  EXPECT_FALSE(r1->plan().compressed());
  Queue(r2);
  ASSERT_EQ(Finished(*r1, absl::OkStatus()).size(), 1u);
  EXPECT_EQ(r2->round(), 2u);
  EXPECT_EQ(r2->wire_round(), 1u) << "a fused round is no exchange of the member's key";
  // The group's push_pull of round 1, a new tensor: its first round is its members' round 1,
  // its first exchange its key's round 0, planned by the version in force at round 1.
  ASSERT_TRUE(table_.Declare("fused.0", kCount, proto::DTYPE_FLOAT32).ok());
  Declared("fused.0", 9);
  std::shared_ptr<Operation> group = Op("fused.0");
  group->members_round = 1;
  ASSERT_EQ(Queue(group).size(), 1u);
  EXPECT_EQ(group->round(), 1u);
  EXPECT_EQ(group->wire_round(), 0u);
  EXPECT_EQ(group->plan().version, 2u);
  EXPECT_EQ(group->plan().push.name(), "fp16");
}

TEST_F(TensorTableTest, FailAllFailsEveryTensorAndReturnsTheWaitingOperations) {
  std::shared_ptr<Operation> waiting = Op("w");
  Queue(waiting);
  std::vector<std::shared_ptr<Operation>> failed =
      table_.FailAll(absl::UnavailableError("server 0 failed"));
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0], waiting);
  std::shared_ptr<Operation> later = Op("w");
  Queue(later);
  EXPECT_EQ(later->outcome()->message(), "server 0 failed");
}

// The declaration's send, the caller's `accepted` and a failed operation's on-done work may use
// the table (the engine's reach other parts that do): each runs with the table's lock released.
TEST_F(TensorTableTest, RunsNothingButItsOwnCodeUnderItsLock) {
  int runs = 0, free = 0;
  auto check = [&] {
    ++runs;
    if (free == runs - 1 && TableIsFree()) ++free;  // after one failure, no more waiting
  };
  auto check_when_done = [&](const std::shared_ptr<Operation>& op) {
    op->SetOnDone([&](absl::Status) { check(); });
  };
  on_send_ = check;
  TensorTable::Started started;
  std::string tag;
  // A new tensor's declaration is sent, then its operations are accepted.
  std::shared_ptr<Operation> queued = Op("w"), in_machine = Op("w");
  ASSERT_TRUE(table_.Queue(queued, check, &started).ok());
  ASSERT_TRUE(table_.BeginMachineRound(in_machine, check, &tag).ok());
  EXPECT_EQ(runs, 3);
  // A refused declaration fails both.
  check_when_done(queued);
  check_when_done(in_machine);
  proto::DeclareReply refused;
  refused.set_name("w");
  refused.set_ok(false);
  refused.set_error("worker 1 declared 'w' with 10 elements");
  table_.OnDeclareReply(refused, &started);
  EXPECT_EQ(runs, 5);
  // Later uses of the failed tensor are accepted and fail at once.
  std::shared_ptr<Operation> later = Op("w"), later_in_machine = Op("w");
  check_when_done(later);
  check_when_done(later_in_machine);
  ASSERT_TRUE(table_.Queue(later, check, &started).ok());
  ASSERT_TRUE(table_.BeginMachineRound(later_in_machine, check, &tag).ok());
  EXPECT_EQ(runs, 9);
  // A failed round fails what waits behind it.
  ASSERT_TRUE(table_.Declare("x", kCount, proto::DTYPE_FLOAT32).ok());
  Declared("x");
  std::shared_ptr<Operation> first = Op("x"), waiting = Op("x");
  ASSERT_TRUE(table_.Queue(first, check, &started).ok());
  ASSERT_TRUE(table_.Queue(waiting, check, &started).ok());
  check_when_done(waiting);
  table_.Finished(*first, absl::DataLossError("server 1 returned 3 bytes"), &started);
  EXPECT_EQ(runs, 13);
  EXPECT_EQ(free, runs) << "run " << free + 1 << " ran under the table's lock";
  for (const auto& op : {queued, in_machine, later, later_in_machine, waiting}) {
    EXPECT_TRUE(op->outcome().has_value());
  }
}

TEST_F(TensorTableTest, CheckpointsAreTakenBetweenStepsAndKeptUntilTheMemoryExists) {
  EXPECT_EQ(table_.SaveState("w").status().message(), "unknown tensor 'w'");
  EXPECT_EQ(table_.LoadState("w", "").message(), "unknown tensor 'w': declare it first");
  ASSERT_TRUE(table_.Declare("w", kCount, proto::DTYPE_FLOAT32).ok());
  // Loaded while the declaration is pending: applied once the partitioning is known.
  const std::string state = EncodeTensorState({"a", "", "c"});
  ASSERT_TRUE(table_.LoadState("w", state).ok());
  Declared("w");
  absl::StatusOr<std::string> saved = table_.SaveState("w");
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(*saved, state) << "no memory exists yet: the restored state is what is saved";
  EXPECT_EQ(table_.LoadState("w", EncodeTensorState({"a"})).message(),
            "error-feedback state of 'w': 1 partitions, the tensor has 3");
  std::shared_ptr<Operation> op = Op("w");
  Queue(op);
  EXPECT_EQ(table_.SaveState("w").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(table_.LoadState("w", state).code(), absl::StatusCode::kFailedPrecondition);
  Finished(*op, absl::OkStatus());
  EXPECT_TRUE(table_.SaveState("w").ok());
}

}  // namespace
}  // namespace bytecomp::worker
