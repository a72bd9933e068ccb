#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "bytecomp/common.h"

namespace bytecomp {
namespace {

TEST(ConfigTest, ParsesAndFillsDefaults) {
  proto::ClusterConfig c;
  ASSERT_TRUE(
      ParseTextProto("scheduler_address: \"10.0.0.1:7000\" num_workers: 4", "t.pbtxt", &c).ok());
  c = WithClusterDefaults(c);
  EXPECT_EQ(c.num_workers(), 4);
  EXPECT_EQ(c.num_servers(), 1);
  EXPECT_EQ(c.partition_bytes(), 4 << 20);
  EXPECT_EQ(c.connections_per_server(), 2);
  EXPECT_EQ(c.heartbeat_timeout_ms(), 5000);
  EXPECT_TRUE(ValidateClusterConfig(c).ok());
}

TEST(ConfigTest, KeyShardThreadsFirstNameIsStillRead) {
  const std::string path = ::testing::TempDir() + "/config_test_first_name.pbtxt";
  std::ofstream(path) << "server_engine_threads: 5\n";
  absl::StatusOr<proto::ClusterConfig> c = LoadClusterConfig(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->key_shard_threads(), 5);
  std::ofstream(path) << "server_engine_threads: 5\nkey_shard_threads: 3\n";
  c = LoadClusterConfig(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->key_shard_threads(), 3);  // the new name wins
  EXPECT_EQ(WithClusterDefaults({}).key_shard_threads(), 2);
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

// 2 x 2147483647 must not wrap around to a negative number that any timeout exceeds.
TEST(ConfigTest, TimeoutRelationsAreCheckedWithoutOverflow) {
  proto::ClusterConfig c = WithClusterDefaults({});
  c.set_heartbeat_interval_ms(2147483647);
  c.set_heartbeat_timeout_ms(1000);
  absl::Status s = ValidateClusterConfig(c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("heartbeat_timeout_ms must be >= 2 x heartbeat_interval_ms "
                             "(4294967294), got 1000"),
            std::string::npos)
      << s;
  c = WithClusterDefaults({});
  c.set_max_tensors(1 << 24);
  c.set_max_tensor_name_bytes(65536);
  s = ValidateClusterConfig(c);
  EXPECT_NE(s.message().find("max_tensors x (max_tensor_name_bytes + 64) must be at most 1 GiB"),
            std::string::npos)
      << s;
  EXPECT_EQ(SchedulerTimeoutMs(WithClusterDefaults({})), 5000) << "the heartbeat timeout";
}

class ConfigFileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& text) {
    const std::string path = ::testing::TempDir() + "/cluster_config_test.pbtxt";
    std::ofstream(path) << text;
    return path;
  }
  void TearDown() override {
    for (const char* v :
         {"BYTECOMP_NUM_WORKERS", "BYTECOMP_CONNECTIONS_PER_SERVER", "BYTECOMP_PARTITION_BYTES"}) {
      unsetenv(v);
    }
  }
  // The error of loading and validating `path` with the environment as set.
  std::string Error(const std::string& path) {
    ConfigOrigins origins;
    absl::StatusOr<proto::ClusterConfig> c = LoadClusterConfig(path, &origins);
    if (!c.ok()) return std::string(c.status().message());
    absl::Status s = ValidateClusterConfig(*c, &origins);
    return s.ok() ? "ok" : std::string(s.message());
  }
};

// A value out of range after parsing names the file, the line and the field.
TEST_F(ConfigFileTest, RangeErrorsNameFileLineAndField) {
  const std::string path = Write("num_workers: 2\n\n  partition_bytes: -4096\n");
  EXPECT_EQ(Error(path), "invalid cluster config: " + path +
                             ":3:3: partition_bytes must be in [64, 1073741824], got -4096");
}

// The environment: a value that does not fit its field, or is out of range, names the variable.
TEST_F(ConfigFileTest, EnvironmentValuesOutOfRangeNameTheVariable) {
  setenv("BYTECOMP_NUM_WORKERS", "4294967298", 1);
  EXPECT_EQ(Error(""),
            "environment variable BYTECOMP_NUM_WORKERS='4294967298' is out of range for "
            "num_workers (1 .. 2147483647)");
  unsetenv("BYTECOMP_NUM_WORKERS");
  // 0 means "the default" in a file; a variable says that by being unset.
  setenv("BYTECOMP_PUSH_PULL_TIMEOUT_MS", "0", 1);
  EXPECT_EQ(Error(""),
            "environment variable BYTECOMP_PUSH_PULL_TIMEOUT_MS='0': push_pull_timeout_ms must "
            "be at least 1 (unset the variable for the default)");
  unsetenv("BYTECOMP_PUSH_PULL_TIMEOUT_MS");
  setenv("BYTECOMP_CONNECTIONS_PER_SERVER", "100", 1);
  EXPECT_EQ(Error(Write("connections_per_server: 4\n")),
            "invalid cluster config: BYTECOMP_CONNECTIONS_PER_SERVER='100': connections_per_server "
            "must be in [1, 64], got 100");
  setenv("BYTECOMP_PARTITION_BYTES", "lots", 1);
  EXPECT_EQ(Error(""),
            "environment variable BYTECOMP_PARTITION_BYTES='lots' is not an integer "
            "(partition_bytes)");
}

// A scheduler host that does not resolve is said at once, not after the connect timeout.
TEST(SchedulerClientTest, AnUnresolvableSchedulerHostIsReportedAtOnce) {
  proto::ClusterConfig config = WithClusterDefaults({});
  config.set_scheduler_address("no-such-host.invalid:9000");
  config.set_connect_timeout_ms(30000);
  zmq::context_t ctx(1);
  // Without a key a host off loopback is refused before it is resolved: allow_insecure.
  SocketSecurity security(ctx, std::nullopt, /*allow_insecure=*/true);
  SchedulerClient client(ctx, config, security);
  const int64_t start = MonotonicMs();
  absl::StatusOr<proto::Topology> t = client.Register(proto::ROLE_WORKER, -1, "");
  ASSERT_FALSE(t.ok());
  EXPECT_LT(MonotonicMs() - start, 10000);
  EXPECT_NE(t.status().message().find("scheduler host 'no-such-host.invalid' (scheduler_address "
                                      "no-such-host.invalid:9000, BYTECOMP_SCHEDULER or "
                                      "--scheduler) does not resolve"),
            std::string::npos)
      << t.status();
}

}  // namespace
}  // namespace bytecomp
