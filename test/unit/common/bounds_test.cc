// The bounds every daemon keeps on what peers send: the refusal log's per-peer rate limit and
// line cuts, the declaration budget, and ZeroMQ's message size limit on a real socket.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "bytecomp/common.h"

namespace bytecomp {
namespace {

TEST(PrintableTest, CutsAndEscapesWhatAPeerSent) {
  EXPECT_EQ(Printable("plain text"), "plain text");
  EXPECT_EQ(Printable(std::string("a\nb\x01\xff", 5)), "a\\x0ab\\x01\\xff");
  EXPECT_EQ(Printable(std::string(1000, 'x'), 10), "xxxxxxxxxx ... (1000 bytes)");
}

TEST(RefusalLogTest, EachPeerLogsABurstThenOneLinePerInterval) {
  RefusalLog log(RefusalLogOptions{/*burst=*/3, /*interval_ms=*/1000, /*max_peers=*/8,
                                   /*max_line_bytes=*/64});
  int logged = 0;
  for (int i = 0; i < 1000; ++i) {
    if (log.Refuse("flooder", "garbage", 5000).has_value()) ++logged;
  }
  EXPECT_EQ(logged, 3);
  EXPECT_EQ(log.refused(), 1000u);
  EXPECT_EQ(log.suppressed(), 997u);
  // Another peer has its own budget.
  EXPECT_TRUE(log.Refuse("honest", "one mistake", 5000).has_value());
  // A second later the flooder may log one line, which says how many were held back.
  std::optional<std::string> next = log.Refuse("flooder", "garbage", 6000);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(*next, "garbage (refusal 1002; 997 lines from this peer not logged)");
  EXPECT_FALSE(log.Refuse("flooder", "garbage", 6001).has_value());
  // A long line is cut.
  std::optional<std::string> cut = log.Refuse("third", std::string(100000, 'z'), 6001);
  ASSERT_TRUE(cut.has_value());
  EXPECT_LT(cut->size(), 120u);
  EXPECT_EQ(log.Summary(), "refused 1004 messages from 3 peers (998 log lines held back)");
}

TEST(RefusalLogTest, ManyIdentitiesShareOneBudgetBeyondTheTable) {
  RefusalLog log(RefusalLogOptions{/*burst=*/1, /*interval_ms=*/1000, /*max_peers=*/4,
                                   /*max_line_bytes=*/64});
  int logged = 0;
  for (int i = 0; i < 10000; ++i) {
    if (log.Refuse(absl::StrCat("peer-", i), "x", 0).has_value()) ++logged;
  }
  EXPECT_LE(log.peers(), 4u);
  EXPECT_EQ(logged, 4) << "3 peers of their own and 1 line for all the others";
}

// 200 peers each within their own rate would log at 200 times it (a hostile-peer run: a
// sustained 45 KB/s of lines): the total is bounded too, and the next line says what was not
// logged.
TEST(RefusalLogTest, AllPeersTogetherLogABurstThenAFewLinesPerInterval) {
  RefusalLogOptions options;
  options.burst = 10;
  options.total_burst = 50;
  options.total_per_interval = 5;
  RefusalLog log(options);
  int logged = 0;
  for (int second = 0; second < 10; ++second) {
    for (int peer = 0; peer < 200; ++peer) {
      if (log.Refuse(absl::StrCat("peer-", peer), "junk", second * 1000).has_value()) ++logged;
    }
  }
  EXPECT_EQ(logged, 50 + 9 * 5);
  EXPECT_EQ(log.suppressed(), 2000u - logged);
  // Quiet for a while: the next line is logged and says what the total held back.
  std::optional<std::string> next = log.Refuse("peer-7", "junk", 60000);
  ASSERT_TRUE(next.has_value());
  EXPECT_TRUE(absl::StrContains(*next, "lines from all peers not logged")) << *next;
}

TEST(DeclarationBudgetTest, NamesCountsBytesAndPartitionsAreBounded) {
  proto::ClusterConfig config = WithClusterDefaults({});
  config.set_max_tensors(2);
  config.set_max_tensor_name_bytes(8);
  config.set_max_declared_bytes(1000);
  DeclarationBudget budget(config);
  EXPECT_TRUE(budget.CheckTensor("w", 100, proto::DTYPE_FLOAT32, 1).ok());
  EXPECT_EQ(budget.CheckName("").message(), "tensor name must not be empty");
  EXPECT_EQ(budget.CheckName("123456789").message(),
            "tensor name '123456789' is longer than the job's limit of 8 bytes "
            "(ClusterConfig.max_tensor_name_bytes)");
  // Elements x size must not overflow on the way to the check.
  EXPECT_TRUE(absl::IsResourceExhausted(
      budget.CheckTensor("big", int64_t{1} << 62, proto::DTYPE_FLOAT32, 1)));
  EXPECT_TRUE(absl::IsResourceExhausted(budget.CheckTensor("w", 251, proto::DTYPE_FLOAT32, 1)));
  budget.Take(250, proto::DTYPE_FLOAT32, 1);
  EXPECT_EQ(budget.bytes(), 1000);
  EXPECT_TRUE(absl::IsResourceExhausted(budget.CheckTensor("x", 1, proto::DTYPE_FLOAT16, 1)));
  proto::ClusterConfig roomy = WithClusterDefaults({});
  DeclarationBudget partitions(roomy);
  EXPECT_TRUE(absl::IsResourceExhausted(
      partitions.CheckTensor("p", 1 << 20, proto::DTYPE_FLOAT32, kMaxJobPartitions + 1)));
  EXPECT_TRUE(partitions.CheckTensor("p", 1 << 20, proto::DTYPE_FLOAT32, kMaxJobPartitions).ok());
}

// A peer that announces a frame above the limit is disconnected before its bytes are held;
// frames within it pass.
TEST(SocketLimitsTest, AFrameAboveTheLimitDropsTheConnection) {
  zmq::context_t ctx(1);
  zmq::socket_t server(ctx, zmq::socket_type::router);
  ConfigureSocket(server);
  SocketLimits limits;
  limits.max_message_bytes = 4096;
  LimitSocket(server, limits);
  absl::StatusOr<int> port = BindTcp(server, "127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.status();
  zmq::socket_t client(ctx, zmq::socket_type::dealer);
  ConfigureSocket(client);
  client.connect(TcpEndpoint("127.0.0.1", *port));
  std::vector<zmq::message_t> small;
  small.emplace_back(std::string(4096, 's'));
  ASSERT_TRUE(SendFrames(client, small).ok());
  absl::StatusOr<std::vector<zmq::message_t>> got = RecvFrames(server, std::chrono::seconds(5));
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[1].size(), 4096u);
  std::vector<zmq::message_t> big;
  big.emplace_back(std::string(4097, 'b'));
  ASSERT_TRUE(SendFrames(client, big).ok());
  got = RecvFrames(server, std::chrono::milliseconds(500));
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->empty()) << "a frame above the limit must not arrive";
}

TEST(SocketLimitsTest, ControlReportsFollowTheDeclarationLimits) {
  proto::ClusterConfig config = WithClusterDefaults({});
  EXPECT_EQ(SchedulerSocketLimits().max_message_bytes, kMaxControlFrameBytes);
  EXPECT_EQ(MaxControlReportBytes(config),
            (1 << 20) + int64_t{65536} * (1024 + 64) + 5 * kMaxJobPartitions + kMaxStrategyBytes);
  EXPECT_EQ(NodeControlSocketLimits().max_message_bytes, kMaxSchedulerMessageBytes);
  EXPECT_EQ(SchedulerSocketLimits().send_queue, kControlQueueMessages);
}

}  // namespace
}  // namespace bytecomp
