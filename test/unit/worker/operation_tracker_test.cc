// The operation tracker: an operation completes exactly once, when the last of its named
// events is in, whoever reports it and in whatever order; a report that was not expected, or
// comes twice, is refused and not counted.
#include "operation_tracker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "operation.h"

namespace bytecomp::worker {
namespace {

std::shared_ptr<Operation> MakeOperation(int partitions, bool compressed) {
  auto op = std::make_shared<Operation>(PushPullRequest{.name = "w", .element_count = 100});
  OperationStart start;
  start.layout.element_count = 100;
  start.layout.partition_elements = (100 + partitions - 1) / partitions;
  start.layout.partition_server.assign(partitions, 0);
  if (compressed) start.plan.push.set_name("topk");
  op->Start(std::move(start));
  return op;
}

class OperationTrackerTest : public ::testing::Test {
 protected:
  std::atomic<int> completions_{0};
  OperationTracker tracker_{[this](const std::shared_ptr<Operation>& op) {
    ++completions_;
    op->MarkDone();
  }};
};

TEST_F(OperationTrackerTest, UncompressedWaitsForEveryResultAndEveryPayloadRelease) {
  std::shared_ptr<Operation> op = MakeOperation(3, /*compressed=*/false);
  tracker_.Expect(*op);
  EXPECT_EQ(op->events.outstanding(), 6);
  for (int p = 0; p < 3; ++p) tracker_.ResultIn(op, p);
  tracker_.PayloadReleased(op, 2);
  tracker_.PayloadReleased(op, 0);
  EXPECT_EQ(completions_, 0);
  EXPECT_TRUE(op->events.Pending(1, PartitionEvent::kPayloadReleased));
  EXPECT_FALSE(op->events.Pending(1, PartitionEvent::kResult));
  EXPECT_FALSE(op->outcome().has_value());
  // The caller's memory is free only once ZeroMQ let go of the last payload.
  tracker_.PayloadReleased(op, 1);
  EXPECT_EQ(completions_, 1);
  ASSERT_TRUE(op->outcome().has_value());
  EXPECT_TRUE(op->outcome()->ok());
}

TEST_F(OperationTrackerTest, CompressedWaitsForResultsOnly) {
  std::shared_ptr<Operation> op = MakeOperation(2, /*compressed=*/true);
  tracker_.Expect(*op);
  EXPECT_EQ(op->events.outstanding(), 2);
  EXPECT_FALSE(op->events.Pending(0, PartitionEvent::kPayloadReleased));
  tracker_.ResultIn(op, 1);
  EXPECT_EQ(completions_, 0);
  tracker_.ResultIn(op, 0);
  EXPECT_EQ(completions_, 1);
}

TEST_F(OperationTrackerTest, ReportsNotExpectedOrRepeatedAreNotCounted) {
  std::shared_ptr<Operation> op = MakeOperation(2, /*compressed=*/true);
  tracker_.Expect(*op);
  EXPECT_EQ(op->events.Finish(0, PartitionEvent::kPayloadReleased),
            OperationEvents::Report::kUnexpected);
  EXPECT_EQ(op->events.Finish(0, PartitionEvent::kResult), OperationEvents::Report::kCounted);
  EXPECT_EQ(op->events.Finish(0, PartitionEvent::kResult), OperationEvents::Report::kUnexpected);
  EXPECT_EQ(op->events.Finish(7, PartitionEvent::kResult), OperationEvents::Report::kUnexpected);
  EXPECT_EQ(op->events.Finish(-1, PartitionEvent::kResult), OperationEvents::Report::kUnexpected);
  EXPECT_EQ(op->events.outstanding(), 1);
  // A repeated report through the tracker does not complete the operation early.
  tracker_.ResultIn(op, 0);
  EXPECT_EQ(completions_, 0);
  EXPECT_EQ(op->events.Finish(1, PartitionEvent::kResult), OperationEvents::Report::kLast);
}

TEST_F(OperationTrackerTest, TheFirstErrorIsTheOperationsError) {
  std::shared_ptr<Operation> op = MakeOperation(2, /*compressed=*/true);
  tracker_.Expect(*op);
  tracker_.ResultFailed(op, 0, absl::DataLossError("server 1 returned 3 bytes"));
  tracker_.ResultFailed(op, 1, absl::UnavailableError("later"));
  ASSERT_EQ(completions_, 1);
  ASSERT_TRUE(op->outcome().has_value());
  EXPECT_EQ(op->outcome()->code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(op->outcome()->message(), "server 1 returned 3 bytes");
}

TEST_F(OperationTrackerTest, FailAllFinishesWhatIsLeftOnce) {
  std::shared_ptr<Operation> op = MakeOperation(3, /*compressed=*/false);
  tracker_.Expect(*op);
  tracker_.ResultIn(op, 0);
  tracker_.PayloadReleased(op, 0);
  tracker_.PayloadReleased(op, 2);
  tracker_.FailAll(op, absl::CancelledError("the engine stopped"));
  EXPECT_EQ(completions_, 1);
  EXPECT_EQ(op->events.outstanding(), 0);
  EXPECT_EQ(op->outcome()->code(), absl::StatusCode::kCancelled);
  // Nothing is left: late reports and a second FailAll complete nothing more.
  tracker_.FailAll(op, absl::CancelledError("again"));
  tracker_.ResultIn(op, 1);
  EXPECT_EQ(completions_, 1);
}

TEST_F(OperationTrackerTest, ConcurrentReportersCompleteExactlyOnce) {
  constexpr int kPartitions = 64;
  for (int trial = 0; trial < 20; ++trial) {
    completions_ = 0;
    std::shared_ptr<Operation> op = MakeOperation(kPartitions, /*compressed=*/false);
    tracker_.Expect(*op);
    // One thread reports the results (the pool), another the releases (ZeroMQ's I/O thread).
    std::thread results([&] {
      for (int p = 0; p < kPartitions; ++p) tracker_.ResultIn(op, p);
    });
    std::thread releases([&] {
      for (int p = kPartitions - 1; p >= 0; --p) tracker_.PayloadReleased(op, p);
    });
    results.join();
    releases.join();
    EXPECT_EQ(completions_, 1);
    EXPECT_EQ(op->events.outstanding(), 0);
  }
}

}  // namespace
}  // namespace bytecomp::worker
