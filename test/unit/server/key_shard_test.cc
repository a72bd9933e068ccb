// KeyShard: typed messages from the I/O thread (shard_messages.h): requests handed to the
// KeyStore, commands to the shard's catalog and store, the summary the server logs
// (test/integration/test_hierarchical.py reads its push counts), ShardOf.
#include "bytecomp/server/key_shard.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "server_test_util.h"

namespace bytecomp::server {
namespace {

using server_test::FloatsOf;
using server_test::IdentityOf;
using server_test::kN;
using server_test::Ops;

ShardMessage RequestMessage(const proto::DataHeader& h, zmq::message_t identity,
                            const std::vector<float>& values = {}) {
  ShardRequest request{std::move(identity), h, zmq::message_t()};
  if (!values.empty()) request.payload = server_test::Payload(values, proto::DTYPE_FLOAT32);
  return request;
}

ShardMessage Push(int sender, const std::vector<float>& values) {
  return RequestMessage(server_test::Request(proto::OP_PUSH, sender, 0, kN),
                        server_test::Identity(sender), values);
}

ShardMessage Pull(int sender) {
  return RequestMessage(server_test::Request(proto::OP_PULL, sender, 0, kN),
                        server_test::Identity(sender));
}

ShardMessage Declare(const proto::DeclareReply& tensor) {
  return ServerCommand(DeclareCommand{std::make_shared<const proto::DeclareReply>(tensor)});
}

// A shard of server 0 of a job of `servers` servers that heard of tensor 1 as the I/O thread
// tells it.
struct Shard {
  KeyShard shard;
  std::vector<OutgoingReply> out;
  explicit Shard(int servers = 1, proto::DeclareReply tensor = server_test::DeclareTensor(kN))
      : shard(/*index=*/3, server_test::Job(/*workers=*/2, servers)) {
    EXPECT_TRUE(shard.Handle(Declare(tensor), &out));
  }
  std::vector<OutgoingReply> Handle(ShardMessage message, bool* running = nullptr) {
    out.clear();
    const bool r = shard.Handle(std::move(message), &out);
    if (running != nullptr) *running = r;
    return std::move(out);
  }
};

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
    std::vector<OutgoingReply> replies =
        s.Handle(RequestMessage(server_test::Request(proto::OP_PULL, worker, 0, kN),
                                zmq::message_t(identity)),
                 &running);
    EXPECT_TRUE(running) << identity;
    EXPECT_TRUE(replies.empty()) << identity;  // held, as a pull
  }
  std::vector<OutgoingReply> failed;
  s.shard.Handle(ServerCommand(FailCommand{"server stops"}), &failed);
  ASSERT_EQ(failed.size(), 2u);
  EXPECT_EQ(IdentityOf(failed[1]), "cmd:stop");
  EXPECT_EQ(failed[1].header.error(), "server 0: server stops");
}

// A lost server is the I/O thread's business: the shard goes on as it was; a stop ends it.
TEST(KeyShardTest, StopEndsTheThreadAndALostServerChangesNothingHere) {
  Shard s;
  bool running = false;
  EXPECT_TRUE(s.Handle(ServerCommand(LostCommand{1}), &running).empty());
  EXPECT_TRUE(running);
  EXPECT_EQ(s.shard.store().num_keys(), 0u);
  s.Handle(ServerCommand(StopCommand{}), &running);
  EXPECT_FALSE(running);
  EXPECT_EQ(s.shard.store().num_keys(), 0u);
}

TEST(KeyShardTest, StrategiesReachTheShardsCatalog) {
  Shard s;
  s.Handle(ServerCommand(StrategyCommand{
      std::make_shared<const proto::Strategy>(server_test::StrategyWith(1, "fp16", ""))}));
  for (int w : {0, 1}) {
    proto::DataHeader h = server_test::Request(proto::OP_PUSH, w, 0, kN);
    h.set_strategy_version(1);
    h.set_codec("fp16");
    s.Handle(
        ShardRequest{server_test::Identity(w), h, server_test::Encode("fp16", {1, 2, 3, 4}, h)});
  }
  proto::DataHeader pull = server_test::Request(proto::OP_PULL, 0, 0, kN);
  pull.set_strategy_version(1);
  pull.set_codec("fp16");
  std::vector<OutgoingReply> reply = s.Handle(RequestMessage(pull, server_test::Identity(0)));
  ASSERT_EQ(reply.size(), 1u);
  ASSERT_EQ(reply[0].header.op(), proto::OP_PULL_REPLY) << reply[0].header.error();
  EXPECT_EQ(FloatsOf(reply[0]), (std::vector<float>{2, 4, 6, 8}));
}

// Server failover: a lost server's partitions moved here resume as a replacement's keys do
// (they wait for every worker's replay); the others' do not.
TEST(KeyShardTest, KeysMovedHereResume) {
  proto::DeclareReply tensor = server_test::DeclareTensor(kN);
  tensor.set_element_count(2 * kN);
  tensor.set_partition_server(0, 1);  // partition 0 on server 1, partition 1 here
  tensor.add_partition_server(0);
  Shard s(/*servers=*/2, tensor);
  auto moved = std::make_shared<proto::KeysMoved>();
  moved->set_from_rank(1);
  proto::DeclareReply* now = moved->add_tensors();
  *now = tensor;
  now->set_partition_server(0, 0);
  s.Handle(ServerCommand(MoveCommand{moved}));

  auto replay = [](int sender, uint32_t partition) {
    proto::DataHeader h = server_test::Request(proto::OP_PUSH, sender, 5, kN);
    h.set_key(MakeKey(1, partition));
    h.set_replay(true);
    return RequestMessage(h, server_test::Identity(sender), std::vector<float>(kN, 7));
  };
  EXPECT_TRUE(s.Handle(replay(0, 0)).empty());  // the moved key waits for worker 1
  EXPECT_TRUE(s.Handle(replay(1, 0)).empty());  // ... and goes on at round 6
  std::vector<OutgoingReply> refused = s.Handle(replay(0, 1));
  ASSERT_EQ(Ops(refused), std::vector{proto::OP_ERROR});
  EXPECT_EQ(refused[0].header.error(),
            "server 0: replay for key 1:1 refused: the key is not resuming (this server did not "
            "replace a lost one, or every worker was heard already)");
  EXPECT_EQ(s.shard.store().keys_resumed(), 1u);
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
