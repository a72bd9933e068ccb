#include <gtest/gtest.h>

#include "bytecomp/common.h"

namespace bytecomp {
namespace {

TEST(ConfigTest, ParsesAndFillsDefaults) {
  proto::ClusterConfig c;
  ASSERT_TRUE(ParseTextProto("scheduler_address: \"10.0.0.1:7000\" num_workers: 4", "t.pbtxt", &c)
                  .ok());
  c = WithClusterDefaults(c);
  EXPECT_EQ(c.num_workers(), 4);
  EXPECT_EQ(c.num_servers(), 1);
  EXPECT_EQ(c.partition_bytes(), 4 << 20);
  EXPECT_EQ(c.connections_per_server(), 2);
  EXPECT_EQ(c.heartbeat_timeout_ms(), 5000);
  EXPECT_TRUE(ValidateClusterConfig(c).ok());
}

TEST(ConfigTest, UnknownFieldNamesFileLineAndField) {
  proto::ClusterConfig c;
  absl::Status s = ParseTextProto("num_workers: 2\nnum_wrkers: 3\n", "cluster.pbtxt", &c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cluster.pbtxt:2:"), std::string::npos) << s;
  EXPECT_NE(s.message().find("num_wrkers"), std::string::npos) << s;
}

TEST(ConfigTest, SyntaxErrorNamesLine) {
  proto::ClusterConfig c;
  absl::Status s = ParseTextProto("num_workers: 2\n\nnum_servers: \"two\"\n", "c.pbtxt", &c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("c.pbtxt:3:"), std::string::npos) << s;
}

TEST(ConfigTest, ValidationListsEveryProblem) {
  proto::ClusterConfig c = WithClusterDefaults({});
  c.set_scheduler_address("nohost");
  c.set_connections_per_server(100);
  absl::Status s = ValidateClusterConfig(c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("scheduler_address 'nohost'"), std::string::npos) << s;
  EXPECT_NE(s.message().find("connections_per_server"), std::string::npos) << s;
}

TEST(ConfigTest, MissingFileIsNamed) {
  absl::StatusOr<proto::ClusterConfig> c = LoadClusterConfig("/nonexistent/x.pbtxt");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("/nonexistent/x.pbtxt"), std::string::npos);
}

}  // namespace
}  // namespace bytecomp
