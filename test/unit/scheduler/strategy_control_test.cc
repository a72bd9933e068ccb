// Strategy changes without sockets: reload (prepare, then commit to servers first), a bad file
// keeping the strategy in force, --strategy=auto's plan, and the workers' link probes.
#include "bytecomp/scheduler/strategy_control.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bytecomp/compress/strategy.h"
#include "protocol_test_util.h"

namespace bytecomp {
namespace {

using proto::ControlMessage;
using testing::Contains;
using testing::ServerId;
using testing::WorkerId;

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

proto::StrategyPrepareReply PrepareReply(uint64_t version, uint64_t highest_started_round) {
  proto::StrategyPrepareReply r;
  r.set_version(version);
  r.set_highest_started_round(highest_started_round);
  return r;
}

constexpr char kFp16Everywhere[] =
    "seed: 7\ntensors {\n  name_pattern: \"*\"\n  push_codec { name: \"fp16\" }\n"
    "  pull_codec { name: \"fp16\" }\n  force: true\n}\n";

class StrategyControlTest : public ::testing::Test {
 protected:
  // 3 workers, 2 servers; the strategy from `path` ("": none), --strategy=auto with `auto_plan`.
  void Start(const std::string& path, std::optional<AutoPlanInputs> auto_plan = std::nullopt) {
    StrategyKeeper keeper;
    ASSERT_TRUE(keeper.LoadInitial(path).ok());
    control_ =
        std::make_unique<StrategyControl>(config_, nodes_, std::move(keeper), std::move(auto_plan));
  }
  // --strategy=auto plans on a thread of its own; the scheduler's loop calls OnTime until the
  // plan is taken up. This does the same, for at most `limit` (then the test fails).
  void AwaitPlan(Outbox* out, absl::Duration limit = absl::Seconds(60)) {
    const absl::Time until = absl::Now() + limit;
    while (control_->NextCheckMs(0).has_value() && absl::Now() < until) {
      control_->OnTime(out);
      absl::SleepFor(absl::Milliseconds(1));
    }
    EXPECT_FALSE(control_->NextCheckMs(0).has_value()) << "no plan within " << limit;
  }
  const RegisteredNode& Worker(int rank) { return *nodes_.At(proto::ROLE_WORKER, rank); }
  const RegisteredNode& Server(int rank) { return *nodes_.At(proto::ROLE_SERVER, rank); }

