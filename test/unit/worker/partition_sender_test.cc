// The data protocol's worker side without sockets: what the PartitionSender sends, to which
// server and connection, in which order, within which budgets; what it reports to the operation
// tracker (results failed, zero-copy payloads released exactly once); and server failover
// (kept results replayed first, then the unanswered requests again; keys moved to survivors;
// epochs). Its connections are a record of the frames: a message stays "in ZeroMQ" until the
// test takes it (a server read it) or its server's connections close (then it waits in
// `dropped` until the test lets ZeroMQ's thread drop it).
#include "partition_sender.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <iterator>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/partition.h"
#include "bytecomp/common/transport.h"
#include "operation.h"

namespace bytecomp::worker {
namespace {

class RecordedConnections : public ServerConnections {
 public:
  struct Message {
    int server = 0;
    int connection = 0;
    proto::DataHeader header;
    std::vector<zmq::message_t> frames;
  };

  absl::Status Send(int server, int connection, std::vector<zmq::message_t>& frames) override {
    if (!refusal.ok()) return refusal;
    Message m{server, connection, {}, std::move(frames)};
    EXPECT_TRUE(m.header.ParseFromArray(m.frames[0].data(), static_cast<int>(m.frames[0].size())));
    sent.push_back(std::move(m));
    return absl::OkStatus();
  }
  void Open(int server, const std::string& address) override {
    Close(server);
    opened.emplace_back(server, address);
  }
  void Close(int server) override {
    closed.push_back(server);
    auto keep = std::stable_partition(sent.begin(), sent.end(),
                                      [&](const Message& m) { return m.server != server; });
    std::move(keep, sent.end(), std::back_inserter(dropped));
    sent.erase(keep, sent.end());
  }
  // The messages sent since the last call, in order (ZeroMQ let go of them: the server read
  // them, once the caller drops them).
  std::vector<Message> Take() { return std::exchange(sent, {}); }
  // The same for one server's.
  std::vector<Message> Take(int server) {
    auto others = std::stable_partition(sent.begin(), sent.end(),
                                        [&](const Message& m) { return m.server != server; });
    std::vector<Message> taken(std::make_move_iterator(others),
                               std::make_move_iterator(sent.end()));
    sent.erase(others, sent.end());
    return taken;
  }

  absl::Status refusal;  // not OK: every send fails so
  std::vector<Message> sent;
  std::vector<Message> dropped;  // closed connections' messages ZeroMQ has not dropped yet
  std::vector<std::pair<int, std::string>> opened;
  std::vector<int> closed;
};

std::vector<zmq::message_t> ReplyTo(const proto::DataHeader& request, proto::DataOp op,
                                    const std::string& payload = "") {
  proto::DataHeader reply;
  reply.set_op(op);
  reply.set_key(request.key());
  reply.set_round(request.round());
  reply.set_request_id(request.request_id());
  reply.set_server_epoch(request.server_epoch());
  std::vector<zmq::message_t> frames;
  frames.push_back(ProtoFrame(reply));
  if (op == proto::OP_PULL_REPLY) frames.emplace_back(payload.data(), payload.size());
  return frames;
}

std::vector<zmq::message_t> ErrorTo(const proto::DataHeader& request, const std::string& why,
                                    uint64_t epoch) {
  std::vector<zmq::message_t> frames = ReplyTo(request, proto::OP_ERROR);
  proto::DataHeader reply;
  EXPECT_TRUE(reply.ParseFromArray(frames[0].data(), static_cast<int>(frames[0].size())));
  reply.set_error(why);
  reply.set_server_epoch(epoch);
  frames[0] = ProtoFrame(reply);
  return frames;
}

std::string Text(const zmq::message_t& frame) {
  return std::string(static_cast<const char*>(frame.data()), frame.size());
}

class PartitionSenderTest : public ::testing::Test {
 protected:
  // `servers` servers, 3 connections each, a budget of `budget_bytes` per server.
  void StartSender(int servers, int64_t budget_bytes, bool failover = false) {
    config_.set_connections_per_server(3);
    config_.set_partition_bytes(1 << 20);
    config_.set_max_inflight_bytes_per_server(budget_bytes);
    config_.set_server_replacement_timeout_ms(failover ? 10000 : -1);
    PartitionSender::Wiring wiring;
    wiring.config = &config_;
    wiring.servers = servers;
    wiring.rank = 2;
    wiring.connections = &connections_;
    wiring.tracker = &tracker_;
    wiring.traffic = &traffic_;
    wiring.held = &held_;
    wiring.first_request = 100;
    sender_ = std::make_unique<PartitionSender>(wiring);
  }

