// TensorFusion (worker/src/tensor_fusion.h) without the engine: members packed in the group's
// order whatever order they come in, a round started by its last member, the sums copied back,
// rounds kept apart by their index, and the refusals.
#include "tensor_fusion.h"

#include <numeric>

#include "gtest/gtest.h"
#include "operation.h"

namespace bytecomp::worker {
namespace {

proto::FusionGroup Biases() {
  proto::FusionGroup g;
  g.set_name("fused.biases");
  for (const char* t : {"b0", "b1", "b2"}) g.add_tensors(t);
  return g;
}

// A member's push_pull of `data`, started by its tensor table at `round`.
std::shared_ptr<Operation> Member(const std::string& name, std::vector<float>& data,
                                  uint64_t round = 0, int priority = 0, bool average = false) {
  PushPullRequest r;
  r.name = name;
  r.data = data.data();
  r.element_count = static_cast<int64_t>(data.size());
  r.priority = priority;
  r.average = average;
  auto op = std::make_shared<Operation>(r);
  OperationStart start;
  start.round = round;
  start.plan.fusion_group = "fused.biases";
  op->Start(std::move(start));
  return op;
}

TEST(TensorFusionTest, MembersPackInGroupOrderAndTheirSumsComeBack) {
  TensorFusion fusion;
  const proto::FusionGroup group = Biases();
  std::vector<float> b0 = {1, 2}, b1 = {3}, b2 = {4, 5, 6};
  // They come in another order than the group's, at round 7 (the groups were set at a switch).
  auto m2 = Member("b2", b2, 7, 5);
  auto m0 = Member("b0", b0, 7, 1);
  auto m1 = Member("b1", b1, 7, 9);
  auto r = fusion.Add(m2, group);
  ASSERT_TRUE(r.ok() && !r->has_value());
  r = fusion.Add(m0, group);
  ASSERT_TRUE(r.ok() && !r->has_value());
  r = fusion.Add(m1, group);
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status();
  const TensorFusion::GroupRound& round = **r;
  EXPECT_EQ(round.round, 7u);
  EXPECT_EQ(round.request.name, "fused.biases");
  EXPECT_EQ(round.request.element_count, 6);
  EXPECT_EQ(round.request.priority, 9);  // the most urgent member's
  float* buffer = static_cast<float*>(round.request.data);
  EXPECT_EQ(std::vector<float>(buffer, buffer + 6), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  // The group's push_pull sums in place; its end copies out.
  for (int i = 0; i < 6; ++i) buffer[i] *= 10;
  const auto members = fusion.Finish("fused.biases", 7, absl::OkStatus());
  ASSERT_EQ(members.size(), 3u);
  EXPECT_EQ(members[0], m0);
  EXPECT_EQ(b0, (std::vector<float>{10, 20}));
  EXPECT_EQ(b1, (std::vector<float>{30}));
  EXPECT_EQ(b2, (std::vector<float>{40, 50, 60}));
  EXPECT_TRUE(fusion.Finish("fused.biases", 7, absl::OkStatus()).empty());  // once
  EXPECT_EQ(fusion.counts().members, 3);
  EXPECT_EQ(fusion.counts().group_rounds, 1);
}

TEST(TensorFusionTest, RoundsAreKeptApartByTheirIndexAndAFailedRoundKeepsTheValues) {
  TensorFusion fusion;
  const proto::FusionGroup group = Biases();
  std::vector<std::vector<float>> round0 = {{1, 1}, {1}, {1, 1, 1}};
  std::vector<std::vector<float>> round1 = {{2, 2}, {2}, {2, 2, 2}};
  const char* names[] = {"b0", "b1", "b2"};
  // Round 1's b0 and b1 come before round 0's b2 (their tensors' rounds, not their order).
  ASSERT_FALSE(fusion.Add(Member("b0", round0[0], 0), group)->has_value());
  ASSERT_FALSE(fusion.Add(Member("b1", round0[1], 0), group)->has_value());
  ASSERT_FALSE(fusion.Add(Member("b0", round1[0], 1), group)->has_value());
  ASSERT_FALSE(fusion.Add(Member(names[1], round1[1], 1), group)->has_value());
  auto r0 = fusion.Add(Member("b2", round0[2], 0), group);
  ASSERT_TRUE(r0.ok() && r0->has_value());
  EXPECT_EQ((*r0)->round, 0u);
  EXPECT_EQ(static_cast<float*>((*r0)->request.data)[0], 1);  // round 0's values
  auto r1 = fusion.Add(Member(names[2], round1[2], 1), group);
  ASSERT_TRUE(r1.ok() && r1->has_value());
  EXPECT_EQ((*r1)->round, 1u);
  EXPECT_EQ(static_cast<float*>((*r1)->request.data)[0], 2);
  // Round 1 ends first (its status is its own); round 0 fails: its members keep their values.
  EXPECT_EQ(fusion.Finish("fused.biases", 1, absl::OkStatus()).size(), 3u);
  EXPECT_EQ(fusion.Finish("fused.biases", 0, absl::DataLossError("lost")).size(), 3u);
  EXPECT_EQ(round0[2], (std::vector<float>{1, 1, 1}));
}

TEST(TensorFusionTest, RefusesWhatOneBufferCannotCarryAndFailsTheWaitingOnes) {
  TensorFusion fusion;
  const proto::FusionGroup group = Biases();
  std::vector<float> a = {1, 2}, b = {1, 2, 3}, c = {1};
  PushPullRequest half;
  half.name = "b1";
  half.data = c.data();
  half.element_count = 1;
  half.dtype = ElementType::kFloat16;
  auto refused = fusion.Add(std::make_shared<Operation>(half), group);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("host fp32 tensors only"), std::string::npos)
      << refused.status();
  auto stranger = fusion.Add(Member("w0", a), group);
  ASSERT_FALSE(stranger.ok());
  EXPECT_NE(stranger.status().message().find("not one of its members"), std::string::npos);
  ASSERT_TRUE(fusion.Add(Member("b0", a), group)->has_value() == false);
  auto again = fusion.Add(Member("b0", a), group);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("a second push_pull in round 0"), std::string::npos);
  auto averaged = fusion.Add(Member("b1", c, 0, 0, /*average=*/true), group);
  ASSERT_FALSE(averaged.ok());
  EXPECT_NE(averaged.status().message().find("averaged unlike"), std::string::npos);
  // b0's size is fixed once known: a round later with other sizes is refused.
  ASSERT_TRUE(fusion.Add(Member("b1", c), group)->has_value() == false);
  ASSERT_TRUE(fusion.Add(Member("b2", b), group)->has_value());
  auto resized = fusion.Add(Member("b0", b, 1), group);
  ASSERT_FALSE(resized.ok());
  EXPECT_NE(resized.status().message().find("3 elements, where it had 2"), std::string::npos)
      << resized.status();
  // The next round's b1 waits; the engine's failure takes it (round 0 started: not taken).
  ASSERT_FALSE(fusion.Add(Member("b1", c, 1), group)->has_value());
  EXPECT_EQ(fusion.TakeWaiting().size(), 1u);
  EXPECT_EQ(fusion.Finish("fused.biases", 0, absl::OkStatus()).size(), 3u);
}

}  // namespace
}  // namespace bytecomp::worker
