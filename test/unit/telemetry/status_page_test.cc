// The scheduler's status page from a JobStatus fed as the scheduler feeds it: nodes and their
// health, the strategy per tensor, bytes and ratio, the round chart, the prediction.
#include "bytecomp/scheduler/status/status_page.h"
#include "bytecomp/scheduler/status/job_status.h"

#include "gtest/gtest.h"

namespace bytecomp::status {
namespace {

proto::StatsReport Report(int64_t pushed_per_round, double base_ms) {
  proto::StatsReport r;
  proto::TensorStats* big = r.add_tensors();
  big->set_name("fc.weight");
  big->set_rounds(10);
  big->set_raw_bytes(10 * 4000000);
  big->set_pushed_bytes(10 * pushed_per_round);
  big->set_last_round_ms(base_ms);
  proto::TensorStats* small = r.add_tensors();
  small->set_name("fc.bias<script>");
  small->set_rounds(10);
  small->set_raw_bytes(10 * 400);
  small->set_pushed_bytes(10 * 400);
  for (int i = 0; i < 5; ++i) {
    r.add_round_index(static_cast<uint64_t>(i));
    r.add_round_ms(base_ms + i);
    r.add_iteration_ms(base_ms + 10);
  }
  r.set_pushed_bytes(10 * pushed_per_round + 4000);
  return r;
}

proto::Strategy TopKStrategy() {
  proto::Strategy s;
  s.set_version(2);
  proto::TensorStrategy* t = s.add_tensors();
  t->set_name_pattern("fc.*");
  t->mutable_push_codec()->set_name("topk");
  t->mutable_pull_codec()->set_name("fp16");
  t->set_compress_on(proto::PLACEMENT_CPU_POOL);
  return s;
}

TEST(StatusPageTest, ShowsNodesStrategyBytesRoundsAndPrediction) {
  JobStatus job(/*workers=*/2, /*servers=*/1, /*heartbeat_timeout_ms=*/2000, /*start_ms=*/0,
                /*keyed=*/false);
  std::vector<NodeView> nodes = {{"worker 0", "worker", 0, "h0", 11, ""},
                                 {"worker 1", "worker", 1, "h1", 12, ""},
                                 {"server 0", "server", 0, "h2", 13, "tcp://10.0.0.1:9"}};
  job.Seen("worker 0", 9800);
  job.Seen("worker 1", 8500);  // 1.5 s ago: late (over half the timeout)
  job.Seen("server 0", 7000);  // 3 s ago: silent
  job.Stats(0, Report(1000000, 20));
  job.Stats(1, Report(1000000, 30));
  job.Stats(7, Report(1, 1));  // not a worker of this job: ignored
  const StatusSnapshot s = job.Snapshot(nodes, TopKStrategy(), "strategy.pbtxt", 36000.0, 3, 10000);
  EXPECT_EQ(s.nodes[0].state, "ok");
  EXPECT_EQ(s.nodes[1].state, "late");
  EXPECT_EQ(s.nodes[2].state, "silent");
  ASSERT_EQ(s.tensors.size(), 2u);
  EXPECT_EQ(s.tensors[0].rounds, 20);
  EXPECT_DOUBLE_EQ(s.tensors[0].ratio, 4.0);
  EXPECT_EQ(s.tensors[0].codec, "topk");
  EXPECT_EQ(s.tensors[0].pull_codec, "fp16");
  EXPECT_EQ(s.tensors[0].compress_on, "cpu pool");
  EXPECT_EQ(s.tensors[1].codec, "none");  // under min_compress_bytes
  ASSERT_EQ(s.rounds.size(), 5u);
  EXPECT_DOUBLE_EQ(s.rounds[4].second, 34);  // the slowest worker
  EXPECT_DOUBLE_EQ(s.measured_round_ms, 32);
  EXPECT_DOUBLE_EQ(s.measured_iteration_ms, 40);
  EXPECT_EQ(s.pushed_bytes, 2 * (10000000 + 4000));

  const std::string html = StatusPageHtml(s);
  EXPECT_NE(html.find("<td>server 0</td><td>h2</td>"), std::string::npos) << html;
  EXPECT_NE(html.find("badge silent"), std::string::npos);
  EXPECT_NE(html.find("<td>fc.weight</td><td>topk</td><td>two-way (fp16)</td><td>cpu pool</td>"
                      "<td>ps</td>"),
            std::string::npos)
      << html;
  EXPECT_EQ(html.find("unencrypted"), std::string::npos);  // no key: no warning
  EXPECT_NE(html.find("<td class=\"n\">4.00x</td>"), std::string::npos);
  EXPECT_NE(html.find("fc.bias&lt;script&gt;"), std::string::npos);  // escaped
  EXPECT_EQ(html.find("<script>"), std::string::npos);
  EXPECT_NE(html.find("<svg id=\"round-chart\""), std::string::npos);
  EXPECT_NE(html.find("predicted 36.0 ms"), std::string::npos);  // the dashed line's label
  EXPECT_NE(html.find("-10.0%"), std::string::npos);             // 36 ms against 40 ms
  EXPECT_EQ(html.find("http://"), std::string::npos);            // nothing from outside
  const std::string json = StatusJson(s);
  EXPECT_NE(json.find("\"name\":\"fc.weight\",\"codec\":\"topk\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"predicted_ms\":36"), std::string::npos) << json;
}

// A keyed job whose strategy sums some tensors by gloo's allreduce (allowed): the page warns and
// names exactly those, the table marks them, the JSON says so per tensor.
TEST(StatusPageTest, AKeyedJobNamesTheTensorsThatTravelUnencrypted) {
  JobStatus job(2, 1, 2000, 0, /*keyed=*/true);
  proto::Strategy strategy = TopKStrategy();
  strategy.set_allow_unencrypted_collectives(true);
  proto::TensorStrategy* ar = strategy.mutable_tensors()->Add();
  ar->set_name_pattern("fc.weight");
  ar->set_scheme(proto::SCHEME_ALLREDUCE);
  strategy.mutable_tensors()->SwapElements(0, 1);  // the exact name first: it wins
  job.Stats(0, Report(4000000, 20));
  const StatusSnapshot s = job.Snapshot({}, strategy, "strategy.pbtxt", std::nullopt, 0, 1000);
  ASSERT_EQ(s.tensors.size(), 2u);
  EXPECT_EQ(s.tensors[0].scheme, "allreduce");
  EXPECT_TRUE(s.tensors[0].unencrypted);
  EXPECT_EQ(s.tensors[1].scheme, "ps");
  EXPECT_FALSE(s.tensors[1].unencrypted);
  const std::string html = StatusPageHtml(s);
  EXPECT_NE(html.find("<p class=\"warn\" id=\"unencrypted\"><b>1 tensor travels unencrypted</b>"),
            std::string::npos)
      << html;
  EXPECT_NE(html.find("allow_unencrypted_collectives): fc.weight</p>"), std::string::npos) << html;
  EXPECT_NE(html.find("<td>allreduce (unencrypted)</td>"), std::string::npos) << html;
  const std::string json = StatusJson(s);
  EXPECT_NE(json.find("\"keyed\":true"), std::string::npos) << json;
  EXPECT_NE(json.find("\"scheme\":\"allreduce\",\"unencrypted\":true"), std::string::npos) << json;
  EXPECT_NE(json.find("\"scheme\":\"ps\",\"unencrypted\":false"), std::string::npos) << json;
}

TEST(StatusPageTest, OversizedReportsAreCutToTheBounds) {
  JobStatus job(1, 1, 2000, 0, /*keyed=*/false);
  proto::StatsReport r;
  for (int i = 0; i < 1000; ++i) r.add_tensors()->set_name("t" + std::to_string(i));
  for (int i = 0; i < 1000; ++i) {
    r.add_round_index(static_cast<uint64_t>(i));
    r.add_round_ms(1);
  }
  job.Stats(0, r);
  const StatusSnapshot s = job.Snapshot({}, proto::Strategy(), "none", std::nullopt, 0, 0);
  EXPECT_EQ(s.tensors.size(), static_cast<size_t>(JobStatus::kMaxTensors));
  EXPECT_EQ(s.rounds.size(), static_cast<size_t>(JobStatus::kMaxRounds));
  EXPECT_NE(StatusPageHtml(s).find("no plan"), std::string::npos);
}

}  // namespace
}  // namespace bytecomp::status