  // Tensor `tensor` of float32, `elements_each` per partition, partition p on servers[p]; its
  // values count up from 0. Its events are expected.
  std::shared_ptr<Operation> Tensor(uint32_t tensor, std::vector<int32_t> servers, int priority,
                                    int64_t elements_each = 4, bool compressed = false) {
    const int64_t elements = elements_each * static_cast<int64_t>(servers.size());
    auto& values = memory_.emplace_back(std::make_unique<std::vector<float>>(elements));
    std::iota(values->begin(), values->end(), 0.0f);
    auto op = std::make_shared<Operation>(PushPullRequest{.name = absl::StrCat("t", tensor),
                                                          .data = values->data(),
                                                          .element_count = elements,
                                                          .priority = priority});
    OperationStart start{.round = 5, .wire_round = 5};
    start.layout.tensor_id = tensor;
    start.layout.element_count = elements;
    start.layout.partition_elements = elements_each;
    start.layout.partition_server = std::move(servers);
    if (compressed) start.plan.push.set_name("topk");
    op->Start(std::move(start));
    tracker_.Expect(*op);
    return op;
  }

  void Start(const std::shared_ptr<Operation>& op) {
    DataCommand command = StartOperation{op};
    sender_->Take(command);
  }
  void Push(std::shared_ptr<EncodedPush> push) {
    DataCommand command = std::move(push);
    sender_->Take(command);
  }
  void Command(DataCommand command) { sender_->Take(command); }
  std::optional<PulledPartition> Reply(int server, std::vector<zmq::message_t> frames) {
    return sender_->HandleReply(server, frames);
  }

