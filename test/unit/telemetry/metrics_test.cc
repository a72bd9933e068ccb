// NodeMetrics: counts by codec and direction, ratio, rounds, refusals and gauges appear in the
// text format with Prometheus's names and the node's labels.
#include "bytecomp/telemetry/metrics.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace bytecomp::telemetry {
namespace {

bool Has(const std::string& text, const std::string& line) {
  return text.find(line + "\n") != std::string::npos;
}

TEST(NodeMetricsTest, BytesByCodecAndDirectionFromManyThreads) {
  NodeMetrics m("worker", 3);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        m.CountBytes(Direction::kOut, "topk", 100, 400);
        m.CountBytes(Direction::kOut, "", 50, 50);
        m.CountBytes(Direction::kIn, "fp16", 200, 400);
      }
    });
  }
  for (auto& t : threads) t.join();
  const std::string text = m.Render();
  EXPECT_TRUE(Has(text,
                  "bytecomp_wire_bytes_total{rank=\"3\",role=\"worker\",codec=\"topk\",direction="
                  "\"out\"} 400000"))
      << text;
  EXPECT_TRUE(Has(text,
                  "bytecomp_raw_bytes_total{rank=\"3\",role=\"worker\",codec=\"topk\",direction="
                  "\"out\"} 1600000"))
      << text;
  EXPECT_TRUE(Has(text,
                  "bytecomp_wire_bytes_total{rank=\"3\",role=\"worker\",codec=\"none\",direction="
                  "\"out\"} 200000"))
      << text;
  EXPECT_TRUE(Has(
      text,
      "bytecomp_compression_ratio{rank=\"3\",role=\"worker\",codec=\"topk\",direction=\"out\"} 4"))
      << text;
  EXPECT_TRUE(Has(
      text,
      "bytecomp_compression_ratio{rank=\"3\",role=\"worker\",codec=\"fp16\",direction=\"in\"} 2"))
      << text;
  EXPECT_EQ(m.WireBytes(Direction::kOut), 600000);
  EXPECT_EQ(m.WireBytes(Direction::kIn), 800000);
  EXPECT_TRUE(Has(text, "# TYPE bytecomp_wire_bytes_total counter"));
}

TEST(NodeMetricsTest, RoundsRefusalsAndGaugesSetAtScrape) {
  NodeMetrics m("server", 1);
  m.CountRound(0.003);
  m.CountRound(0.5);
  m.CountRefused("malformed");
  m.CountRefused("malformed");
  m.CountRefused("bad probe");
  int scrapes = 0;
  prometheus::Gauge& depth =
      m.Gauge("bytecomp_queue_depth", "Requests waiting", {{"queue", "parked"}});
  m.OnScrape([&] { depth.Set(++scrapes * 10); });
  m.Render();
  const std::string text = m.Render();
  EXPECT_TRUE(Has(text, "bytecomp_rounds_total{rank=\"1\",role=\"server\"} 2")) << text;
  EXPECT_TRUE(Has(text, "bytecomp_round_duration_seconds_count{rank=\"1\",role=\"server\"} 2"))
      << text;
  EXPECT_TRUE(Has(
      text, "bytecomp_round_duration_seconds_bucket{rank=\"1\",role=\"server\",le=\"0.004\"} 1"))
      << text;
  EXPECT_TRUE(Has(
      text, "bytecomp_refused_requests_total{rank=\"1\",role=\"server\",reason=\"malformed\"} 2"))
      << text;
  EXPECT_TRUE(Has(
      text, "bytecomp_refused_requests_total{rank=\"1\",role=\"server\",reason=\"bad probe\"} 1"))
      << text;
  EXPECT_TRUE(Has(text, "bytecomp_queue_depth{rank=\"1\",role=\"server\",queue=\"parked\"} 20"))
      << text;
}

}  // namespace
}  // namespace bytecomp::telemetry
