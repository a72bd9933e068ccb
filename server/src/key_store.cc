#include "bytecomp/server/key_store.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/dtype.h"
#include "bytecomp/common/partition.h"

namespace bytecomp::server {
namespace {

bool FloatAligned(const zmq::message_t& m) {
  return reinterpret_cast<uintptr_t>(m.data()) % alignof(float) == 0;
}

std::string KeyName(uint64_t key) { return absl::StrCat(KeyTensor(key), ":", KeyPartition(key)); }

}  // namespace

void KeyStore::Handle(zmq::message_t identity, const proto::DataHeader& header,
                      zmq::message_t payload, std::vector<OutgoingReply>* out) {
  KeyState& key = keys_[header.key()];
  if (key.pushed.empty()) key.pushed.assign(num_workers_, false);
  if (header.op() == proto::OP_PUSH) {
    Push(key, std::move(identity), header, std::move(payload), out);
  } else {
    Pull(key, std::move(identity), header, out);
  }
}

void KeyStore::Push(KeyState& key, zmq::message_t identity, const proto::DataHeader& h,
                    zmq::message_t payload, std::vector<OutgoingReply>* out) {
  if (h.round() != key.accumulating_round) {
    out->push_back(Error(std::move(identity), h,
                         absl::StrCat("push for round ", h.round(), " of key ", KeyName(h.key()),
                                      ", which is accumulating round ", key.accumulating_round)));
    return;
  }
  if (key.pushed[h.sender()]) {
    out->push_back(Error(std::move(identity), h,
                         absl::StrCat("worker ", h.sender(), " already pushed round ", h.round(),
                                      " of key ", KeyName(h.key()))));
    return;
  }
  const size_t n = static_cast<size_t>(h.element_count());
  const bool in_place = h.dtype() == proto::DTYPE_FLOAT32 && FloatAligned(payload);
  if (key.pushes == 0) {
    if (in_place) {
      key.accumulator = std::move(payload);  // the receive buffer becomes the sum: no copy
    } else {
      key.wide_sum.resize(n);
      ToFloat32(h.dtype(), payload.data(), key.wide_sum.data(), n);
    }
  } else if (key.accumulator.size() > 0) {
    if (in_place) {
      AddFloat32(static_cast<float*>(key.accumulator.data()),
                 static_cast<const float*>(payload.data()), n);
    } else {  // a misaligned later push: widen the sum to the fp32 buffer once, then add
      key.wide_sum.resize(n);
      std::memcpy(key.wide_sum.data(), key.accumulator.data(), n * sizeof(float));
      key.accumulator.rebuild(0);
      AddToFloat32(h.dtype(), payload.data(), key.wide_sum.data(), n);
    }
  } else {
    AddToFloat32(h.dtype(), payload.data(), key.wide_sum.data(), n);
  }
  key.pushed[h.sender()] = true;
  ++key.pushes;
  out->push_back(Reply(zmq::message_t(identity.data(), identity.size()), h, proto::OP_PUSH_ACK));
  if (key.pushes == num_workers_) CompleteRound(key, h, out);
}

void KeyStore::CompleteRound(KeyState& key, const proto::DataHeader& h,
                             std::vector<OutgoingReply>* out) {
  const size_t n = static_cast<size_t>(h.element_count());
  if (key.accumulator.size() > 0) {
    key.ready = std::move(key.accumulator);
    key.accumulator.rebuild(0);
  } else {
    key.ready.rebuild(n * DTypeSize(h.dtype()));
    FromFloat32(h.dtype(), key.wide_sum.data(), key.ready.data(), n);
  }
  key.has_ready = true;
  key.ready_round = key.accumulating_round;
  ++key.accumulating_round;
  key.pushes = 0;
  std::fill(key.pushed.begin(), key.pushed.end(), false);
  ++rounds_completed_;
  for (HeldPull& pull : key.held) {
    out->push_back(PullReply(key, std::move(pull.identity), pull.header));
  }
  key.held.clear();
}

void KeyStore::Pull(KeyState& key, zmq::message_t identity, const proto::DataHeader& h,
                    std::vector<OutgoingReply>* out) {
  if (key.has_ready && h.round() == key.ready_round) {
    out->push_back(PullReply(key, std::move(identity), h));
  } else if (h.round() == key.accumulating_round) {
    key.held.push_back(HeldPull{std::move(identity), h});
  } else {
    out->push_back(Error(std::move(identity), h,
                         absl::StrCat("pull for round ", h.round(), " of key ", KeyName(h.key()),
                                      ": the key holds round ",
                                      key.has_ready ? absl::StrCat(key.ready_round) : "none",
                                      " and accumulates round ", key.accumulating_round)));
  }
}

OutgoingReply KeyStore::PullReply(const KeyState& key, zmq::message_t identity,
                                  const proto::DataHeader& request) {
  OutgoingReply reply = Reply(std::move(identity), request, proto::OP_PULL_REPLY);
  reply.payload.copy(const_cast<zmq::message_t&>(key.ready));  // shares the buffer, no copy
  reply.header.set_payload_bytes(static_cast<int64_t>(reply.payload.size()));
  reply.has_payload = true;
  return reply;
}

OutgoingReply KeyStore::Reply(zmq::message_t identity, const proto::DataHeader& request,
                              proto::DataOp op) {
  OutgoingReply reply;
  reply.identity = std::move(identity);
  reply.header.set_op(op);
  reply.header.set_key(request.key());
  reply.header.set_round(request.round());
  reply.header.set_dtype(request.dtype());
  reply.header.set_element_count(request.element_count());
  reply.header.set_sender(my_rank_);
  reply.header.set_request_id(request.request_id());
  return reply;
}

OutgoingReply KeyStore::Error(zmq::message_t identity, const proto::DataHeader& request,
                              std::string message) {
  OutgoingReply reply = Reply(std::move(identity), request, proto::OP_ERROR);
  reply.header.set_error(absl::StrCat("server ", my_rank_, ": ", message));
  return reply;
}

void KeyStore::FailHeldPulls(const std::string& reason, std::vector<OutgoingReply>* out) {
  for (auto& [k, key] : keys_) {
    for (HeldPull& pull : key.held) out->push_back(Error(std::move(pull.identity), pull.header, reason));
    key.held.clear();
  }
}

}  // namespace bytecomp::server
