// The adaptive ratio without sockets: the policy's decisions against its thresholds and
// bounds, windows decided only once every worker reported them, stale and malformed reports
// dropped, and a change prepared and committed through StrategyControl like any update.
#include "bytecomp/scheduler/adaptive_ratio.h"

#include <gtest/gtest.h>

#include <fstream>

#include "bytecomp/compress/strategy.h"
#include "bytecomp/scheduler/strategy_control.h"
#include "google/protobuf/text_format.h"
#include "protocol_test_util.h"

namespace bytecomp {
namespace {

proto::AdaptiveRatio Config(double min_ratio, double max_ratio) {
  proto::AdaptiveRatio a;
  a.set_min_ratio(min_ratio);
  a.set_max_ratio(max_ratio);
  return compress::AdaptiveRatioWithDefaults(a);  // raise < 0.05, lower >= 0.5, share 0.1, x2
}

RatioWindow Window(double kept, double comm_us, double round_us) {
  RatioWindow w;
  w.kept_energy = kept;
  w.comm_us = comm_us;
  w.round_us = round_us;
  w.comm_share = comm_us / round_us;
  w.workers = 2;
  return w;
}

TEST(RatioPolicyTest, RaisesWhenTooLittleIsKeptAndLowersWhenCommunicationIsWorthCutting) {
  const proto::AdaptiveRatio c = Config(0.001, 0.1);
  auto raise = DecideRatio(c, 0.01, Window(0.02, 500, 1000));
  ASSERT_TRUE(raise.has_value());
  EXPECT_DOUBLE_EQ(raise->ratio, 0.02);
  EXPECT_NE(raise->reason.find("kept energy 0.020"), std::string::npos) << raise->reason;
  EXPECT_NE(raise->reason.find("below 0.050"), std::string::npos) << raise->reason;
  auto lower = DecideRatio(c, 0.01, Window(0.7, 300, 1000));
  ASSERT_TRUE(lower.has_value());
  EXPECT_DOUBLE_EQ(lower->ratio, 0.005);
  EXPECT_NE(lower->reason.find("communication 30.0% of the round"), std::string::npos)
      << lower->reason;
  // Kept enough, but communication is a small part of the round: no change.
  EXPECT_FALSE(DecideRatio(c, 0.01, Window(0.7, 50, 1000)).has_value());
  // Between the thresholds: no change.
  EXPECT_FALSE(DecideRatio(c, 0.01, Window(0.3, 900, 1000)).has_value());
  // Bounds: clamped, and no change at a bound.
  EXPECT_DOUBLE_EQ(DecideRatio(c, 0.08, Window(0.02, 500, 1000))->ratio, 0.1);
  EXPECT_FALSE(DecideRatio(c, 0.1, Window(0.02, 500, 1000)).has_value());
  EXPECT_DOUBLE_EQ(DecideRatio(c, 0.0015, Window(0.9, 900, 1000))->ratio, 0.001);
  EXPECT_FALSE(DecideRatio(c, 0.001, Window(0.9, 900, 1000)).has_value());
  // Not measured: no change.
  EXPECT_FALSE(DecideRatio(c, 0.01, Window(-1, 900, 1000)).has_value());
}

proto::Strategy AdaptiveStrategy(uint64_t version) {
  auto parsed = compress::ParseStrategy(
      "tensors {\n  name_pattern: \"grad/*\"\n"
      "  push_codec { name: \"artopk\" params { key: \"ratio\" value: \"0.01\" } memory: "
      "\"residual\" }\n"
      "  adaptive_ratio { min_ratio: 0.001 max_ratio: 0.1 window_rounds: 4 }\n}\n"
      "tensors {\n  name_pattern: \"*\"\n  push_codec { name: \"fp16\" }\n}\n",
      "test");
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  parsed->set_version(version);
  return *parsed;
}

proto::RatioReport Report(const std::string& tensor, uint64_t version, uint64_t window, double kept,
                          double comm_us = 600, double round_us = 1000) {
  proto::RatioReport r;
  r.set_tensor(tensor);
  r.set_strategy_version(version);
  r.set_window(window);
  r.set_rounds(4);
  r.set_comm_us(comm_us);
  r.set_round_us(round_us);
  r.set_kept_energy(kept);
  return r;
}

TEST(AdaptiveRatioControlTest, DecidesOnceEveryWorkerReportedTheWindow) {
  AdaptiveRatioControl control;
  const proto::Strategy s = AdaptiveStrategy(3);
  std::string dropped;
  EXPECT_FALSE(control.Add(0, Report("grad/w", 3, 5, 0.02), s, 2, &dropped).has_value());
  EXPECT_TRUE(dropped.empty()) << dropped;
  // Another window of the same tensor does not complete window 5.
  EXPECT_FALSE(control.Add(1, Report("grad/w", 3, 6, 0.02), s, 2, &dropped).has_value());
  auto change = control.Add(1, Report("grad/w", 3, 5, 0.04), s, 2, &dropped);
  ASSERT_TRUE(change.has_value());
  EXPECT_EQ(change->strategy.tensors(0).push_codec().params().at("ratio"), "0.02");
  EXPECT_EQ(change->strategy.tensors(1).push_codec().name(), "fp16");  // untouched
  EXPECT_NE(change->log.find("entry 'grad/*' (artopk) ratio 0.01 -> 0.02 after window 5 of "
                             "tensor 'grad/w' under version 3"),
            std::string::npos)
      << change->log;
  EXPECT_TRUE(compress::ValidateStrategy(change->strategy).ok());
}

TEST(AdaptiveRatioControlTest, DropsStaleForeignAndMalformedReports) {
  AdaptiveRatioControl control;
  const proto::Strategy s = AdaptiveStrategy(3);
  std::string dropped;
  EXPECT_FALSE(control.Add(0, Report("grad/w", 2, 5, 0.1), s, 1, &dropped).has_value());
  EXPECT_NE(dropped.find("strategy version 2, version 3 is in force"), std::string::npos)
      << dropped;
  EXPECT_FALSE(control.Add(0, Report("bias", 3, 5, 0.1), s, 1, &dropped).has_value());
  EXPECT_NE(dropped.find("does not adapt the ratio"), std::string::npos) << dropped;
  proto::RatioReport bad = Report("grad/w", 3, 5, 0.1);
  bad.set_comm_us(-1);
  EXPECT_FALSE(control.Add(0, bad, s, 1, &dropped).has_value());
  EXPECT_NE(dropped.find("out of range"), std::string::npos) << dropped;
  bad = Report("grad/w", 3, 5, 1.5);
  EXPECT_FALSE(control.Add(0, bad, s, 1, &dropped).has_value());
  EXPECT_FALSE(dropped.empty());
  // Between the thresholds: decided, no change.
  EXPECT_FALSE(control.Add(0, Report("grad/w", 3, 5, 0.3), s, 1, &dropped).has_value());
  EXPECT_TRUE(dropped.empty());
}

class AdaptiveRatioSwitchTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::RegisterAll(nodes_); }
  proto::ClusterConfig config_ = testing::JobConfig(2, 1);
  NodeTable nodes_{2, 1};
};

