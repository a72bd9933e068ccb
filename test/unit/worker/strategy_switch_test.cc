// The strategy switch: plans follow the version in force at each round; between prepare and
// commit no round beyond the highest started + 1 starts, so no round mixes two versions.
#include "strategy_switch.h"

#include <gtest/gtest.h>

#include <string>

namespace bytecomp::worker {
namespace {

constexpr int64_t kBytes = 1 << 20;  // above the default min_compress_bytes

proto::Strategy Version(uint64_t version, uint64_t first_round, const std::string& codec,
                        uint64_t seed = 0) {
  absl::StatusOr<proto::Strategy> s = compress::ParseStrategy(
      "tensors { name_pattern: \"w*\" push_codec { name: \"" + codec + "\" } }", "test");
  EXPECT_TRUE(s.ok()) << s.status();
  s->set_version(version);
  s->set_first_round(first_round);
  s->set_seed(seed);
  return *s;
}

TEST(StrategySwitchTest, WithoutAStrategyEverythingIsUncompressedVersionZero) {
  StrategySwitch strategies;
  std::optional<compress::TensorPlan> plan = strategies.Admit(0, "w", kBytes);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->version, 0u);
  EXPECT_FALSE(plan->compressed());
  EXPECT_EQ(strategies.VersionAt(5), 0u);
  EXPECT_EQ(strategies.SeedOf(1), 0u);
}

TEST(StrategySwitchTest, PlansFollowTheVersionOfTheRound) {
  StrategySwitch strategies;
  ASSERT_TRUE(strategies.Add(Version(1, 0, "topk", 7)).ok());
  ASSERT_TRUE(strategies.Add(Version(2, 3, "fp16", 9)).ok());
  EXPECT_EQ(strategies.Admit(2, "w1", kBytes)->push.name(), "topk");
  EXPECT_EQ(strategies.Admit(3, "w1", kBytes)->push.name(), "fp16");
  EXPECT_EQ(strategies.Admit(3, "w1", kBytes)->version, 2u);
  EXPECT_FALSE(strategies.Admit(3, "bias", kBytes)->compressed());  // no entry matches
  EXPECT_EQ(strategies.VersionAt(2), 1u);
  EXPECT_EQ(strategies.SeedOf(1), 7u);
  EXPECT_EQ(strategies.SeedOf(2), 9u);
  EXPECT_EQ(strategies.Add(Version(2, 5, "fp16")).code(), absl::StatusCode::kInvalidArgument)
      << "versions must increase";
}

TEST(StrategySwitchTest, PrepareHoldsRoundsBeyondTheHighestStartedPlusOneUntilCommit) {
  StrategySwitch strategies;
  ASSERT_TRUE(strategies.Add(Version(1, 0, "topk")).ok());
  for (uint64_t round = 0; round <= 3; ++round)
    ASSERT_TRUE(strategies.Admit(round, "w", kBytes).has_value());
  ASSERT_TRUE(strategies.Admit(1, "w2", kBytes).has_value());  // another tensor behind: no effect
  EXPECT_EQ(strategies.Prepare(2), 3u);
  EXPECT_TRUE(strategies.Admit(4, "w", kBytes).has_value()) << "highest + 1 may still start";
  EXPECT_FALSE(strategies.Admit(5, "w", kBytes).has_value());
  EXPECT_FALSE(strategies.Admit(6, "w2", kBytes).has_value());
  // The scheduler picks a first round no worker has started: 5.
  strategies.Commit(Version(2, 5, "fp16"));
  std::optional<compress::TensorPlan> plan = strategies.Admit(5, "w", kBytes);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->version, 2u);
  EXPECT_EQ(plan->push.name(), "fp16");
  EXPECT_EQ(strategies.Admit(4, "w2", kBytes)->version, 1u);
}

TEST(StrategySwitchTest, ARefusedCommitKeepsTheOldVersionAndEndsTheHold) {
  StrategySwitch strategies;
  ASSERT_TRUE(strategies.Add(Version(3, 0, "topk")).ok());
  EXPECT_EQ(strategies.Prepare(4), 0u);
  EXPECT_FALSE(strategies.Admit(2, "w", kBytes).has_value());
  strategies.Commit(Version(2, 2, "fp16"));  // an older version: refused (logged)
  std::optional<compress::TensorPlan> plan = strategies.Admit(2, "w", kBytes);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->version, 3u);
  EXPECT_EQ(plan->push.name(), "topk");
}

TEST(StrategySwitchTest, FusionGroupsSetAtASwitchFuseTheirMembersFromItsRoundAndStay) {
  StrategySwitch strategies;
  ASSERT_TRUE(strategies.Add(Version(1, 0, "topk")).ok());
  EXPECT_EQ(strategies.fusion_groups(), nullptr);
  proto::Strategy fused = Version(2, 4, "fp16");
  proto::FusionGroup* group = fused.add_fusion_groups();
  group->set_name("fused.0");
  group->add_tensors("b0");
  group->add_tensors("w1");
  strategies.Commit(fused);
  // Before the switch round the members travel alone, by their own entries; from it their
  // plans name the group and nothing else.
  EXPECT_FALSE(strategies.Admit(3, "w1", kBytes)->fused());
  EXPECT_EQ(strategies.Admit(3, "w1", kBytes)->push.name(), "topk");
  std::optional<compress::TensorPlan> plan = strategies.Admit(4, "w1", kBytes);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->fusion_group, "fused.0");
  EXPECT_EQ(plan->version, 2u);
  EXPECT_FALSE(plan->compressed());
  EXPECT_FALSE(strategies.Admit(4, "w2", kBytes)->fused());  // not a member
  const auto groups = strategies.fusion_groups();
  ASSERT_NE(groups, nullptr);
  EXPECT_EQ(groups->first_round, 4u);
  ASSERT_NE(groups->Named("fused.0"), nullptr);
  EXPECT_EQ(groups->Named("fused.0")->tensors_size(), 2);
  // Fixed once set: a version without them, or with others, is refused (the commit logs it).
  absl::Status refused = strategies.Add(Version(3, 6, "fp16"));
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_NE(refused.message().find("fixed once set"), std::string::npos) << refused;
  proto::Strategy same = fused;
  same.set_version(3);
  same.set_first_round(6);
  ASSERT_TRUE(strategies.Add(same).ok());
  EXPECT_EQ(strategies.Admit(7, "b0", kBytes)->fusion_group, "fused.0");
}

}  // namespace
}  // namespace bytecomp::worker
