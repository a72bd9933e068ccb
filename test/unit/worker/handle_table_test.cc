// The handle table: handles find their operations until released; poll, wait and release
// behave as the C API documents them (c_api.h).
#include "handle_table.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>

#include "operation.h"

namespace bytecomp::worker {
namespace {

std::shared_ptr<Operation> MakeOperation(const std::string& name) {
  return std::make_shared<Operation>(PushPullRequest{.name = name});
}

TEST(HandleTableTest, HandlesCountFromOneAndFindTheirOperations) {
  HandleTable table;
  std::shared_ptr<Operation> a = MakeOperation("a"), b = MakeOperation("b");
  table.Register(a);
  table.Register(b);
  EXPECT_EQ(a->handle, 1);
  EXPECT_EQ(b->handle, 2);
  EXPECT_EQ(table.All().size(), 2u);
  absl::StatusOr<bool> done = table.Poll(a->handle);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_FALSE(*done);
}

TEST(HandleTableTest, PollReportsTheOperationsErrorOnceDone) {
  HandleTable table;
  std::shared_ptr<Operation> op = MakeOperation("w");
  table.Register(op);
  op->RecordError(absl::FailedPreconditionError("server 0 refused round 3"));
  EXPECT_FALSE(*table.Poll(op->handle));  // an error alone does not make it done
  op->MarkDone();
  absl::StatusOr<bool> done = table.Poll(op->handle);
  EXPECT_EQ(done.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(done.status().message(), "server 0 refused round 3");
  // Poll does not release.
  EXPECT_EQ(table.Poll(op->handle).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(HandleTableTest, WaitTimesOutNamingTheTensorAndKeepsTheHandle) {
  HandleTable table;
  std::shared_ptr<Operation> op = MakeOperation("fc.weight");
  table.Register(op);
  absl::Status waited = table.Wait(op->handle, 20);
  EXPECT_EQ(waited.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(waited.message(), "push_pull of 'fc.weight' not done after 20 ms");
  EXPECT_TRUE(table.Poll(op->handle).ok());  // still known
}

TEST(HandleTableTest, WaitSeesCompletionFromAnotherThreadAndReleases) {
  HandleTable table;
  std::shared_ptr<Operation> op = MakeOperation("w");
  table.Register(op);
  std::thread finisher([op] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    op->MarkDone();
  });
  EXPECT_TRUE(table.Wait(op->handle, -1).ok());
  finisher.join();
  EXPECT_EQ(table.Poll(op->handle).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(table.All().empty());
}

TEST(HandleTableTest, AFailedOperationsWaitReturnsItsErrorAndReleases) {
  HandleTable table;
  std::shared_ptr<Operation> op = MakeOperation("w");
  table.Register(op);
  op->FailBeforeStart(absl::InvalidArgumentError("tensor 'w' failed in round 0"));
  EXPECT_EQ(table.Wait(op->handle, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table.Wait(op->handle, 0).code(), absl::StatusCode::kNotFound);
}

TEST(HandleTableTest, UnknownHandlesAreNotFound) {
  HandleTable table;
  EXPECT_EQ(table.Poll(42).status().message(), "unknown handle 42");
  EXPECT_EQ(table.Wait(42, 0).message(), "unknown handle 42");
  EXPECT_EQ(table.Release(42).code(), absl::StatusCode::kNotFound);
  std::shared_ptr<Operation> op = MakeOperation("w");
  table.Register(op);
  EXPECT_TRUE(table.Release(op->handle).ok());
  EXPECT_EQ(table.Release(op->handle).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace bytecomp::worker
