// RequestDispatcher: where the I/O thread sends each message, without sockets: requests to
// their key's shard, parking until the declaration (and its timeout), refusals, link probes,
// and commands forwarded to every shard ahead of the requests they release.
#include "bytecomp/server/request_dispatcher.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "bytecomp/server/key_shard.h"
#include "server_test_util.h"

namespace bytecomp::server {
namespace {

using server_test::kN;
constexpr size_t kShards = 3;

RequestDispatcher Dispatcher() {
  return RequestDispatcher(server_test::Job(/*workers=*/2), kShards);
}

std::vector<zmq::message_t> Frames(const proto::DataHeader& h, int payload_floats = -1) {
  std::vector<zmq::message_t> frames;
  frames.push_back(server_test::Identity(h.sender()));
  frames.push_back(ProtoFrame(h));
  if (payload_floats >= 0) {
    frames.push_back(
        server_test::Payload(std::vector<float>(payload_floats, 1.0f), proto::DTYPE_FLOAT32));
  }
  return frames;
}

std::vector<zmq::message_t> APush(int sender = 0) {
  proto::DataHeader h = server_test::Request(proto::OP_PUSH, sender, 0, kN);
  h.set_payload_bytes(4 * kN);
  return Frames(h, kN);
}

std::vector<zmq::message_t> APull(int sender = 0) {
  return Frames(server_test::Request(proto::OP_PULL, sender, 0, kN));
}

// A push of `bytes` for tensor 1, which no declaration has made known (it waits, parked).
std::vector<zmq::message_t> ALargePush(int sender, size_t bytes) {
  proto::DataHeader h = server_test::Request(proto::OP_PUSH, sender, 0, kN);
  h.set_payload_bytes(static_cast<int64_t>(bytes));
  std::vector<zmq::message_t> frames;
  frames.push_back(server_test::Identity(sender));
  frames.push_back(ProtoFrame(h));
  frames.emplace_back(bytes);
  return frames;
}

ServerCommand Declaration(const proto::DeclareReply& tensor = server_test::DeclareTensor(kN)) {
  return DeclareCommand{std::make_shared<const proto::DeclareReply>(tensor)};
}

// Whether a message to a shard is a T (ShardRequest, or one of the commands).
template <typename T>
bool Is(const ShardMessage& message) {
  if constexpr (std::is_same_v<T, ShardRequest>) {
    return std::holds_alternative<ShardRequest>(message);
  } else {
    const ServerCommand* command = std::get_if<ServerCommand>(&message);
    return command != nullptr && std::holds_alternative<T>(*command);
  }
}

// The request a message to a shard carries (a failed test where it is none).
const ShardRequest& RoutedRequest(const ShardMessage& message) {
  static const ShardRequest kNone{};
  EXPECT_TRUE(Is<ShardRequest>(message));
  const ShardRequest* request = std::get_if<ShardRequest>(&message);
  return request != nullptr ? *request : kNone;
}

std::string RoutedIdentity(const ShardMessage& message) {
  return FrameToString(RoutedRequest(message).identity);
}

proto::DataHeader HeaderOf(const std::vector<zmq::message_t>& reply) {
  proto::DataHeader h;
  EXPECT_TRUE(ParseFrame(reply[1], &h).ok());
  return h;
}

TEST(RequestDispatcherTest, AValidRequestGoesToItsKeysShard) {
  RequestDispatcher d = Dispatcher();
  DispatchOutbox out;
  ASSERT_TRUE(d.HandleCommand(Declaration(), 0, &out));
  ASSERT_EQ(out.to_shards.size(), kShards);  // the declaration, to every shard
  for (size_t i = 0; i < kShards; ++i) {
    EXPECT_EQ(out.to_shards[i].first, i);
    EXPECT_TRUE(Is<DeclareCommand>(out.to_shards[i].second));
  }
  out = {};
  d.HandleRequest(APush(), 5, &out);
  EXPECT_TRUE(out.to_router.empty());
  ASSERT_EQ(out.to_shards.size(), 1u);
  EXPECT_EQ(out.to_shards[0].first, ShardOf(MakeKey(1, 0), kShards));
  // The header as parsed here (the shard does not parse it again), the payload as it came.
  const ShardRequest& request = RoutedRequest(out.to_shards[0].second);
  EXPECT_EQ(FrameToString(request.identity), "worker-0");
  EXPECT_EQ(request.header.op(), proto::OP_PUSH);
  EXPECT_EQ(request.header.key(), MakeKey(1, 0));
  EXPECT_EQ(request.header.request_id(), server_test::RequestId(0, 0));
  EXPECT_EQ(request.payload.size(), 4u * kN);
  EXPECT_EQ(d.requests(), 1u);
  EXPECT_EQ(d.rejected(), 0u);
}

TEST(RequestDispatcherTest, AnEarlyRequestWaitsForItsDeclaration) {
  RequestDispatcher d = Dispatcher();
  DispatchOutbox out;
  d.HandleRequest(APush(1), 100, &out);
  d.HandleRequest(APush(0), 110, &out);
  EXPECT_TRUE(out.to_router.empty());
  EXPECT_TRUE(out.to_shards.empty());
  EXPECT_EQ(d.parked(), 2u);
  d.ExpireParked(100 + kUndeclaredGraceMs, &out);  // not yet
  EXPECT_EQ(d.parked(), 2u);

  ASSERT_TRUE(d.HandleCommand(Declaration(), 200, &out));
  EXPECT_EQ(d.parked(), 0u);
  // Every shard hears of the tensor first, then the requests go on in arrival order.
  ASSERT_EQ(out.to_shards.size(), kShards + 2);
  for (size_t i = 0; i < kShards; ++i) EXPECT_TRUE(Is<DeclareCommand>(out.to_shards[i].second));
  EXPECT_EQ(RoutedIdentity(out.to_shards[kShards].second), "worker-1");
  EXPECT_EQ(RoutedIdentity(out.to_shards[kShards + 1].second), "worker-0");
  EXPECT_TRUE(out.to_router.empty());
}

TEST(RequestDispatcherTest, AParkedRequestIsRefusedAfterTheGrace) {
  RequestDispatcher d = Dispatcher();
  DispatchOutbox out;
  d.HandleRequest(APush(), 1000, &out);
  // Another tensor's declaration leaves it waiting, from its first arrival.
  proto::DeclareReply other = server_test::DeclareTensor(kN, proto::DTYPE_FLOAT32, 2);
  ASSERT_TRUE(d.HandleCommand(Declaration(other), 2000, &out));
  EXPECT_EQ(d.parked(), 1u);
  out = {};
  d.ExpireParked(1000 + kUndeclaredGraceMs + 1, &out);
  EXPECT_EQ(d.parked(), 0u);
  EXPECT_TRUE(out.to_shards.empty());
  ASSERT_EQ(out.to_router.size(), 1u);
  const proto::DataHeader reply = HeaderOf(out.to_router[0]);
  EXPECT_EQ(reply.op(), proto::OP_ERROR);
  EXPECT_EQ(reply.request_id(), server_test::RequestId(0, 0));
  EXPECT_EQ(reply.error(),
            "server 0: unknown key 1:0 (not declared, or owned by another server than server 0)");
  EXPECT_EQ(d.rejected(), 1u);
}

TEST(RequestDispatcherTest, BadRequestsAreAnsweredWithWhatIsWrong) {
  RequestDispatcher d = Dispatcher();
  DispatchOutbox out;
  d.HandleCommand(Declaration(), 0, &out);
  out = {};
  std::vector<zmq::message_t> identity_only;
  identity_only.push_back(server_test::Identity(0));
  d.HandleRequest(std::move(identity_only), 1, &out);
  std::vector<zmq::message_t> not_a_header;
  not_a_header.push_back(server_test::Identity(0));
  not_a_header.emplace_back("\xff\xff\xff", 3);
  d.HandleRequest(std::move(not_a_header), 1, &out);
  proto::DataHeader wrong_size = server_test::Request(proto::OP_PUSH, 1, 0, kN + 1);
  wrong_size.set_payload_bytes(4 * (kN + 1));
  d.HandleRequest(Frames(wrong_size, kN + 1), 1, &out);

  EXPECT_TRUE(out.to_shards.empty());
  ASSERT_EQ(out.to_router.size(), 3u);
  EXPECT_EQ(HeaderOf(out.to_router[0]).error(),
            "server 0: malformed request: 0 frames after the identity (expected a header and an "
            "optional payload)");
  EXPECT_EQ(HeaderOf(out.to_router[1]).error(),
            "server 0: malformed request: the header frame (3 bytes) is not a DataHeader");
  EXPECT_EQ(HeaderOf(out.to_router[2]).error(),
            "server 0: key 1:0 round 0: element_count 5, declared 4");
  EXPECT_EQ(FrameToString(out.to_router[2][0]), "worker-1");
  EXPECT_EQ(d.requests(), 3u);
  EXPECT_EQ(d.rejected(), 3u);
}

TEST(RequestDispatcherTest, LinkProbesAreAnsweredHere) {
  RequestDispatcher d = Dispatcher();
  DispatchOutbox out;
  proto::DataHeader probe;
  probe.set_op(proto::OP_PROBE);
  probe.set_sender(-1);
  probe.set_request_id(9);
  probe.set_probe_reply_bytes(1000);
  d.HandleRequest(Frames(probe), 1, &out);
  EXPECT_TRUE(out.to_shards.empty());
  ASSERT_EQ(out.to_router.size(), 1u);
  ASSERT_EQ(out.to_router[0].size(), 3u);
  const proto::DataHeader reply = HeaderOf(out.to_router[0]);
  EXPECT_EQ(reply.op(), proto::OP_PROBE_REPLY);
  EXPECT_EQ(reply.request_id(), 9u);
  EXPECT_EQ(reply.payload_bytes(), 1000);
  EXPECT_EQ(out.to_router[0][2].size(), 1000u);
}

TEST(RequestDispatcherTest, CommandsReachEveryShard) {
  RequestDispatcher d = Dispatcher();
  DispatchOutbox out;
  EXPECT_TRUE(d.HandleCommand(FailCommand{"worker 1 failed"}, 0, &out));
  EXPECT_TRUE(d.HandleCommand(LostCommand{1}, 0, &out));  // this thread's alone
  EXPECT_FALSE(d.HandleCommand(StopCommand{}, 0, &out));
  ASSERT_EQ(out.to_shards.size(), 2 * kShards);
  for (size_t i = 0; i < kShards; ++i) {
    EXPECT_EQ(out.to_shards[i].first, i);
    ASSERT_TRUE(Is<FailCommand>(out.to_shards[i].second));
    EXPECT_EQ(std::get<FailCommand>(std::get<ServerCommand>(out.to_shards[i].second)).reason,
              "worker 1 failed");
    EXPECT_TRUE(Is<StopCommand>(out.to_shards[kShards + i].second));
  }
  // A declaration or strategy the catalog refuses goes to no shard.
  RequestDispatcher fresh = Dispatcher();
  out = {};
  proto::DeclareReply bad = server_test::DeclareTensor(kN);
  bad.add_partition_server(0);  // two servers listed for one partition
  EXPECT_TRUE(fresh.HandleCommand(Declaration(bad), 0, &out));
  EXPECT_TRUE(out.to_shards.empty());
  proto::Strategy second = server_test::StrategyWith(2, "fp16", "");
  second.set_first_round(10);
  EXPECT_TRUE(fresh.HandleCommand(StrategyCommand{std::make_shared<const proto::Strategy>(second)},
                                  0, &out));
  EXPECT_EQ(out.to_shards.size(), kShards);
  out = {};
  EXPECT_TRUE(fresh.HandleCommand(  // version 1 after version 2
      StrategyCommand{
          std::make_shared<const proto::Strategy>(server_test::StrategyWith(1, "fp16", ""))},
      0, &out));
  EXPECT_TRUE(out.to_shards.empty());
}

TEST(RequestDispatcherTest, ParkingIsBoundedInRequestsAndBytes) {
  RequestDispatcher d = Dispatcher();
  DispatchOutbox out;
  for (size_t i = 0; i < kMaxParkedRequests + 1; ++i) d.HandleRequest(APull(), 1, &out);
  EXPECT_EQ(d.parked(), kMaxParkedRequests);
  ASSERT_EQ(out.to_router.size(), 1u);  // the one beyond the bound is refused at once
  EXPECT_EQ(HeaderOf(out.to_router[0]).op(), proto::OP_ERROR);

  // Pushes of 8 MiB (kN elements is not what they declare; they are refused once let through,
  // but while their tensor is unknown they would wait) from both workers fill the bytes, the
  // next is refused.
  RequestDispatcher big = Dispatcher();
  out = {};
  const size_t each = size_t{8} << 20;
  const size_t bound = big.parked_bytes_bound();
  const size_t sent = bound / each + 1;
  for (size_t i = 0; i < sent; ++i)
    big.HandleRequest(ALargePush(static_cast<int>(i % 2), each), 1, &out);
  EXPECT_LE(big.parked() * each, bound);
  EXPECT_GE(big.parked() + 3, sent);                     // headers and identities take room too
  EXPECT_EQ(out.to_router.size(), sent - big.parked());  // the rest refused at once
}

// One worker holds at most its share of the parked bytes (ParkedBytesBound / workers): one
// that sends requests for keys never declared leaves the others their room.
TEST(RequestDispatcherTest, AWorkerParksAtMostItsShare) {
  RequestDispatcher d = RequestDispatcher(server_test::Job(/*workers=*/4), kShards);
  DispatchOutbox out;
  const size_t each = size_t{1} << 20;
  const size_t share = d.parked_bytes_bound() / 4;
  const size_t sent = share / each + 8;
  for (size_t i = 0; i < sent; ++i) d.HandleRequest(ALargePush(0, each), 1, &out);
  const size_t held = d.parked();
  EXPECT_LE(held * each, share);
  EXPECT_GE(held + 2, share / each);
  EXPECT_EQ(out.to_router.size(), sent - held);  // worker 0's beyond its share: refused
  out = {};
  for (int w = 1; w < 4; ++w) d.HandleRequest(ALargePush(w, each), 1, &out);
  EXPECT_EQ(d.parked(), held + 3);  // the others still park
  EXPECT_TRUE(out.to_router.empty());
  // Released (here by the grace running out), worker 0's room is back.
  d.ExpireParked(1 + kUndeclaredGraceMs + 1, &out);
  EXPECT_EQ(d.parked(), 0u);
  d.HandleRequest(ALargePush(0, each), kUndeclaredGraceMs + 10, &out);
  EXPECT_EQ(d.parked(), 1u);
}

// The parked bytes are sized from the job: what its workers may have in flight to a server.
TEST(RequestDispatcherTest, ParkingIsSizedFromTheJob) {
  const size_t two = ParkedBytesBound(server_test::Job(/*workers=*/2));
  const size_t sixty_four = ParkedBytesBound(server_test::Job(/*workers=*/64));
  EXPECT_GE(two, kMinParkedBytes);
  EXPECT_LT(two, size_t{128} << 20);  // 2 workers, 4 MiB partitions: about 82 MiB
  EXPECT_EQ(sixty_four, two * 32);
}

// A declaration releases its own tensor's parked requests, not the others'.
TEST(RequestDispatcherTest, ADeclarationReleasesOnlyItsTensorsRequests) {
  RequestDispatcher d = Dispatcher();
  DispatchOutbox out;
  proto::DataHeader other = server_test::Request(proto::OP_PUSH, 0, 0, kN);
  other.set_key(MakeKey(2, 0));
  other.set_payload_bytes(4 * kN);
  d.HandleRequest(APush(), 10, &out);
  d.HandleRequest(Frames(other, kN), 20, &out);
  d.HandleRequest(APush(1), 30, &out);
  EXPECT_EQ(d.parked(), 3u);
  ASSERT_TRUE(d.HandleCommand(Declaration(), 40, &out));  // tensor 1
  EXPECT_EQ(d.parked(), 1u);
  ASSERT_EQ(out.to_shards.size(), kShards + 2);
  EXPECT_EQ(RoutedIdentity(out.to_shards[kShards].second), "worker-0");
  EXPECT_EQ(RoutedIdentity(out.to_shards[kShards + 1].second), "worker-1");
  // The other one still expires after the grace, counted from its arrival.
  out = {};
  d.ExpireParked(20 + kUndeclaredGraceMs, &out);
  EXPECT_EQ(d.parked(), 1u);
  d.ExpireParked(20 + kUndeclaredGraceMs + 1, &out);
  EXPECT_EQ(d.parked(), 0u);
  ASSERT_EQ(out.to_router.size(), 1u);
  EXPECT_EQ(HeaderOf(out.to_router[0]).op(), proto::OP_ERROR);
}

// A request without its worker's token never waits for a declaration, never reaches a shard,
// and is counted; the refusal says nothing about the key.
TEST(RequestDispatcherTest, RequestsWithoutTheTokenAreRefusedAtOnce) {
  RequestDispatcher d = Dispatcher();
  DispatchOutbox out;
  proto::DataHeader h = server_test::Request(proto::OP_PULL, 1, 1000000, kN);
  h.clear_token_high();
  h.clear_token_low();
  d.HandleRequest(Frames(h), 1, &out);  // undeclared key: would park with a token
  EXPECT_EQ(d.parked(), 0u);
  ASSERT_TRUE(d.HandleCommand(Declaration(), 2, &out));
  out = {};
  d.HandleRequest(Frames(h), 3, &out);
  proto::DataHeader push = server_test::Request(proto::OP_PUSH, 0, 0, kN);
  push.set_payload_bytes(4 * kN);
  SetHeaderToken(server_test::TokenOf(1), &push);
  d.HandleRequest(Frames(push, kN), 4, &out);
  EXPECT_TRUE(out.to_shards.empty());
  ASSERT_EQ(out.to_router.size(), 2u);
  EXPECT_EQ(HeaderOf(out.to_router[0]).error(),
            "server 0: the request names worker 1 but does not carry its token: a connection "
            "pushes and pulls only as the rank the scheduler gave its node");
  EXPECT_EQ(d.rejected_without_token(), 3u);
  EXPECT_EQ(d.rejected(), 3u);
  EXPECT_EQ(d.Summary().substr(0, 60),
            "served 3 requests; rejected 3 (3 without the sender's token)");
}

// A replacement refuses a request for the server it replaced (queued on a worker's old
// connection), and its refusal names its own epoch: the worker, which may not have heard of
// the replacement yet, keeps the request and sends it again with that epoch.
TEST(RequestDispatcherTest, ARefusalNamesTheServersEpoch) {
  ServerJob job = server_test::Job(2);
  job.epoch = 77;
  RequestDispatcher d(job, kShards);
  DispatchOutbox out;
  ASSERT_TRUE(d.HandleCommand(Declaration(), 0, &out));
  out = {};
  d.HandleRequest(APush(), 1, &out);  // epoch 0
  EXPECT_TRUE(out.to_shards.empty());
  ASSERT_EQ(out.to_router.size(), 1u);
  const proto::DataHeader refusal = HeaderOf(out.to_router[0]);
  EXPECT_EQ(refusal.op(), proto::OP_ERROR);
  EXPECT_EQ(refusal.server_epoch(), 77u);
  EXPECT_EQ(refusal.error(),
            "server 0: the request is for server 0 epoch 0, this is epoch 77: it was sent to a "
            "server that this one replaced");
  out = {};
  std::vector<zmq::message_t> push = APush();
  proto::DataHeader h = HeaderOf(push);
  h.set_server_epoch(77);
  d.HandleRequest(Frames(h, kN), 2, &out);
  EXPECT_TRUE(out.to_router.empty());
  EXPECT_EQ(out.to_shards.size(), 1u);
}

// The job's declaration limits hold on the server too: a declaration beyond them is refused
// before its layout is built, and reaches no shard.
TEST(RequestDispatcherTest, DeclarationsBeyondTheLimitsAreRefused) {
  ServerJob job = server_test::Job(2);
  job.config.set_max_declared_bytes(1 << 20);
  job.config.set_max_tensors(2);
  RequestDispatcher d(job, kShards);
  DispatchOutbox out;
  proto::DeclareReply huge = server_test::DeclareTensor(int64_t{1} << 40);
  huge.set_partition_elements(int64_t{1} << 20);  // 2^20 partitions, none listed yet
  EXPECT_TRUE(d.HandleCommand(Declaration(huge), 0, &out));
  EXPECT_TRUE(out.to_shards.empty());
  for (uint32_t id = 1; id <= 3; ++id) {
    out = {};
    proto::DeclareReply small = server_test::DeclareTensor(kN, proto::DTYPE_FLOAT32, id);
    EXPECT_TRUE(d.HandleCommand(Declaration(small), 0, &out));
    EXPECT_EQ(out.to_shards.size(), id <= 2 ? kShards : 0u) << "tensor " << id;
  }
}

}  // namespace
}  // namespace bytecomp::server