  proto::ClusterConfig config_ = testing::JobConfig(3, 2);
  NodeTable nodes_{3, 2};
  std::unique_ptr<StrategyControl> control_;
  std::string path_ = ::testing::TempDir() + "/strategy_control_test.pbtxt";
  void SetUp() override { testing::RegisterAll(nodes_); }
};

TEST_F(StrategyControlTest, AReloadPreparesEveryWorkerAndCommitsToServersFirst) {
  WriteFile(path_, "seed: 7\n");
  Start(path_);
  EXPECT_EQ(control_->keeper().current().version(), 1u);
  WriteFile(path_, kFp16Everywhere);
  Outbox out;
  control_->Reload(&out);
  EXPECT_EQ(testing::Recipients(out),
            (std::vector<std::string>{WorkerId(0), WorkerId(1), WorkerId(2)}));
  for (const OutgoingControl& m : out.messages()) {
    EXPECT_EQ(m.message.strategy_prepare().version(), 2u);
  }
  // Not in force until every worker answered.
  Outbox replies;
  control_->HandlePrepareReply(Worker(0), PrepareReply(2, 10), &replies);
  control_->HandlePrepareReply(Worker(2), PrepareReply(2, 12), &replies);
  control_->HandlePrepareReply(Worker(1), PrepareReply(1, 30), &replies);  // another version
  EXPECT_TRUE(replies.messages().empty());
  EXPECT_EQ(control_->keeper().current().version(), 1u);
  control_->HandlePrepareReply(Worker(1), PrepareReply(2, 11), &replies);
  EXPECT_EQ(
      testing::Recipients(replies),
      (std::vector<std::string>{ServerId(0), ServerId(1), WorkerId(0), WorkerId(1), WorkerId(2)}));
  for (const OutgoingControl& m : replies.messages()) {
    const proto::Strategy& s = m.message.strategy_commit().strategy();
    EXPECT_EQ(s.version(), 2u);
    EXPECT_EQ(s.first_round(), 14u) << "the highest round started, plus 2";
    ASSERT_EQ(s.tensors_size(), 1);
    EXPECT_EQ(s.tensors(0).push_codec().name(), "fp16");
  }
  EXPECT_EQ(control_->keeper().current().version(), 2u);
}

TEST_F(StrategyControlTest, AFileThatDoesNotLoadKeepsTheStrategyInForce) {
  WriteFile(path_, "seed: 7\n");
  Start(path_);
  WriteFile(path_,
            "seed: 7\ntensors {\n  name_pattern: \"*\"\n  push_codec { name: \"fp61\" }\n}\n");
  Outbox out;
  control_->Reload(&out);
  EXPECT_TRUE(out.messages().empty());
  EXPECT_EQ(control_->keeper().current().version(), 1u);
  // Fixed, it loads as version 2: the failed reload took no version.
  WriteFile(path_, kFp16Everywhere);
  control_->Reload(&out);
  ASSERT_EQ(out.messages().size(), 3u);
  EXPECT_EQ(out.messages()[0].message.strategy_prepare().version(), 2u);
  // A second reload while the first is being switched to is refused, and changes nothing.
  Outbox again;
  control_->Reload(&again);
  EXPECT_TRUE(again.messages().empty());
}

TEST_F(StrategyControlTest, WithoutAFileThereIsNothingToReload) {
  Start("");
  Outbox out;
  control_->Reload(&out);
  EXPECT_TRUE(out.messages().empty());
  EXPECT_EQ(control_->keeper().current().version(), 1u);
}

TEST_F(StrategyControlTest, ServersMayNotAnswerPreparesOrReportLinks) {
  Start("");
  Outbox out;
  control_->HandlePrepareReply(Server(1), PrepareReply(2, 0), &out);
  EXPECT_EQ(testing::Only(out, ServerId(1), ControlMessage::kError).error().message(),
            "StrategyPrepareReply from server 1, which is not a worker");
  Outbox probe;
  control_->HandleLinkProbeReport(Server(0), proto::LinkProbeReport(), &probe);
  EXPECT_EQ(testing::Only(probe, ServerId(0), ControlMessage::kError).error().message(),
            "LinkProbeReport from server 0, which is not a worker");
  EXPECT_EQ(control_->links().size(), 0);
}

TEST_F(StrategyControlTest, KeepsTheWorkersLinkProbes) {
  Start("");
  proto::LinkProbeReport report;
  proto::LinkProbe* link = report.add_links();
  link->set_latency_us(80);
  link->set_up_gbps(1.5);
  link->set_down_gbps(2.5);
  Outbox out;
  control_->HandleLinkProbeReport(Worker(0), report, &out);
  EXPECT_EQ(control_->links().size(), 1);
  link->set_latency_us(120);
  control_->HandleLinkProbeReport(Worker(1), report, &out);
  control_->HandleLinkProbeReport(Worker(1), report, &out);  // a repeat replaces
  EXPECT_TRUE(out.messages().empty());
  ASSERT_EQ(control_->links().size(), 2);
  std::optional<MeasuredLinks> m = control_->links().Median();
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->pairs, 2);
  EXPECT_DOUBLE_EQ(m->latency_us, 120);
  EXPECT_DOUBLE_EQ(m->up_gbps, 1.5);
}

proto::ProfileReport Profile() {
  proto::ProfileReport report;
  proto::ModelProfile* p = report.mutable_profile();
  p->set_model("one tensor");
  auto* t = p->add_tensors();
  t->set_name("w");
  t->set_elements(1'000'000);
  p->set_measured_round_us(10'000);
  return report;
}

TEST_F(StrategyControlTest, AutoPlansOnceEveryWorkerReportedItsProfileAndPreparesThePlan) {
  AutoPlanInputs inputs;
  inputs.cluster.set_machines(3);
  inputs.cluster.mutable_worker_link()->set_bandwidth_gbps(10);
  inputs.cluster.mutable_server_link()->set_bandwidth_gbps(10);
  inputs.links = PlanLinks::kFile;
  Start("", inputs);
  Outbox out;
  control_->HandleProfileReport(Worker(0), Profile(), &out);
  control_->HandleProfileReport(Worker(0), Profile(), &out);  // a repeat counts once
  control_->HandleProfileReport(Server(0), Profile(), &out);  // ignored
  control_->HandleProfileReport(Worker(2), Profile(), &out);
  EXPECT_TRUE(out.messages().empty());
  control_->HandleProfileReport(Worker(1), Profile(), &out);
  // Planning: on its own thread, the caller's (the scheduler's loop) is not held.
  EXPECT_TRUE(out.messages().empty());
  EXPECT_EQ(control_->NextCheckMs(1000), 1010);
  AwaitPlan(&out);
  EXPECT_EQ(testing::Recipients(out),
            (std::vector<std::string>{WorkerId(0), WorkerId(1), WorkerId(2)}));
  EXPECT_EQ(out.messages()[0].message.strategy_prepare().version(), 2u);
  // Planned once: later reports change nothing.
  Outbox later;
  control_->HandleProfileReport(Worker(1), Profile(), &later);
  EXPECT_TRUE(later.messages().empty());
}

// A 100 MB tensor on 1 Gbit/s links with topk: the plan compresses it.
AutoPlanInputs SlowLinksWithTopk(const std::string& plan_out) {
  AutoPlanInputs inputs;
  inputs.cluster.set_machines(3);
  inputs.cluster.mutable_worker_link()->set_bandwidth_gbps(1);
  inputs.cluster.mutable_server_link()->set_bandwidth_gbps(1);
  proto::CodecCost* topk = inputs.costs.add_codecs();
  topk->set_name("topk");
  (*topk->mutable_params())["ratio"] = "0.01";
  topk->set_memory("residual");
  topk->set_ratio(0.0132);
  topk->set_reencodable(true);
  proto::DeviceCost* cpu = topk->add_costs();
  cpu->set_device(proto::DEVICE_CPU);
  for (auto* curve : {cpu->add_encode(), cpu->add_decode()}) {
    curve->set_bytes(1 << 20);
    curve->set_us(100);
  }
  inputs.links = PlanLinks::kFile;
  inputs.plan_out = plan_out;
  return inputs;
}

TEST_F(StrategyControlTest, AutoWritesTheCommittedStrategyWithItsReasonsAsComments) {
  const std::string plan_out = ::testing::TempDir() + "/auto_plan_test.pbtxt";
  std::remove(plan_out.c_str());
  Start("", SlowLinksWithTopk(plan_out));
  proto::ProfileReport report = Profile();
  report.mutable_profile()->mutable_tensors(0)->set_elements(25'000'000);
  Outbox out;
  for (int w = 0; w < 3; ++w) control_->HandleProfileReport(Worker(w), report, &out);
  AwaitPlan(&out);
  ASSERT_EQ(out.messages().size(), 3u);
  // Written when every node gets it: not at the prepare, which may still fail.
  EXPECT_FALSE(std::ifstream(plan_out).good());
  Outbox commits;
  for (int w = 0; w < 3; ++w) control_->HandlePrepareReply(Worker(w), PrepareReply(2, 4), &commits);
  ASSERT_EQ(commits.messages().size(), 5u);
  const proto::Strategy& sent = commits.messages()[0].message.strategy_commit().strategy();
  ASSERT_EQ(sent.tensors_size(), 1);
  EXPECT_EQ(sent.tensors(0).push_codec().name(), "topk");
  // The file is the strategy every node runs, as they got it.
  std::ifstream file(plan_out);
  ASSERT_TRUE(file.good()) << plan_out;
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  absl::StatusOr<proto::Strategy> parsed = compress::ParseStrategy(text, plan_out);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->SerializeAsString(), sent.SerializeAsString()) << text;
  EXPECT_EQ(parsed->version(), 2u);
  EXPECT_EQ(parsed->first_round(), 6u);
  // With what was chosen and why, as comments.
  EXPECT_TRUE(Contains(text, "# Written by bytecomp-scheduler --strategy=auto")) << text;
  EXPECT_TRUE(Contains(text, "version 2 from round 6 on (3 workers, 2 servers)")) << text;
  EXPECT_TRUE(Contains(text, "--strategy=" + plan_out)) << text;
  EXPECT_TRUE(Contains(text, "# 0    w ")) << text;
  EXPECT_TRUE(Contains(text, "ratio=0.01 memory=residual compensated")) << text;
  EXPECT_FALSE(Contains(text, "not considered")) << "no codec was left out here:\n" << text;
}

TEST_F(StrategyControlTest, APlanComputedWhileAReloadIsUnderWayWaitsForItsCommit) {
  WriteFile(path_, "seed: 7\n");
  AutoPlanInputs inputs = SlowLinksWithTopk("");
  Start(path_, inputs);
  proto::ProfileReport report = Profile();
  report.mutable_profile()->mutable_tensors(0)->set_elements(25'000'000);
  Outbox out;
  for (int w = 0; w < 3; ++w) control_->HandleProfileReport(Worker(w), report, &out);
  WriteFile(path_, kFp16Everywhere);
  control_->Reload(&out);  // begun while the plan is computed
  ASSERT_EQ(out.messages().size(), 3u);
  EXPECT_EQ(out.messages()[0].message.strategy_prepare().version(), 2u);
  // The plan is done in well under a second (one tensor), and waits.
  const absl::Time until = absl::Now() + absl::Milliseconds(500);
  while (absl::Now() < until) {
    control_->OnTime(&out);
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(out.messages().size(), 3u);
  EXPECT_TRUE(control_->NextCheckMs(0).has_value());
  // The reload commits (version 2, fp16); then the plan is prepared as version 3.
  Outbox commits;
  for (int w = 0; w < 3; ++w) control_->HandlePrepareReply(Worker(w), PrepareReply(2, 4), &commits);
  EXPECT_EQ(control_->keeper().current().version(), 2u);
  Outbox planned;
  AwaitPlan(&planned);
  ASSERT_EQ(planned.messages().size(), 3u);
  EXPECT_EQ(planned.messages()[0].message.strategy_prepare().version(), 3u);
  Outbox plan_commits;
  for (int w = 0; w < 3; ++w) {
    control_->HandlePrepareReply(Worker(w), PrepareReply(3, 8), &plan_commits);
  }
  ASSERT_EQ(plan_commits.messages().size(), 5u);
  EXPECT_EQ(control_->keeper().current().tensors(0).push_codec().name(), "topk");
}

TEST_F(StrategyControlTest, WithoutAutoProfilesAreIgnored) {
  Start("");
  Outbox out;
  for (int w = 0; w < 3; ++w) control_->HandleProfileReport(Worker(w), Profile(), &out);
  EXPECT_TRUE(out.messages().empty());
  EXPECT_FALSE(control_->NextCheckMs(0).has_value());
  EXPECT_FALSE(control_->keeper().update_pending());
}

TEST(AutoPlanInputsTest, NeedsBothFiles) {
  absl::StatusOr<AutoPlanInputs> inputs =
      LoadAutoPlanInputs("", "costs.pbtxt", "", PlanLinks::kFile);
  ASSERT_FALSE(inputs.ok());
  EXPECT_TRUE(Contains(std::string(inputs.status().message()), "--plan_cluster"));
  inputs = LoadAutoPlanInputs("/nonexistent/cluster.pbtxt", "/nonexistent/costs.pbtxt", "",
                              PlanLinks::kFile);
  ASSERT_FALSE(inputs.ok());
  EXPECT_TRUE(Contains(std::string(inputs.status().message()), "/nonexistent/cluster.pbtxt"))
      << inputs.status();
}

}  // namespace
}  // namespace bytecomp
