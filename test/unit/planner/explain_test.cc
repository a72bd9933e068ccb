// The plan's explanation: why each tensor got its option, the predicted savings, the table,
// and the strategy file with the table as comments.
#include "bytecomp/planner/explain.h"

#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "planner_test_util.h"

namespace bytecomp::planner {
namespace {

// 2 CPU workers, 1 server at 1 Gbit/s; topk (with a residual) costs 10 us per MiB.
PlannerInputs Inputs() {
  PlannerInputs in;
  in.cluster = testing::Cluster(/*machines=*/2, /*servers=*/1, /*gbps=*/1);
  proto::CodecCost* topk = in.costs.add_codecs();
  topk->set_name("topk");
  (*topk->mutable_params())["ratio"] = "0.01";
  topk->set_memory("residual");
  topk->set_ratio(0.02);
  topk->set_reencodable(true);
  proto::DeviceCost* cpu = topk->add_costs();
  cpu->set_device(proto::DEVICE_CPU);
  for (auto* curve : {cpu->add_encode(), cpu->add_decode()}) {
    curve->set_bytes(1 << 20);
    curve->set_us(10);
  }
  // In backprop order: a bias under min_compress_bytes, a 4 MiB weight whose traffic ends
  // long before the next gradient (a communication bubble follows), then after 1 s of
  // compute a 64 MiB weight that the network makes the iteration wait for.
  auto add = [&](const std::string& name, int64_t elements, double gap_us) {
    proto::TensorProfile* t = in.profile.add_tensors();
    t->set_name(name);
    t->set_elements(elements);
    t->set_ready_gap_us(gap_us);
  };
  add("fc.bias", 1000, 0);
  add("fc.weight", 1 << 20, 10);
  add("conv.weight", 16 << 20, 1e6);
  return in;
}

TEST(ExplainTest, EveryTensorSaysWhyAndWhatItSaves) {
  auto problem = Prepare(Inputs());
  ASSERT_TRUE(problem.ok()) << problem.status();
  const PlanResult plan = PlanByteComp(*problem);
  const std::vector<TensorExplanation> why = ExplainPlan(*problem, plan.choice);
  ASSERT_EQ(why.size(), 3u);
  EXPECT_EQ(why[0].why, Why::kBelowMinBytes);
  EXPECT_EQ(why[1].why, Why::kBeforeBubble);
  ASSERT_EQ(why[2].why, Why::kCompressed);
  // Uncompressed, the 64 MiB of both workers cross the server's 1 Gbit/s link twice:
  // about 1.07 s each way, overlapped; compressed, a fiftieth of it.
  EXPECT_GT(why[2].saving_us, 0.9e6);
  TimelineSimulator sim(&problem->sim);
  std::vector<int> without = plan.choice;
  without[2] = problem->none_index[2];
  EXPECT_NEAR(why[2].saving_us, sim.Simulate(without) - plan.predicted_us, 1e-3);

  const std::string table = PlanTable(*problem, plan.choice, why, /*large_only=*/true);
  EXPECT_EQ(table.find("fc.bias"), std::string::npos) << table;
  EXPECT_NE(table.find("sent before a communication bubble"), std::string::npos) << table;
  EXPECT_NE(table.find("topk(CPU,"), std::string::npos) << table;
  EXPECT_NE(table.find("ratio=0.01 memory=residual"), std::string::npos) << table;
  EXPECT_NE(table.find("compensated"), std::string::npos) << table;
  EXPECT_NE(table.find("not listed, uncompressed: 1 under min_compress_bytes (65536 bytes)"),
            std::string::npos)
      << table;
}

TEST(ExplainTest, NoGainNamesTheOptionThatCameClosest) {
  PlannerInputs in = Inputs();
  // A codec slower than the link it saves: compressing costs more than it gains.
  in.costs.mutable_codecs(0)->mutable_costs(0)->mutable_encode(0)->set_us(1e6);
  auto problem = Prepare(in);
  ASSERT_TRUE(problem.ok());
  const PlanResult plan = PlanByteComp(*problem);
  const std::vector<TensorExplanation> why = ExplainPlan(*problem, plan.choice);
  ASSERT_EQ(why[2].why, Why::kNoGain);
  EXPECT_LT(why[2].saving_us, 0);
  ASSERT_GE(why[2].best_option, 0);
  const std::string table = PlanTable(*problem, plan.choice, why, true);
  EXPECT_NE(table.find("no option gains > 0.1% (best: topk(CPU,"), std::string::npos) << table;
  // No codec allowed at all: the reason says so.
  in.options.add_codecs("topk");
  in.options.set_max_loss(proto::LOSS_ROUNDING);
  auto none = Prepare(in);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(ExplainPlan(*none, PlanByteComp(*none).choice)[2].why, Why::kNoAllowedCodec);
}

TEST(ExplainTest, StrategyFileHasTheTableAsCommentsAndParsesBackToTheStrategy) {
  auto problem = Prepare(Inputs());
  ASSERT_TRUE(problem.ok());
  const PlanResult plan = PlanByteComp(*problem);
  const proto::Strategy strategy = ToStrategy(*problem, plan.choice);
  const std::string text =
      StrategyFileText(strategy, "Written by a test\nsecond line",
                       PlanTable(*problem, plan.choice, ExplainPlan(*problem, plan.choice), false));
  EXPECT_EQ(text.rfind("# Written by a test\n# second line\n#\n# #    tensor", 0), 0u) << text;
  proto::Strategy parsed;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &parsed));
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(parsed, strategy));
  EXPECT_EQ(parsed.tensors(2).push_codec().name(), "topk");
}

}  // namespace
}  // namespace bytecomp::planner
