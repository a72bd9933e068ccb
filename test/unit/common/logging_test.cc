// Log lines a person reads: level, ISO 8601 UTC time with milliseconds, the node, the message.
#include "bytecomp/common/logging.h"

#include <chrono>
#include <regex>
#include <string>

#include "gtest/gtest.h"

namespace bytecomp {
namespace {

std::chrono::system_clock::time_point AtMs(int64_t ms) {
  return std::chrono::system_clock::time_point(std::chrono::milliseconds(ms));
}

TEST(LoggingTest, TimestampsAreIso8601UtcWithMilliseconds) {
  EXPECT_EQ(Iso8601Utc(AtMs(0)), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(Iso8601Utc(AtMs(1779554322147)), "2026-05-23T16:38:42.147Z");
  EXPECT_EQ(Iso8601Utc(AtMs(951782400005)), "2000-02-29T00:00:00.005Z");  // leap day, 5 ms
}

TEST(LoggingTest, ALineCarriesLevelTimeNodeAndMessage) {
  SetLogIdentity("server 3");
  testing::internal::CaptureStderr();
  BC_LOG_WARNING("disk ", 97, "% full");
  const std::string line = testing::internal::GetCapturedStderr();
  SetLogIdentity("bytecomp");
  EXPECT_TRUE(std::regex_match(
      line, std::regex(R"(W \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \[server 3\] disk 97% full\n)")))
      << line;
}

}  // namespace
}  // namespace bytecomp
