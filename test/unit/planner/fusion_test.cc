// The planner's tensor fusion (planner/fusion.h): which tensors join groups, the fused model
// the planner plans, and bytecomp-plan --fusion_below keeping the faster plan with its groups.
#include "bytecomp/planner/fusion.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "bytecomp/common/text_proto.h"
#include "gtest/gtest.h"

namespace bytecomp::planner {
namespace {

proto::ModelProfile Model() {
  proto::ModelProfile m;
  m.set_model("m");
  auto add = [&](const std::string& name, int64_t elements, double gap) {
    proto::TensorProfile* t = m.add_tensors();
    t->set_name(name);
    t->set_elements(elements);
    t->set_ready_gap_us(gap);
    return t;
  };
  add("big.a", 1 << 20, 10);                // 4 MiB: not fused
  add("s1", 100, 1)->set_block_density(1);  // measured dense: fused like any
  add("s2", 200, 2);
  add("big.b", 1 << 20, 10);
  add("s3", 300, 3);  // alone between two big ones: stays as it is
  add("big.c", 1 << 20, 10);
  add("s4", 60000, 4);  // 240 KB each: the cap (512 KB) fits two
  add("s5", 60000, 5);
  add("s6", 60000, 6);
  add("s7", 60000, 7);
  add("half", 100, 1)->set_element_bytes(2);    // not fp32: not fused
  add("rows", 100, 1)->set_block_density(0.1);  // block-sparse: not fused
  add("gpu", 100, 1)->set_on_device(true);      // a GPU tensor: not fused
  add("s8", 100, 1);
  add("s9", 100, 1)->set_after_wait(true);  // the training thread waited before it: apart
  add("s10", 100, 1);
  add("odd", 100, 1)->set_some_rounds_only(true);  // not pushed every round: not fused
  return m;
}

TEST(FusionTest, ConsecutiveSmallTensorsFormGroupsReadyWithTheirLastMember) {
  const FusedModel fused = FuseProfile(Model(), /*below_bytes=*/1 << 20, /*cap_bytes=*/512000);
  ASSERT_EQ(fused.groups.size(), 4u);
  EXPECT_EQ(fused.members, 8);
  EXPECT_EQ(fused.groups[0].name(), "fused.0");
  EXPECT_EQ(
      std::vector<std::string>(fused.groups[0].tensors().begin(), fused.groups[0].tensors().end()),
      (std::vector<std::string>{"s1", "s2"}));
  EXPECT_EQ(fused.groups[1].tensors_size(), 2);  // s4, s5
  EXPECT_EQ(fused.groups[2].tensors(1), "s7");
  EXPECT_EQ(fused.groups[3].tensors(0), "s9");  // s8 alone before the wait
  std::vector<std::string> order;
  for (const auto& t : fused.profile.tensors()) order.push_back(t.name());
  EXPECT_EQ(order,
            (std::vector<std::string>{"big.a", "fused.0", "big.b", "s3", "big.c", "fused.1",
                                      "fused.2", "half", "rows", "gpu", "s8", "fused.3", "odd"}));
  EXPECT_EQ(fused.profile.tensors(1).elements(), 300);
  EXPECT_DOUBLE_EQ(fused.profile.tensors(1).ready_gap_us(), 3);  // s1's gap + s2's
  EXPECT_DOUBLE_EQ(fused.profile.tensors(5).ready_gap_us(), 9);
  // Nothing under the size: the profile as it is.
  const FusedModel none = FuseProfile(Model(), 100, 512000);
  EXPECT_TRUE(none.groups.empty());
  EXPECT_EQ(none.profile.tensors_size(), Model().tensors_size());
}

TEST(FusionTest, AStrategysGroupsMakeTheFusedModelAgain) {
  const FusedModel fused = FuseProfile(Model(), /*below_bytes=*/1 << 20, /*cap_bytes=*/512000);
  absl::StatusOr<proto::ModelProfile> again = ProfileWithGroups(Model(), fused.groups);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->SerializeAsString(), fused.profile.SerializeAsString());
  auto group = [](const std::string& name, std::vector<std::string> tensors) {
    proto::FusionGroup g;
    g.set_name(name);
    for (const std::string& t : tensors) g.add_tensors(t);
    return g;
  };
  auto error = [&](std::vector<proto::FusionGroup> groups) {
    absl::StatusOr<proto::ModelProfile> p = ProfileWithGroups(Model(), groups);
    return p.ok() ? std::string("ok") : std::string(p.status().message());
  };
  EXPECT_EQ(error({group("g", {"s1", "s3"})}),
            "fusion group 'g': its tensor 's3' is not next in the profile (a group's tensors "
            "are consecutive, in the profile's ready order)");
  EXPECT_EQ(error({group("g", {"s2", "s1"})}),
            "tensor 's1' of a fusion group is not where its group's tensors are, consecutive "
            "in the profile's (ready) order");
  EXPECT_EQ(error({group("g", {"nope", "none"})}),
            "fusion group 'g': tensor 'nope' is not in the profile");
  EXPECT_EQ(error({group("g", {"s1", "s2"}), group("h", {"s2", "s3"})}),
            "fusion group 'h': tensor 's2' is in more than one group");
  EXPECT_EQ(error({group("g", {})}), "fusion group 'g' has no tensors");
}

TEST(FusionTest, PlanCliKeepsTheFasterPlanAndWritesItsGroups) {
  const std::string dir = BYTECOMP_PLANNER_DIR;
  const std::string profile = ::testing::TempDir() + "/fusion_tiny.pbtxt";
  {
    std::ofstream f(profile);
    f << "model: \"tiny400\" forward_us: 1000\n";
    for (int i = 0; i < 400; ++i) {
      f << "tensors { name: \"t" << i << "\" elements: 256 ready_gap_us: 5 }\n";
    }
  }
  const std::string out = ::testing::TempDir() + "/fusion_strategy.pbtxt";
  const std::string log = out + ".log";
  auto run = [&](const std::string& cluster, const std::string& more = " --fusion_below=1048576") {
    const std::string command = std::string(BYTECOMP_PLAN_BINARY) + " --profile=" + profile +
                                " --cluster=" + dir + "/clusters/" + cluster + ".pbtxt" + more +
                                " --costs=" + dir +
                                "/costs/nominal.pbtxt --table=false "
                                "--out=" +
                                out + " > " + log;
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    std::ifstream in(log);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  // 400 tensors of 1 KiB, each a round of its own unfused (the links' latency each): one group
  // of all of them is predicted several times faster, and the strategy lists it.
  const std::string printed = run("4x1gpu-1g");
  EXPECT_NE(printed.find("fusion: 400 tensors under 1048576 bytes in 1 groups: predicted"),
            std::string::npos)
      << printed;
  EXPECT_NE(printed.find("ms unfused: fused"), std::string::npos) << printed;
  proto::Strategy strategy;
  ASSERT_TRUE(ParseTextProtoFile(out, &strategy).ok());
  ASSERT_EQ(strategy.fusion_groups_size(), 1);
  EXPECT_EQ(strategy.fusion_groups(0).tensors_size(), 400);
  bool entry = false;  // the group is planned like a tensor: it has its entry
  for (const auto& t : strategy.tensors()) entry |= t.name_pattern() == "fused.0";
  EXPECT_TRUE(entry);
  // --evaluate of that strategy (in a run that fuses nothing itself), with the profile as it
  // was given, simulates its groups: the fused plan's prediction.
  const std::string saved = out + ".fused";
  ASSERT_EQ(std::rename(out.c_str(), saved.c_str()), 0);
  const std::string evaluated = run("4x1gpu-1g", " --evaluate=" + saved);
  const size_t at = printed.find("fusion: 400 tensors under 1048576 bytes in 1 groups: predicted ");
  ASSERT_NE(at, std::string::npos);
  const double fused_ms =
      std::strtod(printed.c_str() + printed.find("predicted ", at) + 10, nullptr);
  const size_t line = evaluated.find("evaluated " + saved + ": ");
  ASSERT_NE(line, std::string::npos) << evaluated;
  EXPECT_DOUBLE_EQ(
      std::strtod(evaluated.c_str() + line + std::string("evaluated " + saved + ": ").size(),
                  nullptr),
      fused_ms)
      << evaluated;
}

}  // namespace
}  // namespace bytecomp::planner
