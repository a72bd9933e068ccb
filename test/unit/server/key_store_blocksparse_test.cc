// KeyStore with blocksparse: pulls carry the block-sparse sum of the pushes in worker-rank
// order, one-way and two-way (the same lossless codec), and a lossy two-way pull codec
// re-encodes the sum with it.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "bytecomp/common.h"
#include "bytecomp/compress.h"
#include "bytecomp/server/key_store.h"
#include "server_test_util.h"

namespace bytecomp::server {
namespace {

constexpr int64_t kElements = 1000;  // 4 blocks of 256, the last of 232
constexpr int kWorkers = 3;

// Every tensor pushed with blocksparse; pulled with `pull` (empty: one-way).
proto::Strategy BlocksparseStrategy(const std::string& pull, const std::string& pull_threshold) {
  proto::Strategy s = server_test::StrategyWith(1, "blocksparse", pull);
  if (!pull_threshold.empty()) {
    (*s.mutable_tensors(0)->mutable_pull_codec()->mutable_params())["threshold"] = pull_threshold;
  }
  return s;
}

// Worker w's gradient: block w and block 3 (the short one) non-zero.
std::vector<float> Gradient(int w) {
  std::vector<float> x(kElements, 0.0f);
  for (int i = 0; i < 256; ++i) x[256 * w + i] = 0.25f * static_cast<float>(w + 1) + 0.001f * i;
  x[999] = w == 1 ? 1e8f : 4.0f;  // arrival order 2, 0, 1 would give another fp32 sum
  return x;
}

struct Round {
  std::vector<float> rank_order_sum;  // what the pushes sum to in worker-rank order
  OutgoingReply reply;
};

Round PushAllThenPull(const proto::Strategy& strategy) {
  Catalog catalog{1};
  EXPECT_TRUE(catalog.AddTensor(server_test::DeclareTensor(kElements)).ok());
  EXPECT_TRUE(catalog.AddStrategy(strategy).ok());
  KeyStore store(/*my_rank=*/0, kWorkers, catalog);
  std::vector<OutgoingReply> out;
  Round result;
  result.rank_order_sum.assign(kElements, 0.0f);
  for (int w = 0; w < kWorkers; ++w) {
    const std::vector<float> x = Gradient(w);
    for (int64_t i = 0; i < kElements; ++i) result.rank_order_sum[i] += x[i];
  }
  for (int w : {2, 0, 1}) {
    proto::DataHeader h = server_test::Request(proto::OP_PUSH, w, 0, kElements);
    h.set_strategy_version(1);
    h.set_codec("blocksparse");
    store.Handle(server_test::Identity(w), h, server_test::Encode("blocksparse", Gradient(w), h),
                 &out);
  }
  proto::DataHeader pull = server_test::Request(proto::OP_PULL, 0, 0, kElements);
  pull.set_strategy_version(1);
  pull.set_codec("blocksparse");
  out.clear();
  store.Handle(server_test::Identity(0), pull, {}, &out);
  EXPECT_EQ(out.size(), 1u);
  if (!out.empty()) result.reply = std::move(out[0]);
  return result;
}

std::vector<float> Decoded(const OutgoingReply& reply, const compress::CodecParams& params = {}) {
  auto codec = compress::CreateCodec("blocksparse", params);
  EXPECT_TRUE(codec.ok());
  std::vector<float> out(kElements);
  const absl::Status s = (*codec)->Decode(
      absl::MakeConstSpan(static_cast<const uint8_t*>(reply.payload.data()), reply.payload.size()),
      {}, absl::MakeSpan(out));
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

bool SameBytes(const zmq::message_t& got, const zmq::message_t& want) {
  return got.size() == want.size() && std::memcmp(got.data(), want.data(), want.size()) == 0;
}

TEST(KeyStoreBlocksparseTest, OneWayPullsCarryTheBlockSparseSumInRankOrder) {
  volatile float big = 1e8f, four = 4.0f;  // the premise: order matters for element 999
  ASSERT_NE((four + big) + four, (four + four) + big);
  Round r = PushAllThenPull(BlocksparseStrategy("", ""));
  ASSERT_EQ(r.reply.header.op(), proto::OP_PULL_REPLY) << r.reply.header.error();
  EXPECT_EQ(r.reply.header.codec(), "blocksparse");
  // The four blocks, not 4000 bytes of fp32: 16 + a bitmap word + the values.
  EXPECT_EQ(r.reply.payload.size(), 16u + 4 + 4 * kElements);
  const std::vector<float> sum = Decoded(r.reply);
  EXPECT_EQ(std::memcmp(sum.data(), r.rank_order_sum.data(), 4 * kElements), 0);
  // The message is the one a worker would write for that sum.
  proto::DataHeader as_server = server_test::Request(proto::OP_PUSH, 0, 0, kElements);
  EXPECT_TRUE(SameBytes(r.reply.payload, server_test::Encode("blocksparse", sum, as_server)));
}

TEST(KeyStoreBlocksparseTest, OneWayPullOfFewBlocksIsSmall) {
  Catalog catalog{1};
  ASSERT_TRUE(catalog.AddTensor(server_test::DeclareTensor(1 << 20)).ok());
  ASSERT_TRUE(catalog.AddStrategy(BlocksparseStrategy("", "")).ok());
  KeyStore store(0, 2, catalog);
  std::vector<OutgoingReply> out;
  for (int w = 0; w < 2; ++w) {
    std::vector<float> x(1 << 20, 0.0f);
    x[12345 + w * 500000] = 1.0f;
    proto::DataHeader h = server_test::Request(proto::OP_PUSH, w, 0, 1 << 20);
    h.set_strategy_version(1);
    h.set_codec("blocksparse");
    store.Handle(server_test::Identity(w), h, server_test::Encode("blocksparse", x, h), &out);
  }
  out.clear();
  proto::DataHeader pull = server_test::Request(proto::OP_PULL, 1, 0, 1 << 20);
  pull.set_strategy_version(1);
  store.Handle(server_test::Identity(1), pull, {}, &out);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].header.op(), proto::OP_PULL_REPLY) << out[0].header.error();
  EXPECT_EQ(out[0].payload.size(), 16u + 2 * 4 + 2 * 256 * 4);  // two blocks, an index list
}

TEST(KeyStoreBlocksparseTest, TwoWayWithTheSameLosslessCodecAnswersTheSameBytes) {
  Round r = PushAllThenPull(BlocksparseStrategy("blocksparse", ""));
  ASSERT_EQ(r.reply.header.op(), proto::OP_PULL_REPLY) << r.reply.header.error();
  EXPECT_EQ(r.reply.header.codec(), "blocksparse");
  proto::DataHeader as_server = server_test::Request(proto::OP_PUSH, 0, 0, kElements);
  EXPECT_TRUE(
      SameBytes(r.reply.payload, server_test::Encode("blocksparse", r.rank_order_sum, as_server)));
}

TEST(KeyStoreBlocksparseTest, TwoWayWithAThresholdReencodesTheSum) {
  // Block 0 of the sum holds values up to 0.25 + 0.255: under 0.6, dropped by the pull codec.
  Round r = PushAllThenPull(BlocksparseStrategy("blocksparse", "0.6"));
  ASSERT_EQ(r.reply.header.op(), proto::OP_PULL_REPLY) << r.reply.header.error();
  EXPECT_EQ(r.reply.header.codec(), "blocksparse");
  const std::vector<float> sum = Decoded(r.reply, {{"threshold", "0.6"}});
  for (int i = 0; i < 256; ++i) EXPECT_EQ(sum[i], 0.0f) << i;
  for (int64_t i = 256; i < kElements; ++i) EXPECT_EQ(sum[i], r.rank_order_sum[i]) << i;
}

}  // namespace
}  // namespace bytecomp::server
