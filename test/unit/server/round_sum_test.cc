// RoundSum, one key's sum: raw fp32 summed in the first push's own buffer, fp16/bf16 (and a
// misaligned fp32 frame) summed in fp32, compressed pushes aggregated in worker-rank order of
// the pushers, two-way re-encoding with the server's error-feedback memory kept over the
// rounds of one strategy version, errors naming the worker, and a dropped round's buffers
// released.
#include "bytecomp/server/round_sum.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bytecomp/common.h"
#include "bytecomp/compress.h"
#include "server_test_util.h"

namespace bytecomp::server {
namespace {

using server_test::kN;

proto::DataHeader SumPush(int sender, uint64_t iteration, proto::DType dtype = proto::DTYPE_FLOAT32,
                          uint64_t version = 0, const std::string& codec = "") {
  proto::DataHeader h = server_test::Request(proto::OP_PUSH, sender, iteration, kN, dtype);
  h.set_strategy_version(version);
  h.set_codec(codec);
  return h;
}

std::vector<float> SumValues(const RoundResult& result, proto::DType dtype = proto::DTYPE_FLOAT32) {
  return server_test::ValuesOf(result.payload, dtype);
}

// A message's free function: counts the releases of its buffer.
void CountRelease(void*, void* hint) { ++*static_cast<int*>(hint); }

// (64 elements: ZeroMQ keeps a message of up to 33 bytes inside the message object itself.)
TEST(RoundSumTest, TheFirstFp32PushBecomesTheSum) {
  constexpr int kLong = 64;
  proto::DataHeader h = SumPush(0, 0);
  h.set_element_count(kLong);
  RoundSum sum;
  zmq::message_t first = server_test::Payload(std::vector<float>(kLong, 1), proto::DTYPE_FLOAT32);
  const void* buffer = first.data();
  sum.AddRaw(h, std::move(first), /*first=*/true);
  sum.AddRaw(h, server_test::Payload(std::vector<float>(kLong, 10), proto::DTYPE_FLOAT32), false);
  RoundResult result = sum.FinishRaw(h);
  EXPECT_EQ(result.payload.data(), buffer);  // summed in place: no copy
  EXPECT_EQ(result.codec, "");
  EXPECT_EQ(result.error, "");
  EXPECT_EQ(SumValues(result), std::vector<float>(kLong, 11));
  // The next round's first push starts afresh.
  sum.AddRaw(SumPush(0, 1), server_test::Payload({5, 5, 5, 5}, proto::DTYPE_FLOAT32), true);
  EXPECT_EQ(SumValues(sum.FinishRaw(SumPush(0, 1))), (std::vector<float>{5, 5, 5, 5}));
}

// 2048 + 1 + 1 is 2050 in fp16 only when summed wider: 2048 + 1 rounds back to 2048 in fp16.
// The same for bf16 at 256.
TEST(RoundSumTest, HalfPrecisionPushesAreSummedInFp32) {
  for (const auto& [dtype, big] :
       {std::pair{proto::DTYPE_FLOAT16, 2048.0f}, std::pair{proto::DTYPE_BFLOAT16, 256.0f}}) {
    RoundSum sum;
    sum.AddRaw(SumPush(0, 0, dtype), server_test::Payload({big, 1, -1, 0.5f}, dtype), true);
    sum.AddRaw(SumPush(1, 0, dtype), server_test::Payload({1, 1, -1, 0.5f}, dtype), false);
    sum.AddRaw(SumPush(2, 0, dtype), server_test::Payload({1, 1, -1, 0.5f}, dtype), false);
    RoundResult result = sum.FinishRaw(SumPush(2, 0, dtype));
    EXPECT_EQ(result.payload.size(), kN * DTypeSize(dtype));
    EXPECT_EQ(SumValues(result, dtype), (std::vector<float>{big + 2, 3, -3, 1.5f})) << dtype;
  }
}

// The first push's buffer is the sum until a later push is not float-aligned: then the sum
// moves to an fp32 buffer of its own and that first buffer is released at once.
TEST(RoundSumTest, AMisalignedLaterPushWidensTheSum) {
  constexpr int kLong = 64;
  proto::DataHeader h = SumPush(0, 0);
  h.set_element_count(kLong);
  std::vector<float> values(kLong);
  for (int i = 0; i < kLong; ++i) values[i] = static_cast<float>(i);
  std::vector<float> first = values;
  int released = 0;
  RoundSum sum;
  sum.AddRaw(h, zmq::message_t(first.data(), kLong * sizeof(float), CountRelease, &released), true);
  sum.AddRaw(h, server_test::Payload(values, proto::DTYPE_FLOAT32), false);
  EXPECT_EQ(released, 0);
  EXPECT_EQ(first[1], 2.0f);  // summed in place so far
  std::vector<char> storage(kLong * sizeof(float) + 1);
  std::memcpy(storage.data() + 1, values.data(), kLong * sizeof(float));
  sum.AddRaw(h, zmq::message_t(storage.data() + 1, kLong * sizeof(float), nullptr, nullptr), false);
  EXPECT_EQ(released, 1);
  RoundResult result = sum.FinishRaw(h);
  std::vector<float> tripled(kLong);
  for (int i = 0; i < kLong; ++i) tripled[i] = 3.0f * static_cast<float>(i);
  EXPECT_EQ(SumValues(result), tripled);
}

// A catalog with tensor 1 (kN elements) and strategy version 1 (and 2): `push`, re-encoded
// with `pull` (pull memory `memory`) when not empty.
struct Encoded {
  Catalog catalog{1};
  RoundSum sum;
  Encoded(const std::string& push, const std::string& pull, const std::string& memory = "") {
    EXPECT_TRUE(catalog.AddTensor(server_test::DeclareTensor(kN)).ok());
    for (uint64_t version : {1, 2}) {
      proto::Strategy s = server_test::StrategyWith(version, push, pull);
      if (!memory.empty()) s.mutable_tensors(0)->mutable_pull_codec()->set_memory(memory);
      EXPECT_TRUE(catalog.AddStrategy(s).ok());
    }
  }
  void Add(const proto::DataHeader& h, const std::vector<float>& values) {
    sum.AddEncoded(h.sender(), /*num_workers=*/3, server_test::Encode(h.codec(), values, h));
  }
};

// Values whose fp32 sum differs with the order: (2, 0, 1) and (0, 1, 2) give other results.
TEST(RoundSumTest, CompressedPushesAreAggregatedInTheRankOrderOfThePushers) {
  const float big = 65504.0f, tiny = std::ldexp(1.0f, -14);
  const std::vector<std::vector<float>> by_rank = {
      {big, 1, 2, 3}, {-big, 1, 2, 3}, {tiny, 1, 2, 3}};
  Encoded e("fp16", "");
  for (int w : {2, 0, 1}) e.Add(SumPush(w, 0, proto::DTYPE_FLOAT32, 1, "fp16"), by_rank[w]);
  absl::StatusOr<RoundResult> result =
      e.sum.FinishEncoded(SumPush(1, 0, proto::DTYPE_FLOAT32, 1, "fp16"), e.catalog, {0, 1, 2}, 0);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->codec, "");  // one-way: the fp32 sum
  const std::vector<float> got = SumValues(*result);
  EXPECT_EQ(std::memcmp(&got[0], &tiny, sizeof(float)), 0) << got[0];
  EXPECT_EQ(got[3], 9.0f);

