// KeyShard: the shard message format, commands, requests handed to the KeyStore, the summary
// the server logs (test/integration/test_hierarchical.py reads its push counts), ShardOf.
#include "bytecomp/server/key_shard.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "server_test_util.h"

namespace bytecomp::server {
namespace {

using server_test::FloatsOf;
using server_test::IdentityOf;
using server_test::kN;

std::vector<zmq::message_t> RequestMessage(const proto::DataHeader& h, zmq::message_t identity,
                                           const std::vector<float>& values = {}) {
  std::vector<zmq::message_t> request;
  request.push_back(std::move(identity));
  request.push_back(ProtoFrame(h));
  if (!values.empty()) request.push_back(server_test::Payload(values, proto::DTYPE_FLOAT32));
  return ShardRequest(std::move(request));
}

std::vector<zmq::message_t> Push(int sender, const std::vector<float>& values) {
  return RequestMessage(server_test::Request(proto::OP_PUSH, sender, 0, kN),
                        server_test::Identity(sender), values);
}

std::vector<zmq::message_t> Pull(int sender) {
  return RequestMessage(server_test::Request(proto::OP_PULL, sender, 0, kN),
                        server_test::Identity(sender));
}

// A shard that heard of tensor 1 as the I/O thread tells it.
struct Shard {
  KeyShard shard{/*index=*/3, server_test::Job(/*workers=*/2)};
  std::vector<OutgoingReply> out;
  Shard() {
    EXPECT_TRUE(shard.Handle(ShardCommand(ShardMessageKind::kDeclare,
                                          server_test::DeclareTensor(kN).SerializeAsString()),
                             &out));
  }
  std::vector<OutgoingReply> Handle(std::vector<zmq::message_t> message, bool* running = nullptr) {
    out.clear();
    const bool r = shard.Handle(std::move(message), &out);
    if (running != nullptr) *running = r;
    return std::move(out);
  }
};

TEST(KeyShardTest, MessagesSayWhatTheyAre) {
  ShardMessageKind kind;
  std::vector<zmq::message_t> stop = ShardCommand(ShardMessageKind::kStop);
  ASSERT_EQ(stop.size(), 1u);  // no body frame
  ASSERT_TRUE(ParseShardMessageKind(stop, &kind));
  EXPECT_EQ(kind, ShardMessageKind::kStop);
  std::vector<zmq::message_t> fail = ShardCommand(ShardMessageKind::kFail, "why");
  ASSERT_EQ(fail.size(), 2u);
  EXPECT_EQ(FrameToString(fail[1]), "why");
  ASSERT_TRUE(ParseShardMessageKind(Pull(0), &kind));
  EXPECT_EQ(kind, ShardMessageKind::kRequest);

  std::vector<zmq::message_t> none;
  EXPECT_FALSE(ParseShardMessageKind(none, &kind));
  std::vector<zmq::message_t> unknown;
  unknown.emplace_back("q", 1);
  EXPECT_FALSE(ParseShardMessageKind(unknown, &kind));
  std::vector<zmq::message_t> longer;
  longer.emplace_back("rr", 2);
  EXPECT_FALSE(ParseShardMessageKind(longer, &kind));
}

TEST(KeyShardTest, RequestsGoToTheKeyStore) {
  Shard s;
  EXPECT_TRUE(s.Handle(Pull(1)).empty());  // held
  EXPECT_EQ(s.Handle(Push(0, {1, 2, 3, 4})).size(), 1u);
  std::vector<OutgoingReply> last = s.Handle(Push(1, {1, 1, 1, 1}));
  ASSERT_EQ(last.size(), 2u);
  EXPECT_EQ(last[0].header.op(), proto::OP_PUSH_ACK);
  EXPECT_EQ(last[1].header.op(), proto::OP_PULL_REPLY);
  EXPECT_EQ(FloatsOf(last[1]), (std::vector<float>{2, 3, 4, 5}));
  EXPECT_EQ(s.shard.Summary(),
            "key shard 3 stops after 1 rounds on 1 keys, refused 0 requests; pushes by worker: 0=1 "
            "1=1");
}

// A peer picks its own routing identity; one that reads like a command is still a request.
TEST(KeyShardTest, AnIdentityThatLooksLikeACommandIsARequest) {
  Shard s;
  for (const std::string identity : {"x", "cmd:stop"}) {
    bool running = false;
    const int worker = identity == "x" ? 0 : 1;
    std::vector<OutgoingReply> replies = s.Handle(
        RequestMessage(server_test::Request(proto::OP_PULL, worker, 0, kN), zmq::message_t(identity)),
        &running);
    EXPECT_TRUE(running) << identity;
    EXPECT_TRUE(replies.empty()) << identity;  // held, as a pull
  }
  std::vector<OutgoingReply> failed;
  s.shard.Handle(ShardCommand(ShardMessageKind::kFail, "server stops"), &failed);
  ASSERT_EQ(failed.size(), 2u);
  EXPECT_EQ(IdentityOf(failed[1]), "cmd:stop");
  EXPECT_EQ(failed[1].header.error(), "server 0: server stops");
}

TEST(KeyShardTest, StopEndsTheThreadAndBadMessagesAreDropped) {
  Shard s;
  bool running = false;
  std::vector<zmq::message_t> no_kind;
  no_kind.emplace_back("worker-0", 8);
  no_kind.push_back(ProtoFrame(server_test::Request(proto::OP_PULL, 0, 0, kN)));
  EXPECT_TRUE(s.Handle(std::move(no_kind), &running).empty());
  EXPECT_TRUE(running);
  std::vector<zmq::message_t> short_request = ShardRequest({});
  EXPECT_TRUE(s.Handle(std::move(short_request), &running).empty());
  EXPECT_TRUE(running);
  s.Handle(ShardCommand(ShardMessageKind::kStop), &running);
  EXPECT_FALSE(running);
  EXPECT_EQ(s.shard.store().num_keys(), 0u);
}

TEST(KeyShardTest, StrategiesReachTheShardsCatalog) {
  Shard s;
  s.Handle(ShardCommand(ShardMessageKind::kStrategy,
                        server_test::StrategyWith(1, "fp16", "").SerializeAsString()));
  for (int w : {0, 1}) {
    proto::DataHeader h = server_test::Request(proto::OP_PUSH, w, 0, kN);
    h.set_strategy_version(1);
    h.set_codec("fp16");
    std::vector<zmq::message_t> request;
    request.push_back(server_test::Identity(w));
    request.push_back(ProtoFrame(h));
    request.push_back(server_test::Encode("fp16", {1, 2, 3, 4}, h));
    s.Handle(ShardRequest(std::move(request)));
  }
  proto::DataHeader pull = server_test::Request(proto::OP_PULL, 0, 0, kN);
  pull.set_strategy_version(1);
  pull.set_codec("fp16");
  std::vector<OutgoingReply> reply = s.Handle(RequestMessage(pull, server_test::Identity(0)));
  ASSERT_EQ(reply.size(), 1u);
  ASSERT_EQ(reply[0].header.op(), proto::OP_PULL_REPLY) << reply[0].header.error();
  EXPECT_EQ(FloatsOf(reply[0]), (std::vector<float>{2, 4, 6, 8}));
}

TEST(KeyShardTest, ShardOfSpreadsPartitionsAndTensors) {
  EXPECT_EQ(ShardOf(MakeKey(0, 0), 2), 0u);
  EXPECT_EQ(ShardOf(MakeKey(0, 1), 2), 1u);
  EXPECT_EQ(ShardOf(MakeKey(1, 0), 2), 1u);  // tensor id and partition both count
  EXPECT_EQ(ShardOf(MakeKey(1, 1), 2), 0u);
  std::set<size_t> used;
  for (uint32_t p = 0; p < 64; ++p) {
    const size_t shard = ShardOf(MakeKey(7, p), 5);
    EXPECT_LT(shard, 5u);
    used.insert(shard);
  }
  EXPECT_EQ(used.size(), 5u);
  EXPECT_EQ(ShardOf(MakeKey(9, 3), 1), 0u);
}

}  // namespace
}  // namespace bytecomp::server
