#include "bytecomp/scheduler/local_groups.h"

#include <gtest/gtest.h>

#include "protocol_test_util.h"

namespace bytecomp {
namespace {

using testing::Contains;

SlotRequest At(int rank, const std::string& machine, std::optional<int> local_rank = std::nullopt,
               std::optional<int> local_size = std::nullopt) {
  SlotRequest p;
  p.rank = rank;
  p.machine = machine;
  p.requested_local_rank = local_rank;
  p.declared_local_size = local_size;
  return p;
}

TEST(LocalGroupsTest, GroupsByMachineInRankOrderWithTheLowestRankAsRoot) {
  absl::StatusOr<LocalAssignment> a =
      AssignLocalRanks({At(3, "B"), At(0, "A"), At(1, "B"), At(2, "A"), At(4, "C")});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->local_rank, (std::vector<int>{0, 0, 1, 1, 0}));
  EXPECT_EQ(a->local_size, (std::vector<int>{2, 2, 2, 2, 1}));
  EXPECT_EQ(a->local_root, (std::vector<int>{0, 1, 0, 1, 4}));
  EXPECT_EQ(a->machines, (std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4}}));
  EXPECT_EQ(a->machine_names, (std::vector<std::string>{"A", "B", "C"}));
  EXPECT_EQ(a->roots, (std::vector<int>{0, 1, 4}));
}

TEST(LocalGroupsTest, RequestedLocalRanksAreHonouredAndTheOthersFillTheGaps) {
  // Machine A: worker 2 asked for local rank 0, worker 0 for 2, worker 1 takes the free 1.
  absl::StatusOr<LocalAssignment> a =
      AssignLocalRanks({At(0, "A", 2, 3), At(1, "A"), At(2, "A", 0, 3), At(3, "B", 0, 1)});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->local_rank, (std::vector<int>{2, 1, 0, 0}));
  EXPECT_EQ(a->local_root, (std::vector<int>{2, 2, 2, 3}));
  EXPECT_EQ(a->machines[0], (std::vector<int>{2, 1, 0}));
  EXPECT_EQ(a->roots, (std::vector<int>{2, 3}));
}

TEST(LocalGroupsTest, RegistrationRefusesConflictsNamingTheMachineAndTheWorkers) {
  const std::vector<SlotRequest> registered = {At(0, "A", 0, 2), At(1, "B")};
  auto message = [&](const SlotRequest& p) {
    absl::Status s = CheckSlotRequest(registered, p);
    EXPECT_FALSE(s.ok());
    return std::string(s.message());
  };
  EXPECT_TRUE(
      Contains(message(At(2, "A", 0, 2)),
               "worker 2 on machine 'A' asked for local rank 0, already taken by worker 0"));
  EXPECT_TRUE(Contains(message(At(2, "A", 1, 3)),
                       "declared local size 3 but worker 0 on the same machine declared 2"));
  EXPECT_TRUE(
      Contains(message(At(2, "A", 2, 2)), "asked for local rank 2, out of range for local size 2"));
  EXPECT_TRUE(Contains(message(At(2, "A", -1)), "asked for local rank -1, out of range"));
  EXPECT_TRUE(Contains(message(At(2, "A", std::nullopt, 0)), "declared local size 0"));
  EXPECT_TRUE(
      Contains(message(At(2, std::string(300, 'm'))), "a machine name of 300 bytes; at most 256"));
  EXPECT_TRUE(CheckSlotRequest(registered, At(2, "")).ok())
      << "no name (no hostname) is one more machine";
  EXPECT_TRUE(CheckSlotRequest(registered, At(2, "A", 1, 2)).ok());
  EXPECT_TRUE(CheckSlotRequest(registered, At(2, "A")).ok());
  // A third worker on a machine of declared size 2.
  std::vector<SlotRequest> full = registered;
  full.push_back(At(2, "A"));
  EXPECT_TRUE(
      Contains(std::string(CheckSlotRequest(full, At(3, "A")).message()),
               "worker 3 on machine 'A' would be worker 3 on that machine, whose local size is 2"));
}

TEST(LocalGroupsTest, AMachineShortOfItsDeclaredSizeNamesTheMissingLocalRanks) {
  absl::StatusOr<LocalAssignment> a =
      AssignLocalRanks({At(0, "A", 0, 3), At(1, "A", 2, 3), At(2, "B")});
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(std::string(a.status().message()),
                       "machine 'A' declared local size 3 but 2 workers registered from it "
                       "(workers 0 (local rank 0), 1 (local rank 2)); missing local rank 1"))
      << a.status();
  // Without named local ranks only the count is known.
  a = AssignLocalRanks({At(0, "A", std::nullopt, 4), At(1, "B")});
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(Contains(std::string(a.status().message()), "missing 3 of its local ranks"))
      << a.status();
  // A local rank beyond an undeclared machine's worker count.
  a = AssignLocalRanks({At(0, "A", 1), At(1, "B")});
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(
      Contains(std::string(a.status().message()),
               "worker 0 asked for local rank 1 but only 1 worker registered from machine 'A'"))
      << a.status();
}

}  // namespace
}  // namespace bytecomp
