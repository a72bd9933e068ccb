// Requests, payloads and declarations for the server's socket-free tests: one server (rank 0)
// that owns every partition, tensors named "t<id>".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bytecomp/common.h"
#include "bytecomp/compress.h"
#include "bytecomp/server/catalog.h"
#include "bytecomp/server/key_store.h"
#include "bytecomp/server/server_job.h"
#include "control.pb.h"
#include "data.pb.h"
#include "gtest/gtest.h"
#include "strategy.pb.h"
#include "zmq.hpp"

namespace bytecomp::server::server_test {

inline constexpr uint64_t kSeed = 42;

// A one-partition tensor of n elements, owned by server 0.
inline proto::DeclareReply DeclareTensor(int64_t n, proto::DType dtype = proto::DTYPE_FLOAT32,
                                         uint32_t tensor_id = 1) {
  proto::DeclareReply d;
  d.set_name("t" + std::to_string(tensor_id));
  d.set_ok(true);
  d.set_tensor_id(tensor_id);
  d.set_element_count(n);
  d.set_partition_elements(n);
  d.set_dtype(dtype);
  d.add_partition_server(0);
  return d;
}

// Every tensor compressed with `push` (and re-encoded with `pull` when not empty), whatever its
// size.
inline proto::Strategy StrategyWith(uint64_t version, const std::string& push,
                                    const std::string& pull) {
  proto::Strategy s;
  s.set_version(version);
  s.set_seed(kSeed);
  proto::TensorStrategy* t = s.add_tensors();
  t->set_name_pattern("*");
  t->mutable_push_codec()->set_name(push);
  if (!pull.empty()) t->mutable_pull_codec()->set_name(pull);
  t->set_force(true);
  return s;
}

inline uint64_t RequestId(int sender, uint64_t round) { return 1000 * sender + round; }

// Worker r's token in these tests (never empty).
inline NodeToken TokenOf(int rank) {
  return NodeToken{0x5eed000000000000ull + static_cast<uint64_t>(rank), 0x70c3e17ull + rank};
}

// Server 0 of a job of `workers` workers (tokens TokenOf) and `servers` servers, the default
// limits, `pushers` (empty: every worker).
inline ServerJob Job(int workers, int servers = 1, std::vector<int> pushers = {}) {
  ServerJob job;
  job.my_rank = 0;
  job.num_workers = workers;
  job.num_servers = servers;
  job.pushers = std::move(pushers);
  for (int r = 0; r < workers; ++r) job.worker_tokens.push_back(TokenOf(r));
  job.config = WithClusterDefaults({});
  return job;
}

// A raw PUSH or PULL of partition 0 of tensor 1 (or as set after), iteration = round.
inline proto::DataHeader Request(proto::DataOp op, int sender, uint64_t round, int64_t n,
                                 proto::DType dtype = proto::DTYPE_FLOAT32) {
  proto::DataHeader h;
  h.set_op(op);
  h.set_key(MakeKey(1, 0));
  h.set_round(round);
  h.set_iteration(round);
  h.set_dtype(dtype);
  h.set_element_count(n);
  h.set_sender(sender);
  h.set_request_id(RequestId(sender, round));
  SetHeaderToken(TokenOf(sender), &h);
  return h;
}

inline zmq::message_t Identity(int sender) {
  return zmq::message_t("worker-" + std::to_string(sender));
}

template <typename Reply>
std::string IdentityOf(const Reply& reply) {
  return std::string(static_cast<const char*>(reply.identity.data()), reply.identity.size());
}

// values in dtype, as a worker sends them raw.
inline zmq::message_t Payload(const std::vector<float>& values, proto::DType dtype) {
  zmq::message_t m(values.size() * DTypeSize(dtype));
  FromFloat32(dtype, values.data(), m.data(), values.size());
  return m;
}

inline std::vector<float> ValuesOf(const zmq::message_t& payload, proto::DType dtype) {
  std::vector<float> values(payload.size() / DTypeSize(dtype));
  ToFloat32(dtype, payload.data(), values.data(), values.size());
  return values;
}

template <typename Reply>
std::vector<float> FloatsOf(const Reply& reply) {
  return ValuesOf(reply.payload, proto::DTYPE_FLOAT32);
}

// values encoded with `codec` (default parameters) in the context a node derives from h: key,
// round = iteration, node = sender, the strategy's seed.
inline zmq::message_t Encode(const std::string& codec, const std::vector<float>& values,
                             const proto::DataHeader& h) {
  absl::StatusOr<std::unique_ptr<compress::Codec>> c = compress::CreateCodec(codec);
  EXPECT_TRUE(c.ok()) << c.status();
  compress::CodecContext ctx;
  ctx.key = h.key();
  ctx.round = h.iteration();
  ctx.node = static_cast<uint32_t>(h.sender());
  ctx.seed = kSeed;
  std::vector<uint8_t> out((*c)->MaxEncodedBytes(values.size()));
  absl::StatusOr<size_t> bytes = (*c)->Encode(values, ctx, absl::MakeSpan(out));
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return zmq::message_t(out.data(), bytes.ok() ? *bytes : 0);
}

// The elements of the tensor most tests declare (Store's by default).
inline constexpr int kN = 4;

// The op of each reply, in order.
inline std::vector<proto::DataOp> Ops(const std::vector<OutgoingReply>& replies) {
  std::vector<proto::DataOp> ops;
  for (const OutgoingReply& r : replies) ops.push_back(r.header.op());
  return ops;
}

// One server (rank 0) owning one declared tensor (key 1:0) of n elements, and the replies of
// the last call. `resume`: the store of a server that replaced a lost one (key_store.h).
struct Store {
  Catalog catalog{1};
  KeyStore store;
  std::vector<OutgoingReply> out;

