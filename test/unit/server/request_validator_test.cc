// RequestValidator: link probe requests (OP_PROBE) are checked field by field.
#include "bytecomp/server/request_validator.h"

#include <gtest/gtest.h>

#include "bytecomp/common/link_probe.h"
#include "server_test_util.h"

namespace bytecomp::server {
namespace {

proto::DataHeader Probe(int64_t payload, int64_t reply) {
  proto::DataHeader h;
  h.set_op(proto::OP_PROBE);
  h.set_sender(1);
  h.set_request_id(42);
  h.set_payload_bytes(payload);
  h.set_probe_reply_bytes(reply);
  return h;
}

std::string Why(const RequestValidator& v, const proto::DataHeader& h, bool has_payload,
                size_t size) {
  absl::Status s = v.ValidateProbe(h, has_payload, size);
  return s.ok() ? "ok" : std::string(s.message());
}

TEST(RequestValidatorTest, ProbesWithinBoundsAreAccepted) {
  RequestValidator v(server_test::Job(/*workers=*/2));
  EXPECT_EQ(Why(v, Probe(16, 16), true, 16), "ok");
  EXPECT_EQ(Why(v, Probe(0, 1 << 20), false, 0), "ok");
  EXPECT_EQ(Why(v, Probe(kMaxProbeBytes, 0), true, kMaxProbeBytes), "ok");
  EXPECT_EQ(Why(v, Probe(0, kMaxProbeBytes), false, 0), "ok");
  proto::DataHeader tool = Probe(0, 0);
  tool.set_sender(-1);  // bytecomp-linkprobe, outside the job
  EXPECT_EQ(Why(v, tool, false, 0), "ok");
}

TEST(RequestValidatorTest, BadProbesAreRefusedWithTheField) {
  RequestValidator v(server_test::Job(2));
  EXPECT_EQ(Why(v, Probe(0, kMaxProbeBytes + 1), false, 0),
            "link probe: probe_reply_bytes 67108865 is outside [0, 67108864]");
  EXPECT_EQ(Why(v, Probe(0, -1), false, 0),
            "link probe: probe_reply_bytes -1 is outside [0, 67108864]");
  EXPECT_EQ(Why(v, Probe(kMaxProbeBytes + 1, 0), true, kMaxProbeBytes + 1),
            "link probe: payload_bytes 67108865 is outside [0, 67108864]");
  EXPECT_EQ(Why(v, Probe(100, 0), true, 99),
            "link probe: payload is 99 bytes, header says 100 bytes (0: no payload frame)");
  EXPECT_EQ(Why(v, Probe(100, 0), false, 0),
            "link probe: payload is absent, header says 100 bytes (0: no payload frame)");
  EXPECT_EQ(Why(v, Probe(0, 0), true, 0),
            "link probe: payload is 0 bytes, header says 0 bytes (0: no payload frame)");
  proto::DataHeader h = Probe(0, 0);
  h.set_sender(2);
  EXPECT_EQ(Why(v, h, false, 0),
            "link probe: sender 2 is not a worker rank (0..1) nor -1 (a tool outside the job)");
  h.set_sender(-2);
  EXPECT_NE(Why(v, h, false, 0).find("sender -2"), std::string::npos);
  h = Probe(0, 0);
  h.set_key(5);
  EXPECT_EQ(Why(v, h, false, 0),
            "link probe: key, round, iteration, stage and strategy_version must be 0, got key 5 "
            "round 0 iteration 0 stage 0 strategy_version 0");
  h = Probe(0, 0);
  h.set_strategy_version(3);
  EXPECT_NE(Why(v, h, false, 0).find("strategy_version 3"), std::string::npos);
  for (int field = 0; field < 4; ++field) {
    h = Probe(0, 0);
    if (field == 0) h.set_codec("topk");
    if (field == 1) h.set_dtype(proto::DTYPE_FLOAT16);
    if (field == 2) h.set_element_count(10);
    if (field == 3) h.set_error("abort");
    EXPECT_EQ(Why(v, h, false, 0),
              "link probe: codec, dtype, element_count and error must be unset")
        << field;
  }
  h = Probe(0, 0);
  h.set_op(proto::OP_PUSH);
  EXPECT_EQ(Why(v, h, false, 0), "link probe: op OP_PUSH is not OP_PROBE");
}

proto::DataHeader TurnProbe(int turn, int64_t turn_ms, int64_t payload = 0, int64_t reply = 0) {
  proto::DataHeader h = Probe(payload, reply);
  h.set_probe_turn(static_cast<proto::ProbeTurn>(turn));
  h.set_probe_turn_ms(turn_ms);
  return h;
}

TEST(RequestValidatorTest, ProbeTurnFieldsAreChecked) {
  RequestValidator v(server_test::Job(2));
  EXPECT_EQ(Why(v, TurnProbe(proto::PROBE_TURN_BEGIN, 2500), false, 0), "ok");
  EXPECT_EQ(Why(v, TurnProbe(proto::PROBE_TURN_BEGIN, kMaxProbeTurnMs), false, 0), "ok");
  // END may also ride on a transfer.
  EXPECT_EQ(Why(v, TurnProbe(proto::PROBE_TURN_END, 0, 0, 1 << 20), false, 0), "ok");
  EXPECT_EQ(Why(v, TurnProbe(proto::PROBE_TURN_QUERY, 0), false, 0), "ok");

  EXPECT_EQ(Why(v, TurnProbe(proto::PROBE_TURN_BEGIN, 0), false, 0),
            "link probe: probe_turn_ms 0 is outside [1, 600000] (the longest the sender holds "
            "the bandwidth turn)");
  EXPECT_EQ(Why(v, TurnProbe(proto::PROBE_TURN_BEGIN, kMaxProbeTurnMs + 1), false, 0),
            "link probe: probe_turn_ms 600001 is outside [1, 600000] (the longest the sender "
            "holds the bandwidth turn)");
  EXPECT_EQ(Why(v, TurnProbe(proto::PROBE_TURN_BEGIN, 10, 16, 0), true, 16),
            "link probe: a PROBE_TURN_BEGIN probe carries no payload either way, got "
            "payload_bytes 16 and probe_reply_bytes 0");
  EXPECT_EQ(Why(v, TurnProbe(proto::PROBE_TURN_QUERY, 0, 0, 8), false, 0),
            "link probe: a PROBE_TURN_QUERY probe carries no payload either way, got "
            "payload_bytes 0 and probe_reply_bytes 8");
  EXPECT_EQ(Why(v, TurnProbe(proto::PROBE_TURN_END, 5), false, 0),
            "link probe: probe_turn_ms must be 0 without PROBE_TURN_BEGIN, got 5");
  EXPECT_EQ(Why(v, TurnProbe(proto::PROBE_TURN_NONE, -1), false, 0),
            "link probe: probe_turn_ms must be 0 without PROBE_TURN_BEGIN, got -1");
  EXPECT_EQ(Why(v, TurnProbe(proto::PROBE_TURN_QUERY, 100), false, 0),
            "link probe: probe_turn_ms must be 0 without PROBE_TURN_BEGIN, got 100");

  // Reply values, and one this build does not know.
  EXPECT_EQ(Why(v, TurnProbe(proto::PROBE_TURN_GRANTED, 0), false, 0),
            "link probe: probe_turn 3 (PROBE_TURN_GRANTED) is not one a probe asks with "
            "(PROBE_TURN_NONE, PROBE_TURN_BEGIN, PROBE_TURN_END or PROBE_TURN_QUERY)");
  EXPECT_NE(Why(v, TurnProbe(proto::PROBE_TURN_BUSY, 0), false, 0)
                .find("probe_turn 4 (PROBE_TURN_BUSY) is not"),
            std::string::npos);
  EXPECT_NE(Why(v, TurnProbe(proto::PROBE_TURN_IDLE, 0), false, 0)
                .find("probe_turn 6 (PROBE_TURN_IDLE) is not"),
            std::string::npos);
  EXPECT_EQ(Why(v, TurnProbe(77, 0), false, 0),
            "link probe: probe_turn 77 is not one a probe asks with (PROBE_TURN_NONE, "
            "PROBE_TURN_BEGIN, PROBE_TURN_END or PROBE_TURN_QUERY)");
}

TEST(RequestValidatorTest, DataValidationRefusesProbeReplies) {
  RequestValidator v(server_test::Job(2));
  proto::DataHeader h = Probe(0, 0);
  h.set_op(proto::OP_PROBE_REPLY);
  absl::Status s = v.Validate(h, false, 0);
  EXPECT_EQ(s.message(), "unsupported op OP_PROBE_REPLY (expected OP_PUSH or OP_PULL)");
}

// A push or pull is taken as worker r's only with worker r's token: none, another worker's, or
// a guessed one are refused before anything about the key is looked at.
TEST(RequestValidatorTest, RequestsWithoutTheSendersTokenAreRefused) {
  RequestValidator v(server_test::Job(2));
  ASSERT_TRUE(v.catalog().AddTensor(server_test::DeclareTensor(4)).ok());
  proto::DataHeader push = server_test::Request(proto::OP_PUSH, 1, 0, 4);
  push.set_payload_bytes(16);
  EXPECT_TRUE(v.CheckSender(push).ok());
  EXPECT_TRUE(v.Validate(push, true, 16).ok());

  proto::DataHeader none = push;
  none.clear_token_high();
  none.clear_token_low();
  proto::DataHeader other = push;  // worker 0's token, naming worker 1
  SetHeaderToken(server_test::TokenOf(0), &other);
  proto::DataHeader close = push;  // one bit off
  close.set_token_low(push.token_low() ^ 1);
  proto::DataHeader abort = push;  // an abort as worker 1, without its token
  abort.set_error("aborted by an outsider");
  abort.clear_token_high();
  proto::DataHeader pull = server_test::Request(proto::OP_PULL, 1, 0, 4);
  SetHeaderToken(server_test::TokenOf(0), &pull);
  for (const proto::DataHeader& h : {none, other, close, abort, pull}) {
    absl::Status s = v.CheckSender(h);
    EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
    EXPECT_EQ(s.message(),
              "the request names worker 1 but does not carry its token: a connection pushes and "
              "pulls only as the rank the scheduler gave its node");
    EXPECT_TRUE(
        absl::IsPermissionDenied(v.Validate(h, h.op() == proto::OP_PUSH && h.error().empty(), 16)));
  }
  // The token of a rank outside the job does not help either.
  proto::DataHeader foreign = push;
  foreign.set_sender(2);
  EXPECT_EQ(v.CheckSender(foreign).message(), "sender 2 is not a worker rank (0..1)");
}

TEST(NodeTokenTest, TokensCompareByValueAndEmptyMatchesNothing) {
  const NodeToken a = NewNodeToken(), b = NewNodeToken();
  EXPECT_FALSE(a.empty());
  EXPECT_TRUE(SameToken(a, a));
  EXPECT_FALSE(SameToken(a, b));
  EXPECT_FALSE(SameToken(NodeToken{}, NodeToken{}));
  std::optional<NodeToken> back = TokenFromBytes(TokenBytes(a));
  ASSERT_TRUE(back.has_value());
  EXPECT_TRUE(SameToken(*back, a));
  EXPECT_FALSE(TokenFromBytes(std::string(16, '\0')).has_value());
  EXPECT_FALSE(TokenFromBytes("short").has_value());
}

std::string WhyRequest(RequestValidator& v, const proto::DataHeader& h, size_t size) {
  absl::Status s = v.Validate(h, size > 0, size);
  return s.ok() ? "ok" : std::string(s.message());
}

TEST(RequestValidatorTest, ReplaysCarryARoundsResultWithinItsBound) {
  RequestValidator v(server_test::Job(2));
  ASSERT_TRUE(v.catalog().AddTensor(server_test::DeclareTensor(4, proto::DTYPE_FLOAT32)).ok());
  proto::DataHeader h = server_test::Request(proto::OP_PUSH, 1, 3, 4);
  h.set_replay(true);
  h.set_payload_bytes(16);
  EXPECT_EQ(WhyRequest(v, h, 16), "ok");
  h.set_codec("topk");
  EXPECT_EQ(WhyRequest(v, h, 16),
            "key 1:0 round 3: a replay's codec 'topk' is none the round's result can have");
  h.set_codec("");
  h.set_payload_bytes(20);
  EXPECT_EQ(WhyRequest(v, h, 20),
            "key 1:0 round 3: a replay's payload is 20 bytes (header 20), "
            "at most 16");
  proto::DataHeader pull = server_test::Request(proto::OP_PULL, 1, 3, 4);
  pull.set_replay(true);
  EXPECT_EQ(WhyRequest(v, pull, 0), "key 1:0 round 3: only a push can be a replay");
}

TEST(RequestValidatorTest, ARequestForAnotherServerEpochIsRefused) {
  ServerJob job = server_test::Job(2);
  job.epoch = 77;
  RequestValidator v(job);
  proto::DataHeader h = server_test::Request(proto::OP_PULL, 1, 3, 4);
  EXPECT_EQ(v.CheckSender(h).message(),
            "the request is for server 0 epoch 0, this is epoch 77: it was sent to a server that "
            "this one replaced");
  h.set_server_epoch(77);
  EXPECT_TRUE(v.CheckSender(h).ok());
}

}  // namespace
}  // namespace bytecomp::server
