#include <gtest/gtest.h>

#include "bytecomp/common.h"

namespace bytecomp {
namespace {

TEST(NetTest, ParseHostPort) {
  absl::StatusOr<HostPort> a = ParseHostPort("127.0.0.1:9000");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 9000);
  EXPECT_EQ(ParseHostPort("tcp://h:1")->host, "h");
  EXPECT_FALSE(ParseHostPort("127.0.0.1").ok());
  EXPECT_FALSE(ParseHostPort("h:0").ok());
  EXPECT_FALSE(ParseHostPort("h:70000").ok());
  EXPECT_FALSE(ParseHostPort(":80").ok());
}

TEST(NetTest, LocalAddressTowardLoopbackIsLoopback) {
  absl::StatusOr<std::string> a = LocalAddressToward("127.0.0.1");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, "127.0.0.1");
}

}  // namespace
}  // namespace bytecomp