  // Declared first: the recorded messages' free functions report to them.
  std::vector<std::unique_ptr<std::vector<float>>> memory_;
  std::atomic<int> completions_{0};
  OperationTracker tracker_{[this](const std::shared_ptr<Operation>& op) {
    ++completions_;
    op->MarkDone();
  }};
  HeldPayloads held_;
  TrafficCounters traffic_;
  proto::ClusterConfig config_;
  RecordedConnections connections_;
  std::unique_ptr<PartitionSender> sender_;
};

TEST_F(PartitionSenderTest, SendsByPriorityThenFirstComeEachPushWithItsPullBehind) {
  StartSender(/*servers=*/1, /*budget_bytes=*/1 << 30);
  std::shared_ptr<Operation> a = Tensor(1, {0, 0}, /*priority=*/0);
  std::shared_ptr<Operation> b = Tensor(2, {0}, /*priority=*/5);
  std::shared_ptr<Operation> c = Tensor(3, {0}, /*priority=*/0);
  std::shared_ptr<Operation> d = Tensor(4, {0}, /*priority=*/5, 4, /*compressed=*/true);
  Start(a);
  Start(b);
  Start(c);
  std::shared_ptr<EncodedPush> encoded = EncodedPush::For(d, 0);
  encoded->payload = {1, 2, 3};
  Push(encoded);
  EXPECT_EQ(sender_->queued(0), 5);
  EXPECT_TRUE(connections_.sent.empty());  // nothing goes before SendReady
  sender_->SendReady();

  std::vector<RecordedConnections::Message> sent = connections_.Take();
  const std::vector<uint64_t> order = {MakeKey(2, 0), MakeKey(4, 0), MakeKey(1, 0), MakeKey(1, 1),
                                       MakeKey(3, 0)};
  ASSERT_EQ(sent.size(), 2 * order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const RecordedConnections::Message& push = sent[2 * i];
    const RecordedConnections::Message& pull = sent[2 * i + 1];
    SCOPED_TRACE(i);
    EXPECT_EQ(push.header.op(), proto::OP_PUSH);
    EXPECT_EQ(push.header.key(), order[i]);
    EXPECT_EQ(pull.header.op(), proto::OP_PULL);
    EXPECT_EQ(pull.header.key(), order[i]);
    EXPECT_EQ(pull.header.request_id(), push.header.request_id());
    EXPECT_EQ(pull.frames.size(), 1u);
    // One connection per key, the same for its push and its pull, so the server sees them in
    // order.
    const int connection = static_cast<int>((KeyTensor(order[i]) + KeyPartition(order[i])) % 3);
    EXPECT_EQ(push.connection, connection);
    EXPECT_EQ(pull.connection, connection);
    EXPECT_EQ(push.header.sender(), 2);
    EXPECT_EQ(push.header.round(), 5u);
    EXPECT_EQ(push.header.iteration(), 5u);
    EXPECT_EQ(push.header.server_epoch(), 0u);
  }
  EXPECT_EQ(sent[0].header.request_id(), 100u);  // after the link probes' ids
  // An uncompressed push carries the tensor's memory itself; an encoded one its buffer.
  EXPECT_EQ(sent[4].frames[1].data(), a->host_data());
  EXPECT_EQ(sent[6].frames[1].data(), a->host_data() + 4 * sizeof(float));
  EXPECT_EQ(sent[6].header.payload_bytes(), 16);
  EXPECT_EQ(sent[2].frames[1].data(), encoded->payload.data());
  EXPECT_EQ(sent[2].header.codec(), "topk");
  EXPECT_EQ(sent[2].header.payload_bytes(), 3);
  EXPECT_EQ(held_.AwaitNone(absl::ZeroDuration()), 5);
  EXPECT_EQ(sender_->inflight_pushes(0), 5);
  EXPECT_EQ(sender_->inflight_pulls(0), 5);
  EXPECT_EQ(traffic_.inflight_bytes.load(), 4 * 16 + 3);
  EXPECT_EQ(traffic_.pushed_bytes.load(), 4 * 16);  // the stages count encoded pushes

  // ZeroMQ lets go of the messages: each uncompressed partition's payload release is reported.
  EXPECT_TRUE(a->events.Pending(1, PartitionEvent::kPayloadReleased));
  sent.clear();
  EXPECT_FALSE(a->events.Pending(1, PartitionEvent::kPayloadReleased));
  EXPECT_TRUE(a->events.Pending(1, PartitionEvent::kResult));
  EXPECT_EQ(held_.AwaitNone(absl::ZeroDuration()), 0);
}

TEST_F(PartitionSenderTest, TheBudgetOfAServerIsFreedByItsAckNotByOtherServers) {
  StartSender(/*servers=*/2, /*budget_bytes=*/32);  // two partitions of 16 bytes
  std::shared_ptr<Operation> op = Tensor(1, {0, 0, 0, 0, 1}, 0);
  Start(op);
  sender_->SendReady();
  std::vector<RecordedConnections::Message> sent = connections_.Take();
  ASSERT_EQ(sent.size(), 6u);  // partitions 0 and 1 to server 0, 4 to server 1
  EXPECT_EQ(sent[4].server, 1);
  EXPECT_EQ(sender_->queued(0), 2);
  EXPECT_EQ(sender_->inflight_bytes(0), 32);
  EXPECT_EQ(sender_->inflight_bytes(1), 16);
  EXPECT_EQ(traffic_.queued_partitions.load(), 2);
  EXPECT_EQ(traffic_.inflight_bytes.load(), 48);

  // Server 1's ack frees server 1's budget only.
  EXPECT_FALSE(Reply(1, ReplyTo(sent[4].header, proto::OP_PUSH_ACK)).has_value());
  sender_->SendReady();
  EXPECT_TRUE(connections_.sent.empty());
  EXPECT_EQ(sender_->inflight_bytes(1), 0);
  EXPECT_EQ(sender_->inflight_pushes(1), 0);
  EXPECT_EQ(sender_->inflight_pulls(1), 1);  // its pull waits for the round

  // Server 0's ack of partition 0 lets partition 2 go, before any pull is answered.
  EXPECT_FALSE(Reply(0, ReplyTo(sent[0].header, proto::OP_PUSH_ACK)).has_value());
  EXPECT_EQ(sender_->inflight_bytes(0), 16);
  sender_->SendReady();
  std::vector<RecordedConnections::Message> more = connections_.Take();
  ASSERT_EQ(more.size(), 2u);
  EXPECT_EQ(more[0].header.key(), MakeKey(1, 2));
  EXPECT_EQ(sender_->queued(0), 1);
  EXPECT_EQ(sender_->inflight_bytes(0), 32);
  EXPECT_EQ(traffic_.inflight_bytes.load(), 32);

  // A pull reply without an ack frees its push's bytes too, and comes back for the stages.
  std::optional<PulledPartition> pulled =
      Reply(0, ReplyTo(sent[2].header, proto::OP_PULL_REPLY, "the sum"));
  ASSERT_TRUE(pulled.has_value());
  EXPECT_EQ(pulled->op, op);
  EXPECT_EQ(pulled->partition, 1);
  EXPECT_EQ(pulled->server, 0);
  EXPECT_EQ(Text(pulled->payload), "the sum");
  EXPECT_EQ(sender_->inflight_bytes(0), 16);
  EXPECT_EQ(sender_->inflight_pulls(0), 2);
  // A late reply for an answered request is no answer.
  EXPECT_FALSE(Reply(0, ReplyTo(sent[2].header, proto::OP_PULL_REPLY, "again")).has_value());
  EXPECT_EQ(sender_->inflight_pulls(0), 2);
}

TEST_F(PartitionSenderTest, APartitionOverTheBudgetGoesAloneWhenNothingIsInFlight) {
  StartSender(/*servers=*/1, /*budget_bytes=*/8);
  Start(Tensor(1, {0, 0}, 0));  // 16 bytes each
  sender_->SendReady();
  std::vector<RecordedConnections::Message> sent = connections_.Take();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sender_->queued(0), 1);
  Reply(0, ReplyTo(sent[0].header, proto::OP_PUSH_ACK));
  sender_->SendReady();
  EXPECT_EQ(connections_.Take().size(), 2u);
  EXPECT_EQ(sender_->queued(0), 0);
}

TEST_F(PartitionSenderTest, PullsBeyondTheCapWaitInOrderUntilAnswersCome) {
  constexpr int kCap = PartitionSender::kMaxInflightPullsPerServer;
  static_assert(PartitionSender::kMaxInflightPushesPerServer == kCap);
  StartSender(/*servers=*/1, /*budget_bytes=*/1 << 30);
  std::shared_ptr<Operation> op = Tensor(1, std::vector<int32_t>(kCap + 2, 0), 0, 1);
  Start(op);
  sender_->SendReady();
  std::vector<RecordedConnections::Message> first = connections_.Take();
  ASSERT_EQ(first.size(), 2u * kCap);  // the pushes' cap
  EXPECT_EQ(sender_->queued(0), 2);
  for (int i = 0; i < kCap; ++i) Reply(0, ReplyTo(first[2 * i].header, proto::OP_PUSH_ACK));
  EXPECT_EQ(sender_->inflight_pushes(0), 0);
  EXPECT_EQ(sender_->inflight_pulls(0), kCap);

  // The last two pushes go; their pulls wait.
  sender_->SendReady();
  std::vector<RecordedConnections::Message> pushes = connections_.Take();
  ASSERT_EQ(pushes.size(), 2u);
  EXPECT_EQ(pushes[0].header.op(), proto::OP_PUSH);
  EXPECT_EQ(pushes[0].header.key(), MakeKey(1, kCap));
  EXPECT_EQ(pushes[1].header.op(), proto::OP_PUSH);
  EXPECT_EQ(pushes[1].header.key(), MakeKey(1, kCap + 1));
  EXPECT_EQ(sender_->deferred_pulls(0), 2);
  EXPECT_EQ(sender_->inflight_pulls(0), kCap);

  // Each answer lets the first waiting pull go, on its push's connection.
  ASSERT_TRUE(Reply(0, ReplyTo(first[7].header, proto::OP_PULL_REPLY, "r")).has_value());
  std::vector<RecordedConnections::Message> pull = connections_.Take();
  ASSERT_EQ(pull.size(), 1u);
  EXPECT_EQ(pull[0].header.op(), proto::OP_PULL);
  EXPECT_EQ(pull[0].header.request_id(), pushes[0].header.request_id());
  EXPECT_EQ(pull[0].connection, pushes[0].connection);
  EXPECT_EQ(sender_->deferred_pulls(0), 1);
  EXPECT_EQ(sender_->inflight_pulls(0), kCap);
  // An error answer frees a place just as well (after the abort it sends).
  Reply(0, ErrorTo(first[9].header, "refused", 0));
  pull = connections_.Take();
  ASSERT_EQ(pull.size(), 2u);
  EXPECT_EQ(pull[0].header.op(), proto::OP_PULL);
  EXPECT_EQ(pull[0].header.request_id(), pushes[1].header.request_id());
  EXPECT_EQ(pull[1].header.op(), proto::OP_PUSH);
  EXPECT_EQ(pull[1].header.error(), "refused");
  EXPECT_EQ(sender_->deferred_pulls(0), 0);
}

TEST_F(PartitionSenderTest, AnErrorReplyFailsThePartitionAndAbortsItsRoundOnTheServer) {
  StartSender(/*servers=*/1, /*budget_bytes=*/1 << 30);
  std::shared_ptr<Operation> op = Tensor(1, {0, 0}, 0);
  Start(op);
  sender_->SendReady();
  std::vector<RecordedConnections::Message> sent = connections_.Take();
  ASSERT_EQ(sent.size(), 4u);
  EXPECT_FALSE(Reply(0, ErrorTo(sent[0].header, "round 5 of key 1:0 is over", 0)).has_value());
  EXPECT_FALSE(op->events.Pending(0, PartitionEvent::kResult));
  EXPECT_TRUE(op->events.Pending(1, PartitionEvent::kResult));
  EXPECT_EQ(op->status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(op->status().message(), "round 5 of key 1:0 is over");
  // The round must still complete on the server for the other workers: an abort, a push that
  // carries the error and no payload, on the key's connection, waited for by nobody.
  std::vector<RecordedConnections::Message> abort = connections_.Take();
  ASSERT_EQ(abort.size(), 1u);
  EXPECT_EQ(abort[0].header.op(), proto::OP_PUSH);
  EXPECT_EQ(abort[0].header.key(), MakeKey(1, 0));
  EXPECT_EQ(abort[0].header.error(), "round 5 of key 1:0 is over");
  EXPECT_EQ(abort[0].frames.size(), 1u);
  EXPECT_EQ(abort[0].connection, sent[0].connection);
  EXPECT_NE(abort[0].header.request_id(), sent[0].header.request_id());
  EXPECT_EQ(sender_->inflight_pushes(0), 1);
  EXPECT_EQ(sender_->inflight_pulls(0), 1);
  EXPECT_EQ(sender_->inflight_bytes(0), 16);
  // The abort's answer matches nothing.
  EXPECT_FALSE(Reply(0, ReplyTo(abort[0].header, proto::OP_PUSH_ACK)).has_value());
  EXPECT_EQ(sender_->inflight_pushes(0), 1);
  EXPECT_EQ(completions_, 0);
}

TEST_F(PartitionSenderTest, AnAbortedEncodingPushesItsErrorAndItsPullReplyIsTheResult) {
  StartSender(/*servers=*/1, /*budget_bytes=*/1 << 30);
  std::shared_ptr<Operation> op = Tensor(1, {0}, 0, 4, /*compressed=*/true);
  op->RecordError(absl::InternalError("encoding failed"));  // as the stages do
  std::shared_ptr<EncodedPush> aborted = EncodedPush::For(op, 0);
  aborted->abort_error = "encoding failed";
  Push(aborted);
  sender_->SendReady();
  std::vector<RecordedConnections::Message> sent = connections_.Take();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].header.error(), "encoding failed");
  EXPECT_EQ(sent[0].frames.size(), 1u);
  EXPECT_EQ(sent[1].header.op(), proto::OP_PULL);
  EXPECT_FALSE(Reply(0, ReplyTo(sent[1].header, proto::OP_PULL_REPLY, "sum")).has_value());
  EXPECT_EQ(completions_, 1);
  EXPECT_EQ(op->outcome()->message(), "encoding failed");
}