  // Only the pushers' pushes are summed (a hierarchical job's local roots 0 and 2).
  for (int w : {2, 0}) e.Add(SumPush(w, 1, proto::DTYPE_FLOAT32, 1, "fp16"), by_rank[w]);
  result =
      e.sum.FinishEncoded(SumPush(0, 1, proto::DTYPE_FLOAT32, 1, "fp16"), e.catalog, {0, 2}, 0);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(SumValues(*result), (std::vector<float>{big, 2, 4, 6}));  // tiny is lost after big
}

// The server's error feedback: round 2 re-encodes the sum plus what round 1 left out, exactly
// as one memory used twice does; a new strategy version starts from zero.
TEST(RoundSumTest, TheServersErrorFeedbackLastsTheRoundsOfAVersion) {
  Encoded e("fp16", "onebit", "residual");
  const std::vector<float> x0 = {1, -2, 3, -4}, x1 = {2, -4, -5, 5};
  const std::vector<float> summed = {3, -6, -2, 1};
  std::unique_ptr<compress::Codec> onebit = *compress::CreateCodec("onebit");
  std::unique_ptr<compress::Memory> memory = *compress::CreateMemory("residual");
  std::vector<float> compensated, decoded;
  auto expected = [&](uint64_t iteration, compress::Memory* m) {
    compress::CodecContext ctx;
    ctx.key = MakeKey(1, 0);
    ctx.round = iteration;
    ctx.node = 0;  // the server's rank
    ctx.seed = server_test::kSeed;
    std::vector<uint8_t> out(onebit->MaxEncodedBytes(kN));
    absl::StatusOr<size_t> bytes = compress::EncodeWithMemory(
        *onebit, m, summed, ctx, absl::MakeSpan(out), compensated, decoded);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    out.resize(bytes.ok() ? *bytes : 0);
    return std::string(out.begin(), out.end());
  };
  auto round = [&](uint64_t version, uint64_t iteration) {
    e.Add(SumPush(0, iteration, proto::DTYPE_FLOAT32, version, "fp16"), x0);
    e.Add(SumPush(1, iteration, proto::DTYPE_FLOAT32, version, "fp16"), x1);
    absl::StatusOr<RoundResult> r = e.sum.FinishEncoded(
        SumPush(1, iteration, proto::DTYPE_FLOAT32, version, "fp16"), e.catalog, {0, 1}, 0);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return std::string();
    EXPECT_EQ(r->codec, "onebit");
    return std::string(static_cast<const char*>(r->payload.data()), r->payload.size());
  };
  EXPECT_EQ(round(1, 0), expected(0, memory.get()));
  const std::string second = round(1, 1);
  EXPECT_EQ(second, expected(1, memory.get()));
  EXPECT_NE(second, expected(1, nullptr));       // the premise: the memory changes round 2's bytes
  EXPECT_EQ(round(2, 2), expected(2, nullptr));  // version 2: a fresh memory
}

TEST(RoundSumTest, AnUnreadablePushIsNamedInTheError) {
  Encoded e("fp16", "");
  e.Add(SumPush(0, 0, proto::DTYPE_FLOAT32, 1, "fp16"), {1, 2, 3, 4});
  e.sum.AddEncoded(1, 3, zmq::message_t(std::string("\x01\x02\x03", 3)));
  absl::StatusOr<RoundResult> result =
      e.sum.FinishEncoded(SumPush(1, 0, proto::DTYPE_FLOAT32, 1, "fp16"), e.catalog, {0, 1}, 0);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(std::string(result.status().message()).rfind("worker 1's push: ", 0), 0u)
      << result.status();
  // A key whose tensor the catalog does not know cannot be aggregated either.
  RoundSum other;
  proto::DataHeader unknown = SumPush(0, 0, proto::DTYPE_FLOAT32, 1, "fp16");
  unknown.set_key(MakeKey(9, 0));
  other.AddEncoded(0, 1, server_test::Encode("fp16", {1, 2, 3, 4}, unknown));
  EXPECT_EQ(other.FinishEncoded(unknown, e.catalog, {0}, 0).status().message(),
            "tensor vanished from the catalog");
}

// An aborted round's buffers go at once, not with the next round's first push.
TEST(RoundSumTest, ADroppedRoundReleasesWhatItHeld) {
  int released = 0;
  std::vector<float> values = {1, 2, 3, 4};
  RoundSum sum;
  sum.AddRaw(SumPush(0, 0),
             zmq::message_t(values.data(), values.size() * sizeof(float), CountRelease, &released),
             true);
  EXPECT_EQ(released, 0);
  sum.Drop();
  EXPECT_EQ(released, 1);
  std::string bytes = "encoded";
  sum.AddEncoded(0, 2, zmq::message_t(bytes.data(), bytes.size(), CountRelease, &released));
  sum.Drop();
  EXPECT_EQ(released, 2);
}

}  // namespace
}  // namespace bytecomp::server
