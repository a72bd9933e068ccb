// The timeline writer: every recorded event reaches the file as valid Chrome trace JSON (per
// thread, in order), a full ring drops and counts instead of blocking, and the clock offset is
// written where bytecomp-timeline merge reads it.
#include "bytecomp/telemetry/timeline.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace bytecomp::telemetry {
namespace {

std::string TempPath(const std::string& name) {
  return std::string(::testing::TempDir()) + "/" + name + "-" + std::to_string(getpid());
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(TimelineTest, EveryEventOfEveryThreadIsWrittenWithItsArgs) {
  const std::string path = TempPath("timeline-threads.json");
  {
    auto timeline = Timeline::Open(path, "worker 3");
    ASSERT_TRUE(timeline.ok()) << timeline.status();
    (*timeline)->NameTensor(7, "layer\"1\".weight");
    const uint16_t topk = (*timeline)->CodecId("topk");
    EXPECT_EQ((*timeline)->CodecId("topk"), topk);
    EXPECT_EQ((*timeline)->CodecId(""), 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 1000; ++i) {
          TimelineEvent e;
          e.start_us = 1000000 + i;
          e.duration_us = t % 2 == 0 ? 5 : -1;
          e.tensor_id = 7;
          e.partition = static_cast<uint32_t>(t);
          e.round = static_cast<uint64_t>(i);
          e.bytes = 4096;
          e.codec = topk;
          e.stage = t % 2 == 0 ? Stage::kEncode : Stage::kPushSent;
          (*timeline)->Record(e);
          if (i % 100 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      });
    }
    for (auto& t : threads) t.join();
    (*timeline)->SetClockOffsetUs(-1234);
    EXPECT_EQ((*timeline)->dropped_events(), 0);
  }
  const std::string text = ReadFile(path);
  EXPECT_EQ(Count(text, "\"name\":\"encode\""), 2000);
  EXPECT_EQ(Count(text, "\"name\":\"push sent\""), 2000);
  EXPECT_EQ(Count(text, "\"ph\":\"X\",\"dur\":5"), 2000);
  EXPECT_EQ(Count(text, "\"ph\":\"i\""), 2000);
  EXPECT_EQ(Count(text, "\"tensor\":\"layer\\\"1\\\".weight\""), 4000);
  EXPECT_EQ(Count(text, "\"codec\":\"topk\""), 4000);
  EXPECT_NE(
      text.find(
          "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"worker 3\"}}"),
      std::string::npos);
  EXPECT_NE(
      text.find(
          "{\"name\":\"clock_offset\",\"ph\":\"M\",\"pid\":0,\"args\":{\"offset_us\":-1234}}"),
      std::string::npos);
  EXPECT_NE(text.find("\"otherData\":{\"process\":\"worker 3\",\"clock_offset_us\":-1234,"
                      "\"dropped_events\":0}}"),
            std::string::npos);
  // The file is one JSON object: it starts and ends as one.
  EXPECT_EQ(text.rfind("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", 0), 0u);
  EXPECT_EQ(text.substr(text.size() - 3), "}}\n");
}

TEST(TimelineTest, AsyncStagesAreWrittenAsBeginEndPairs) {
  const std::string path = TempPath("timeline-async.json");
  {
    auto timeline = Timeline::Open(path, "server 0");
    ASSERT_TRUE(timeline.ok());
    TimelineEvent e;
    e.start_us = 500;
    e.duration_us = 250;
    e.tensor_id = 2;
    e.partition = 1;
    e.round = 9;
    e.stage = Stage::kSummed;
    (*timeline)->Record(e);
  }
  const std::string text = ReadFile(path);
  EXPECT_NE(text.find("\"ph\":\"b\",\"id\":\"2.1.9\",\"pid\":0,\"tid\":1,\"ts\":500"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\"ph\":\"e\",\"id\":\"2.1.9\",\"pid\":0,\"tid\":1,\"ts\":750"),
            std::string::npos)
      << text;
}

TEST(TimelineTest, AFullRingDropsAndCountsInsteadOfWaiting) {
  const std::string path = TempPath("timeline-full.json");
  int64_t dropped = 0;
  constexpr int kEvents = 200000;
  {
    auto timeline = Timeline::Open(path, "worker 0");
    ASSERT_TRUE(timeline.ok());
    TimelineEvent e;
    e.stage = Stage::kReady;
    for (int i = 0; i < kEvents; ++i) (*timeline)->Record(e);  // faster than 50 ms flushes
    dropped = (*timeline)->dropped_events();
  }
  const std::string text = ReadFile(path);
  EXPECT_GT(dropped, 0);
  EXPECT_EQ(Count(text, "\"name\":\"ready\"") + dropped, kEvents);
  EXPECT_NE(text.find("\"dropped_events\":" + std::to_string(dropped)), std::string::npos);
}

TEST(TimelineTest, AnUnwritablePathIsAnErrorNamingIt) {
  auto timeline = Timeline::Open("/nonexistent-dir/x/worker-0.json", "worker 0");
  ASSERT_FALSE(timeline.ok());
  EXPECT_NE(timeline.status().message().find("/nonexistent-dir/x/worker-0.json"),
            std::string::npos);
}

TEST(TimelineTest, PathComesFromTheEnvironmentBeforeTheConfig) {
  unsetenv("BYTECOMP_TIMELINE");
  EXPECT_EQ(TimelinePath("", "worker", 1), "");
  const std::string dir = TempPath("timeline-dir");
  EXPECT_EQ(TimelinePath(dir, "server", 2), dir + "/server-2.json");
  const std::string env = TempPath("timeline-env");
  setenv("BYTECOMP_TIMELINE", env.c_str(), 1);
  EXPECT_EQ(TimelinePath(dir, "worker", 0), env + "/worker-0.json");
  unsetenv("BYTECOMP_TIMELINE");
}

}  // namespace
}  // namespace bytecomp::telemetry