TEST_F(PartitionSenderTest, ASendZeroMQRefusesFailsThePartitionAndReleasesItsPayload) {
  StartSender(/*servers=*/1, /*budget_bytes=*/1 << 30);
  std::shared_ptr<Operation> op = Tensor(1, {0}, 0);
  connections_.refusal = absl::ResourceExhaustedError("send would block");
  Start(op);
  sender_->SendReady();
  EXPECT_EQ(completions_, 1);
  EXPECT_EQ(op->outcome()->code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(op->outcome()->message(), "sending to server 0: send would block");
  EXPECT_EQ(held_.AwaitNone(absl::ZeroDuration()), 0);
  EXPECT_EQ(sender_->inflight_pushes(0), 0);
  EXPECT_EQ(sender_->inflight_bytes(0), 0);
}

TEST_F(PartitionSenderTest, FailAllFailsWhatIsQueuedAndInFlightAndEverythingLater) {
  StartSender(/*servers=*/2, /*budget_bytes=*/16);
  std::shared_ptr<Operation> op = Tensor(1, {0, 0, 1}, 0);
  Start(op);
  sender_->SendReady();  // partitions 0 and 2 in flight, 1 queued
  EXPECT_EQ(sender_->queued(0), 1);
  Command(FailEverything{absl::UnavailableError("the scheduler is gone")});
  EXPECT_EQ(sender_->closed().message(), "the scheduler is gone");
  EXPECT_EQ(connections_.closed, (std::vector<int>{0, 1}));
  EXPECT_EQ(sender_->queued(0), 0);
  for (int p = 0; p < 3; ++p) EXPECT_FALSE(op->events.Pending(p, PartitionEvent::kResult));
  // The queued partition never went out: its release is reported here. The others' come when
  // ZeroMQ drops their messages.
  EXPECT_FALSE(op->events.Pending(1, PartitionEvent::kPayloadReleased));
  EXPECT_TRUE(op->events.Pending(0, PartitionEvent::kPayloadReleased));
  EXPECT_EQ(completions_, 0);
  connections_.dropped.clear();
  EXPECT_EQ(completions_, 1);
  EXPECT_EQ(op->outcome()->message(), "the scheduler is gone");

  // Later work fails at once, with the first reason.
  sender_->FailAll(absl::CancelledError("the engine stopped"));
  std::shared_ptr<Operation> later = Tensor(2, {0, 1}, 0);
  Start(later);
  EXPECT_EQ(completions_, 2);
  EXPECT_EQ(later->outcome()->message(), "the scheduler is gone");
  std::shared_ptr<Operation> encoded = Tensor(3, {0}, 0, 4, /*compressed=*/true);
  Push(EncodedPush::For(encoded, 0));
  EXPECT_EQ(completions_, 3);
  EXPECT_EQ(encoded->outcome()->message(), "the scheduler is gone");
  sender_->SendReady();
  EXPECT_TRUE(connections_.sent.empty());
}

TEST_F(PartitionSenderTest, FailAllLeavesAPushSentAgainItsFirstMessagesRelease) {
  StartSender(/*servers=*/1, /*budget_bytes=*/1 << 30, /*failover=*/true);
  std::shared_ptr<Operation> op = Tensor(1, {0}, 0);
  Start(op);
  sender_->SendReady();
  // A replacement: the push is queued to go again; its first message is still in ZeroMQ.
  Command(ReconnectServer{0, "tcp://replacement:1", 1, ""});
  ASSERT_EQ(connections_.dropped.size(), 2u);
  EXPECT_EQ(sender_->queued(0), 1);
  Command(FailEverything{absl::UnavailableError("gone")});
  EXPECT_FALSE(op->events.Pending(0, PartitionEvent::kResult));
  // Not reported here: the first message's free function reports it, once.
  EXPECT_TRUE(op->events.Pending(0, PartitionEvent::kPayloadReleased));
  EXPECT_EQ(completions_, 0);
  connections_.dropped.clear();
  EXPECT_EQ(completions_, 1);
  EXPECT_EQ(held_.AwaitNone(absl::ZeroDuration()), 0);
}

TEST_F(PartitionSenderTest, AReplacementGetsTheKeptResultsThenTheUnansweredRequestsInOrder) {
  StartSender(/*servers=*/2, /*budget_bytes=*/1 << 30, /*failover=*/true);
  // Key 1:0 completes a round on server 0: its result is kept.
  std::shared_ptr<Operation> done = Tensor(1, {0}, 0);
  Start(done);
  sender_->SendReady();
  std::vector<RecordedConnections::Message> sent = connections_.Take();
  const std::string sum(64, 's');  // long enough that ZeroMQ shares it rather than copies
  std::optional<PulledPartition> pulled =
      Reply(0, ReplyTo(sent[0].header, proto::OP_PULL_REPLY, sum));
  ASSERT_TRUE(pulled.has_value());
  EXPECT_EQ(sender_->failover().kept(), 1);
  sent.clear();
  pulled.reset();

  std::shared_ptr<Operation> low = Tensor(2, {0, 0}, /*priority=*/0);
  std::shared_ptr<Operation> high = Tensor(3, {0}, /*priority=*/3);
  std::shared_ptr<Operation> other = Tensor(4, {1}, 0);
  Start(low);
  Start(high);
  Start(other);
  sender_->SendReady();
  ASSERT_EQ(connections_.sent.size(), 8u);
  // Server 1 read its request. Server 0 acked partition 2:0's push only and answered no pull;
  // what it was sent is still in ZeroMQ.
  EXPECT_EQ(connections_.Take(1).size(), 2u);
  Reply(0, ReplyTo(connections_.sent[2].header, proto::OP_PUSH_ACK));

  Command(ReconnectServer{0, "tcp://replacement:1", 7, ""});
  EXPECT_EQ(connections_.opened,
            (std::vector<std::pair<int, std::string>>{{0, "tcp://replacement:1"}}));
  // First the kept result, as a replay, on its key's connection, with the new epoch.
  std::vector<RecordedConnections::Message> replay = connections_.Take();
  ASSERT_EQ(replay.size(), 1u);
  EXPECT_EQ(replay[0].server, 0);
  EXPECT_EQ(replay[0].connection, (1 + 0) % 3);
  EXPECT_TRUE(replay[0].header.replay());
  EXPECT_EQ(replay[0].header.op(), proto::OP_PUSH);
  EXPECT_EQ(replay[0].header.key(), MakeKey(1, 0));
  EXPECT_EQ(replay[0].header.round(), 5u);
  EXPECT_EQ(replay[0].header.server_epoch(), 7u);
  EXPECT_EQ(replay[0].header.payload_bytes(), 64);
  ASSERT_EQ(replay[0].frames.size(), 2u);
  EXPECT_EQ(Text(replay[0].frames[1]), sum);
  EXPECT_EQ(sender_->inflight_pushes(0), 0);
  EXPECT_EQ(sender_->inflight_pulls(0), 0);
  EXPECT_EQ(sender_->queued(0), 3);

  // Then every request the lost server had not answered, in their first order, pushes and
  // pulls, with the new epoch; an uncompressed payload as a copy (its first message reports
  // the release).
  const int64_t held = held_.AwaitNone(absl::ZeroDuration());
  sender_->SendReady();
  std::vector<RecordedConnections::Message> again = connections_.Take();
  const std::vector<uint64_t> order = {MakeKey(3, 0), MakeKey(2, 0), MakeKey(2, 1)};
  ASSERT_EQ(again.size(), 2 * order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(again[2 * i].header.op(), proto::OP_PUSH);
    EXPECT_EQ(again[2 * i].header.key(), order[i]);
    EXPECT_FALSE(again[2 * i].header.replay());
    EXPECT_EQ(again[2 * i].header.server_epoch(), 7u);
    EXPECT_EQ(again[2 * i + 1].header.op(), proto::OP_PULL);
    EXPECT_EQ(again[2 * i + 1].header.server_epoch(), 7u);
  }
  EXPECT_NE(again[2].frames[1].data(), low->host_data());
  EXPECT_EQ(std::memcmp(again[2].frames[1].data(), low->host_data(), 16), 0);
  EXPECT_EQ(held_.AwaitNone(absl::ZeroDuration()), held);
  // Server 1 was not touched.
  EXPECT_EQ(sender_->inflight_pulls(1), 1);
  EXPECT_EQ(sender_->failover().epoch(1), 0u);
  // The lost server's messages are released once, by their first message.
  EXPECT_TRUE(low->events.Pending(0, PartitionEvent::kPayloadReleased));
  connections_.dropped.clear();
  again.clear();
  EXPECT_FALSE(low->events.Pending(0, PartitionEvent::kPayloadReleased));
  EXPECT_TRUE(low->events.Pending(0, PartitionEvent::kResult));
}

TEST_F(PartitionSenderTest, MovedKeysGoToTheSurvivorsAfterTheirKeptResults) {
  StartSender(/*servers=*/3, /*budget_bytes=*/16, /*failover=*/true);
  std::shared_ptr<Operation> done = Tensor(1, {2}, 0);
  Start(done);
  sender_->SendReady();
  std::vector<RecordedConnections::Message> sent = connections_.Take();
  ASSERT_TRUE(Reply(2, ReplyTo(sent[0].header, proto::OP_PULL_REPLY, "kept")).has_value());
  sent.clear();
  std::shared_ptr<Operation> op = Tensor(2, {2, 2}, 0);
  Start(op);
  sender_->SendReady();  // 2:0 in flight, 2:1 queued (the budget)
  EXPECT_EQ(connections_.Take().size(), 2u);
  EXPECT_EQ(sender_->queued(2), 1);

  Command(MoveKeys{
      2, {{MakeKey(1, 0), 0}, {MakeKey(2, 0), 1}, {MakeKey(2, 1), 0}, {MakeKey(9, 0), 5}}});
  EXPECT_EQ(connections_.closed, (std::vector<int>{2}));
  std::vector<RecordedConnections::Message> replay = connections_.Take();
  ASSERT_EQ(replay.size(), 1u);
  EXPECT_EQ(replay[0].server, 0);
  EXPECT_TRUE(replay[0].header.replay());
  EXPECT_EQ(replay[0].header.key(), MakeKey(1, 0));
  EXPECT_EQ(Text(replay[0].frames[1]), "kept");
  EXPECT_EQ(sender_->queued(2), 0);
  EXPECT_EQ(sender_->inflight_bytes(2), 0);
  EXPECT_EQ(sender_->inflight_pushes(2), 0);
  EXPECT_EQ(sender_->inflight_pulls(2), 0);

  sender_->SendReady();
  std::vector<RecordedConnections::Message> moved = connections_.Take();
  ASSERT_EQ(moved.size(), 4u);  // by server: 0, then 1
  EXPECT_EQ(moved[0].server, 0);
  EXPECT_EQ(moved[0].header.key(), MakeKey(2, 1));
  EXPECT_EQ(moved[2].server, 1);
  EXPECT_EQ(moved[2].header.key(), MakeKey(2, 0));
  EXPECT_EQ(moved[3].header.op(), proto::OP_PULL);
  // A second move replays nothing again; later rounds of a moved key go to its new server.
  Command(MoveKeys{2, {}});
  EXPECT_TRUE(connections_.sent.empty());
  std::shared_ptr<Operation> next = Tensor(2, {2, 2}, 0);
  Start(next);
  EXPECT_EQ(sender_->queued(1), 1);
  EXPECT_EQ(sender_->queued(0), 1);
  EXPECT_EQ(sender_->queued(2), 0);
}

TEST_F(PartitionSenderTest, RequestsCarryTheirServersEpochAndARefusalFromAnotherIsNoAnswer) {
  StartSender(/*servers=*/1, /*budget_bytes=*/1 << 30, /*failover=*/true);
  Command(ReconnectServer{0, "tcp://replacement:1", 3, ""});
  std::shared_ptr<Operation> op = Tensor(1, {0}, 0);
  Start(op);
  sender_->SendReady();
  std::vector<RecordedConnections::Message> sent = connections_.Take();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].header.server_epoch(), 3u);
  EXPECT_EQ(sent[1].header.server_epoch(), 3u);
  // A newer replacement this worker has not heard of refused it: the request stays, to go
  // again once its ServerReplaced comes.
  EXPECT_FALSE(Reply(0, ErrorTo(sent[0].header, "wrong epoch", 4)).has_value());
  EXPECT_TRUE(op->events.Pending(0, PartitionEvent::kResult));
  EXPECT_TRUE(op->status().ok());
  EXPECT_EQ(sender_->inflight_pulls(0), 1);
  EXPECT_TRUE(connections_.sent.empty());  // no abort
  Command(ReconnectServer{0, "tcp://replacement:2", 4, ""});
  sender_->SendReady();
  sent = connections_.Take();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].header.server_epoch(), 4u);
  // A refusal from its own epoch is an answer.
  Reply(0, ErrorTo(sent[0].header, "refused", 4));
  EXPECT_FALSE(op->events.Pending(0, PartitionEvent::kResult));
  EXPECT_EQ(op->status().message(), "refused");
}

}  // namespace
}  // namespace bytecomp::worker
