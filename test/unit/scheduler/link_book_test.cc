// LinkBook (the workers' link probe reports) and --plan_links (ChooseLinks).
#include "bytecomp/scheduler/link_book.h"

#include <gtest/gtest.h>

#include "bytecomp/scheduler/auto_planner.h"

namespace bytecomp {
namespace {

proto::LinkProbeReport Report(std::vector<std::array<double, 3>> per_server) {
  proto::LinkProbeReport r;
  for (size_t s = 0; s < per_server.size(); ++s) {
    proto::LinkProbe* l = r.add_links();
    l->set_server(static_cast<int>(s));
    l->set_latency_us(per_server[s][0]);
    l->set_up_gbps(per_server[s][1]);
    l->set_down_gbps(per_server[s][2]);
    l->set_probe_bytes(1 << 20);
  }
  return r;
}

TEST(LinkBookTest, RowsAreInServerOrder) {
  LinkBook book;
  proto::LinkProbeReport r = Report({{100, 1, 1}, {200, 2, 2}});
  r.mutable_links()->SwapElements(0, 1);  // probed server 1 first
  book.Add(1, r, 1);
  const std::string table = book.Table();
  EXPECT_LT(table.find("       1      0        100.0"), table.find("       1      1        200.0"))
      << table;
}

TEST(LinkBookTest, CompleteOnceEveryWorkerReported) {
  LinkBook book;
  EXPECT_FALSE(book.Add(1, Report({{100, 1, 2}}), 2));
  EXPECT_FALSE(book.Add(1, Report({{100, 1, 2}}), 2));  // a repeat does not count twice
  EXPECT_TRUE(book.Add(0, Report({{100, 1, 2}}), 2));
  EXPECT_FALSE(book.Add(0, Report({{100, 1, 2}}), 2));  // only the first time
  EXPECT_EQ(book.size(), 2);
}

TEST(LinkBookTest, MediansOverWorkersAndServersSkipUnmeasuredValues) {
  LinkBook book;
  EXPECT_FALSE(book.Median().has_value());
  book.Add(0, Report({{100, 1.0, 2.0}, {300, 3.0, 4.0}}), 3);
  book.Add(1, Report({{200, 2.0, 3.0}, {0, 0, 0}}), 3);  // server 1 timed out
  proto::LinkProbeReport partial = Report({{150, 5.0, 0}});
  partial.set_elapsed_ms(5000);
  partial.mutable_links(0)->set_error("no reply before the time limit");
  book.Add(2, partial, 3);
  std::optional<MeasuredLinks> m = book.Median();
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->pairs, 3);  // pairs with all three values
  EXPECT_EQ(m->workers, 3);
  EXPECT_DOUBLE_EQ(m->latency_us, 200);  // of 100, 300, 200, 150
  EXPECT_DOUBLE_EQ(m->up_gbps, 3.0);     // of 1, 3, 2, 5
  EXPECT_DOUBLE_EQ(m->down_gbps, 3.0);   // of 2, 4, 3
  const std::string table = book.Table();
  EXPECT_NE(table.find("link probes of 3 workers"), std::string::npos) << table;
  EXPECT_NE(table.find("1048576-byte transfers"), std::string::npos) << table;
  EXPECT_NE(table.find("       0      1        300.0      3.000        4.000"), std::string::npos)
      << table;
  EXPECT_NE(table.find("incomplete: no reply before the time limit"), std::string::npos);
  EXPECT_NE(table.find("probing took 0.0 ms (worker 0) 0.0 ms (worker 1) 5000.0 ms (worker 2)"),
            std::string::npos)
      << table;
  // Server 0's median over workers: latency of 100, 200, 150; up of 1, 2, 5; down of 2, 3.
  EXPECT_NE(table.find("  median      0        150.0      2.000        3.000"), std::string::npos)
      << table;
}

proto::ClusterDescription FileCluster() {
  proto::ClusterDescription c;
  c.mutable_worker_link()->set_bandwidth_gbps(1);
  c.mutable_worker_link()->set_latency_us(50);
  c.mutable_server_link()->set_bandwidth_gbps(1);
  c.mutable_server_link()->set_latency_us(50);
  return c;
}

TEST(ChooseLinksTest, MeasuredValuesReplaceTheFilesUnlessFileIsAsked) {
  MeasuredLinks m;
  m.latency_us = 400;
  m.up_gbps = 0.9;
  m.down_gbps = 0.8;
  m.pairs = 2;
  m.workers = 2;
  proto::ClusterDescription c = FileCluster();
  const std::string used = ChooseLinks(PlanLinks::kMeasured, m, &c);
  EXPECT_DOUBLE_EQ(c.worker_link().bandwidth_gbps(), 0.8);  // the slower direction
  EXPECT_DOUBLE_EQ(c.server_link().bandwidth_gbps(), 0.8);
  EXPECT_DOUBLE_EQ(c.worker_link().latency_us(), 100);  // a quarter of the round trip each
  EXPECT_DOUBLE_EQ(c.server_link().latency_us(), 100);
  EXPECT_NE(used.find("links from the probes of 2 workers"), std::string::npos) << used;
  EXPECT_NE(used.find("instead of the --plan_cluster file's worker_link 1.000 Gbit/s, 50.0 us"),
            std::string::npos)
      << used;

  c = FileCluster();
  EXPECT_NE(ChooseLinks(PlanLinks::kFile, m, &c).find("(--plan_links=file)"), std::string::npos);
  EXPECT_DOUBLE_EQ(c.worker_link().bandwidth_gbps(), 1);
  EXPECT_DOUBLE_EQ(c.server_link().latency_us(), 50);

  c = FileCluster();
  EXPECT_NE(ChooseLinks(PlanLinks::kMeasured, std::nullopt, &c).find("no link probe measured"),
            std::string::npos);
  EXPECT_DOUBLE_EQ(c.worker_link().bandwidth_gbps(), 1);
}

TEST(ChooseLinksTest, FlagValues) {
  EXPECT_EQ(*ParsePlanLinks("measured"), PlanLinks::kMeasured);
  EXPECT_EQ(*ParsePlanLinks("file"), PlanLinks::kFile);
  EXPECT_EQ(ParsePlanLinks("probes").status().message(),
            "--plan_links='probes': expected 'measured' or 'file'");
}

}  // namespace
}  // namespace bytecomp