  explicit Store(int workers, std::vector<int> pushers = {}, int64_t n = kN,
                 proto::DType dtype = proto::DTYPE_FLOAT32, bool resume = false)
      : store(/*my_rank=*/0, workers, catalog, std::move(pushers), resume) {
    EXPECT_TRUE(catalog.AddTensor(DeclareTensor(n, dtype)).ok());
  }

  // Handles one request; returns its replies (and clears them for the next call).
  std::vector<OutgoingReply> Handle(const proto::DataHeader& h, zmq::message_t payload = {}) {
    out.clear();
    store.Handle(Identity(h.sender()), h, std::move(payload), &out);
    return std::move(out);
  }
  std::vector<OutgoingReply> Push(int sender, uint64_t round, const std::vector<float>& values,
                                  proto::DType dtype = proto::DTYPE_FLOAT32) {
    return Handle(Request(proto::OP_PUSH, sender, round, values.size(), dtype),
                  Payload(values, dtype));
  }
  std::vector<OutgoingReply> Pull(int sender, uint64_t round, int64_t n = kN,
                                  proto::DType dtype = proto::DTYPE_FLOAT32) {
    return Handle(Request(proto::OP_PULL, sender, round, n, dtype));
  }
  // Two workers, strategy 1 (push fp16, pull onebit): workers 0 and 1 push {1, -2, 3, -4} and
  // {2, -4, -6, 1} in iteration 7, then worker 1 pulls. Returns the pull's replies; *push:
  // worker 1's push header.
  std::vector<OutgoingReply> TwoWayRound(proto::DataHeader* push) {
    EXPECT_TRUE(catalog.AddStrategy(StrategyWith(1, "fp16", "onebit")).ok());
    proto::DataHeader h = Request(proto::OP_PUSH, 0, 0, kN);
    h.set_strategy_version(1);
    h.set_codec("fp16");
    h.set_iteration(7);
    Handle(h, Encode("fp16", {1, -2, 3, -4}, h));
    h.set_sender(1);
    Handle(h, Encode("fp16", {2, -4, -6, 1}, h));
    *push = h;
    h.set_op(proto::OP_PULL);
    return Handle(h);
  }
};

}  // namespace bytecomp::server::server_test
