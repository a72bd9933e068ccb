#include "bytecomp/common/logging.h"

#include <gtest/gtest.h>

#include <string>

#include "data.pb.h"

namespace bytecomp {
namespace {

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
