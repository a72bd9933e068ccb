#include "bytecomp/server/key_shard.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/common/transport.h"
#include "control.pb.h"
#include "data.pb.h"

namespace bytecomp::server {

std::vector<zmq::message_t> ShardCommand(ShardMessageKind kind, absl::string_view body) {
  std::vector<zmq::message_t> message;
  const char k = static_cast<char>(kind);
  message.emplace_back(&k, 1);
  if (kind != ShardMessageKind::kStop) message.emplace_back(body.data(), body.size());
  return message;
}

std::vector<zmq::message_t> ShardRequest(std::vector<zmq::message_t> request) {
  std::vector<zmq::message_t> message;
  message.reserve(request.size() + 1);
  const char k = static_cast<char>(ShardMessageKind::kRequest);
  message.emplace_back(&k, 1);
  for (zmq::message_t& frame : request) message.push_back(std::move(frame));
  return message;
}

bool ParseShardMessageKind(const std::vector<zmq::message_t>& message, ShardMessageKind* kind) {
  if (message.empty() || message[0].size() != 1) return false;
  const char k = *static_cast<const char*>(message[0].data());
  switch (static_cast<ShardMessageKind>(k)) {
    case ShardMessageKind::kRequest:
    case ShardMessageKind::kDeclare:
    case ShardMessageKind::kStrategy:
    case ShardMessageKind::kFail:
    case ShardMessageKind::kStop:
    case ShardMessageKind::kMove:
    case ShardMessageKind::kLost:
      *kind = static_cast<ShardMessageKind>(k);
      return true;
  }
  return false;
}

size_t ShardOf(uint64_t key, size_t num_shards) { return (key ^ (key >> 32)) % num_shards; }

KeyShard::KeyShard(int index, const ServerJob& job)
    : index_(index),
      my_rank_(job.my_rank),
      catalog_(job.num_servers, job.config),
      store_(job.my_rank, job.num_workers, catalog_, job.pushers, job.replaces_lost_server) {}

bool KeyShard::Handle(std::vector<zmq::message_t> message, std::vector<OutgoingReply>* out) {
  ShardMessageKind kind;
  if (!ParseShardMessageKind(message, &kind)) {
    BC_LOG_ERROR("key shard ", index_, ": dropping a message of ", message.size(),
                 " frames without a kind frame");
    return true;
  }
  const std::string body = message.size() >= 2 ? FrameToString(message[1]) : "";
  switch (kind) {
    case ShardMessageKind::kStop:
      return false;
    case ShardMessageKind::kFail:
      store_.FailHeldPulls(body, out);
      return true;
    case ShardMessageKind::kDeclare: {
      // The I/O thread checked and logged it; a declaration it refused is not forwarded.
      proto::DeclareReply declared;
      if (declared.ParseFromString(body)) (void)catalog_.AddTensor(declared);
      return true;
    }
    case ShardMessageKind::kStrategy: {
      proto::Strategy strategy;
      if (strategy.ParseFromString(body)) (void)catalog_.AddStrategy(strategy);
      return true;
    }
    case ShardMessageKind::kMove: {
      proto::KeysMoved moved;
      if (!moved.ParseFromString(body)) return true;
      for (const proto::DeclareReply& tensor : moved.tensors()) {
        for (uint64_t key : catalog_.MoveTensor(tensor, moved.from_rank(), my_rank_)) {
          store_.ExpectResume(key);
        }
      }
      return true;
    }
    case ShardMessageKind::kLost:
      return true;  // the I/O thread's
    case ShardMessageKind::kRequest:
      break;
  }
  // [kRequest, identity, header, payload?], validated by the I/O thread.
  if (message.size() < 3 || message.size() > 4) {
    BC_LOG_ERROR("key shard ", index_, ": dropping a request of ", message.size(), " frames");
    return true;
  }
  proto::DataHeader header;
  header.ParseFromArray(message[2].data(), static_cast<int>(message[2].size()));
  zmq::message_t payload;
  if (message.size() == 4) payload = std::move(message[3]);
  store_.Handle(std::move(message[1]), header, std::move(payload), out);
  return true;
}

std::string KeyShard::Summary() const {
  std::vector<std::string> pushes;
  const std::vector<int64_t>& by_worker = store_.pushes_by_worker();
  for (size_t r = 0; r < by_worker.size(); ++r) {
    if (by_worker[r] > 0) pushes.push_back(absl::StrCat(r, "=", by_worker[r]));
  }
  return absl::StrCat("key shard ", index_, " stops after ", store_.rounds_completed(),
                      " rounds on ", store_.num_keys(), " keys, refused ", store_.refused(),
                      " requests; pushes by worker: ",
                      pushes.empty() ? "none" : absl::StrJoin(pushes, " "),
                      store_.keys_resumed() == 0
                          ? ""
                          : absl::StrCat("; as a replacement it resumed ", store_.keys_resumed(),
                                         " keys and answered the last round of ",
                                         store_.rounds_answered_from_replays(),
                                         " of them from replays, for workers that had not got it"));
}

}  // namespace bytecomp::server