TEST_F(AdaptiveRatioSwitchTest, AChangeIsPreparedAndCommittedToEveryNode) {
  const std::string path = ::testing::TempDir() + "/adaptive_ratio_test.pbtxt";
  {
    proto::Strategy s = AdaptiveStrategy(1);
    std::string text;
    google::protobuf::TextFormat::PrintToString(s, &text);
    std::ofstream(path) << text;
  }
  StrategyKeeper keeper;
  ASSERT_TRUE(keeper.LoadInitial(path).ok());
  StrategyControl control(config_, nodes_, std::move(keeper), std::nullopt);
  const RegisteredNode& w0 = *nodes_.At(proto::ROLE_WORKER, 0);
  const RegisteredNode& w1 = *nodes_.At(proto::ROLE_WORKER, 1);
  Outbox out;
  control.HandleRatioReport(w0, Report("grad/w", 1, 2, 0.9), &out);
  EXPECT_TRUE(out.messages().empty());
  control.HandleRatioReport(w1, Report("grad/w", 1, 2, 0.8), &out);
  ASSERT_EQ(testing::Recipients(out),
            (std::vector<std::string>{testing::WorkerId(0), testing::WorkerId(1)}));
  EXPECT_EQ(out.messages()[0].message.strategy_prepare().version(), 2u);
  // While it is being switched to, reports decide nothing.
  Outbox during;
  control.HandleRatioReport(w0, Report("grad/w", 1, 3, 0.9), &during);
  control.HandleRatioReport(w1, Report("grad/w", 1, 3, 0.9), &during);
  EXPECT_TRUE(during.messages().empty());
  Outbox commit;
  proto::StrategyPrepareReply reply;
  reply.set_version(2);
  reply.set_highest_started_round(9);
  control.HandlePrepareReply(w0, reply, &commit);
  control.HandlePrepareReply(w1, reply, &commit);
  ASSERT_EQ(commit.messages().size(), 3u);  // the server, then both workers
  const proto::Strategy& s = commit.messages()[0].message.strategy_commit().strategy();
  EXPECT_EQ(s.version(), 2u);
  EXPECT_EQ(s.first_round(), 11u);
  EXPECT_EQ(s.tensors(0).push_codec().params().at("ratio"), "0.005");
  // A server's report is refused.
  Outbox refused;
  control.HandleRatioReport(*nodes_.At(proto::ROLE_SERVER, 0), Report("grad/w", 2, 9, 0.9),
                            &refused);
  EXPECT_EQ(
      testing::Only(refused, testing::ServerId(0), proto::ControlMessage::kError).error().message(),
      "RatioReport from server 0, which is not a worker");
}

}  // namespace
}  // namespace bytecomp
