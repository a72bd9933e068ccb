// Log lines a person reads (level, ISO 8601 UTC time with milliseconds, the node, the message),
// and libprotobuf's own lines, bounded whatever a peer sends.
#include "bytecomp/common/logging.h"

#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <string>

#include "data.pb.h"

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

// A DataHeader whose codec (field 4, a proto3 string) is not UTF-8: libprotobuf refuses it
// and logs one line each time, as for any such message from a peer.
const std::string kNotUtf8Header("\x22\x02\xff\xfe", 4);

TEST(RouteProtobufLogs, BoundsTheLinesAPeerCanCause) {
  RouteProtobufLogs();
  const int64_t before = ProtobufLogLines();
  constexpr int kMessages = 2500;
  testing::internal::CaptureStderr();
  for (int i = 0; i < kMessages; ++i) {
    proto::DataHeader header;
    EXPECT_FALSE(header.ParseFromString(kNotUtf8Header));
  }
  const std::string printed = testing::internal::GetCapturedStderr();
  const int64_t after = ProtobufLogLines();
  EXPECT_EQ(after - before, kMessages);
  int64_t expected = 0;
  for (int64_t n = before + 1; n <= after; ++n) expected += (n <= 20 || n % 1000 == 0) ? 1 : 0;
  int64_t lines = 0;
  for (size_t at = printed.find("invalid UTF-8"); at != std::string::npos;
       at = printed.find("invalid UTF-8", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, expected) << printed.substr(0, 2000);
  EXPECT_LE(lines, 23);
}

}  // namespace
}  // namespace bytecomp
