#include "bytecomp/server/request_dispatcher.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/frame_seal.h"
#include "bytecomp/common/link_probe.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/common/socket_limits.h"
#include "bytecomp/common/transport.h"
#include "bytecomp/server/key_shard.h"
#include "control.pb.h"

namespace bytecomp::server {

size_t ParkedBytesBound(const ServerJob& job) {
  const proto::ClusterConfig& c = job.config;
  const int64_t budget = c.max_inflight_bytes_per_server() > 0 ? c.max_inflight_bytes_per_server()
                                                               : c.partition_bytes();
  const int64_t per_worker = budget + MaxDataPayloadBytes(c.partition_bytes()) + kDataFrameSlack;
  return std::max(kMinParkedBytes,
                  static_cast<size_t>(2 * int64_t{std::max(1, job.num_workers)} * per_worker));
}

RequestDispatcher::RequestDispatcher(const ServerJob& job, size_t num_shards)
    : my_rank_(job.my_rank),
      num_shards_(num_shards),
      payload_seal_bytes_(job.worker_data_keys.empty() ? 0 : kSealOverheadBytes),
      validator_(job),
      bandwidth_turn_(kProbeTurnQuietMs),
      parked_bytes_bound_(ParkedBytesBound(job)),
      parked_bytes_per_worker_(parked_bytes_bound_ /
                               static_cast<size_t>(std::max(1, job.num_workers))),
      parked_bytes_by_sender_(static_cast<size_t>(std::max(1, job.num_workers)), 0) {}

int64_t RequestDispatcher::UnreadReplyBound() {
  return std::max(kMinUnreadReplyBytes, 2 * 8 * validator_.catalog().ElementsOn(my_rank_));
}

void RequestDispatcher::HandleRequest(std::vector<zmq::message_t> frames, int64_t now_ms,
                                      DispatchOutbox* out) {
  if (frames.empty()) return;
  ++requests_;
  Dispatch(std::move(frames), /*may_park=*/true, now_ms, now_ms, out);
}

void RequestDispatcher::Observe(telemetry::NodeMetrics* metrics) {
  metrics_ = metrics;
  if (metrics_ != nullptr) {
    parked_gauge_ = &metrics_->Gauge("bytecomp_queue_depth", "Requests waiting in a queue",
                                     {{"queue", "parked before declaration"}});
  }
}

void RequestDispatcher::Dispatch(std::vector<zmq::message_t> frames, bool may_park,
                                 int64_t arrived_ms, int64_t now_ms, DispatchOutbox* out) {
  proto::DataHeader header;
  if (frames.size() < 2 || frames.size() > 3) {
    return Reject(frames[0], header,
                  absl::StrCat("malformed request: ", frames.size() - 1,
                               " frames after the identity (expected a header and an optional "
                               "payload)"),
                  now_ms, out, "malformed");
  }
  if (!header.ParseFromArray(frames[1].data(), static_cast<int>(frames[1].size()))) {
    header.Clear();  // echo nothing of a header that did not parse
    return Reject(frames[0], header,
                  absl::StrCat("malformed request: the header frame (", frames[1].size(),
                               " bytes) is not a DataHeader"),
                  now_ms, out, "malformed");
  }
  const bool has_payload = frames.size() == 3;
  const size_t payload_size =
      has_payload ? frames[2].size() - std::min(frames[2].size(), payload_seal_bytes_) : 0;
  if (header.op() == proto::OP_PROBE) {
    return AnswerProbe(frames[0], header, payload_size, has_payload, now_ms, out);
  }
  // Who it is comes first: a request without its worker's token is refused before it can
  // wait for a declaration (or learn anything about the keys).
  if (absl::Status sender = validator_.CheckSender(header); !sender.ok()) {
    if (absl::IsPermissionDenied(sender)) ++rejected_without_token_;
    return Reject(frames[0], header, std::string(sender.message()), now_ms, out,
                  "without the worker's token");
  }
  size_t bytes = 0;
  for (const zmq::message_t& f : frames) bytes += f.size();
  const size_t sender = static_cast<size_t>(header.sender());
  if (may_park && validator_.AwaitsDeclaration(header) && parked_count_ < kMaxParkedRequests &&
      parked_bytes_ + bytes <= parked_bytes_bound_ && sender < parked_bytes_by_sender_.size() &&
      parked_bytes_by_sender_[sender] + bytes <= parked_bytes_per_worker_) {
    Park(KeyTensor(header.key()), header.sender(), arrived_ms, bytes, std::move(frames));
    return;
  }
  absl::Status valid = validator_.Validate(header, has_payload, payload_size);
  if (!valid.ok()) return Reject(frames[0], header, std::string(valid.message()), now_ms, out);
  const size_t shard = ShardOf(header.key(), num_shards_);
  ShardRequest request{std::move(frames[0]), std::move(header), zmq::message_t()};
  if (has_payload) request.payload = std::move(frames[2]);
  out->to_shards.emplace_back(shard, std::move(request));
}

// The payload is dropped and the reply carries the requested number of bytes. The bandwidth
// turn lets one prober (connection) at a time do its transfers.
void RequestDispatcher::AnswerProbe(zmq::message_t& identity, const proto::DataHeader& request,
                                    size_t payload_size, bool has_payload, int64_t now_ms,
                                    DispatchOutbox* out) {
  absl::Status valid = validator_.ValidateProbe(request, has_payload, payload_size);
  if (!valid.ok()) {
    return Reject(identity, request, std::string(valid.message()), now_ms, out, "bad probe");
  }
  absl::StatusOr<proto::ProbeTurn> turn = bandwidth_turn_.OnProbe(
      absl::string_view(static_cast<const char*>(identity.data()), identity.size()), request,
      now_ms);
  if (!turn.ok()) {
    return Reject(identity, request, std::string(turn.status().message()), now_ms, out);
  }
  proto::DataHeader reply;
  reply.set_op(proto::OP_PROBE_REPLY);
  reply.set_probe_turn(*turn);
  reply.set_request_id(request.request_id());
  reply.set_sender(my_rank_);
  reply.set_probe_reply_bytes(request.probe_reply_bytes());
  reply.set_payload_bytes(request.probe_reply_bytes());
  std::vector<zmq::message_t> frames;
  frames.push_back(std::move(identity));
  frames.push_back(ProtoFrame(reply));
  if (request.probe_reply_bytes() > 0) frames.push_back(ProbePayload(request.probe_reply_bytes()));
  out->to_router.push_back(std::move(frames));
}

void RequestDispatcher::Reject(zmq::message_t& identity, const proto::DataHeader& request,
                               const std::string& why, int64_t now_ms, DispatchOutbox* out,
                               const char* reason) {
  ++rejected_;
  if (metrics_ != nullptr) metrics_->CountRefused(reason);
  const absl::string_view peer(static_cast<const char*>(identity.data()), identity.size());
  refusals_.RefuseAndLog(
      peer, absl::StrCat("rejected request from connection ", Printable(peer, 32), ": ", why),
      now_ms);
  proto::DataHeader reply;
  reply.set_op(proto::OP_ERROR);
  reply.set_key(request.key());
  reply.set_round(request.round());
  reply.set_request_id(request.request_id());
  reply.set_sender(my_rank_);
  reply.set_server_epoch(validator_.epoch());
  reply.set_error(absl::StrCat("server ", my_rank_, ": ", why));
  std::vector<zmq::message_t> frames;
  frames.push_back(std::move(identity));
  frames.push_back(ProtoFrame(reply));
  out->to_router.push_back(std::move(frames));
}

bool RequestDispatcher::HandleCommand(const ServerCommand& command, int64_t now_ms,
                                      DispatchOutbox* out) {
  if (const auto* lost = std::get_if<LostCommand>(&command)) {
    validator_.catalog().ServerLost(lost->rank);
    return true;  // this thread's alone
  }
  std::vector<uint32_t> moved_tensors;
  if (const auto* move = std::get_if<MoveCommand>(&command)) {
    const proto::KeysMoved& moved = *move->moved;
    size_t keys = 0;
    for (const proto::DeclareReply& tensor : moved.tensors()) {
      keys += validator_.catalog().MoveTensor(tensor, moved.from_rank(), my_rank_).size();
      moved_tensors.push_back(tensor.tensor_id());
    }
    BC_LOG_WARNING("taking over ", keys, " partitions of the lost server ", moved.from_rank(),
                   ": they resume once every worker told where it stands, and their two-way "
                   "error-feedback memory starts from zero");
  }
  const auto* declare = std::get_if<DeclareCommand>(&command);
  const auto* strategy = std::get_if<StrategyCommand>(&command);
  if (declare != nullptr) {
    if (absl::Status s = validator_.catalog().AddTensor(*declare->tensor); !s.ok()) {
      BC_LOG_ERROR("ignoring declaration: ", s.ToString());
      return true;
    }
  } else if (strategy != nullptr) {
    if (absl::Status s = validator_.catalog().AddStrategy(*strategy->strategy); !s.ok()) {
      BC_LOG_ERROR("ignoring strategy: ", s.ToString());
      return true;
    }
    BC_LOG_INFO("strategy version ", strategy->strategy->version(), " from round ",
                strategy->strategy->first_round());
  }
  // Every shard hears of it before any request that needed it.
  ToEveryShard(command, out);
  if (std::holds_alternative<StopCommand>(command)) return false;
  // Requests that arrived early go through now, in arrival order: a declaration's own, or,
  // with a strategy version, every one.
  if (declare != nullptr) {
    ReleaseParked(declare->tensor->tensor_id(), now_ms, out);
  } else if (strategy != nullptr) {
    ReleaseParked(std::nullopt, now_ms, out);
  }
  for (uint32_t tensor : moved_tensors) ReleaseParked(tensor, now_ms, out);
  return true;
}

void RequestDispatcher::Park(uint32_t tensor, int sender, int64_t arrived_ms, size_t bytes,
                             std::vector<zmq::message_t> frames) {
  const uint64_t sequence = ++park_sequence_;
  parked_[tensor].push_back(Parked{arrived_ms, sequence, bytes, sender, std::move(frames)});
  parked_order_.emplace_back(sequence, tensor);
  ++parked_count_;
  parked_bytes_ += bytes;
  parked_bytes_by_sender_[static_cast<size_t>(sender)] += bytes;
  if (parked_gauge_ != nullptr) parked_gauge_->Set(static_cast<double>(parked_count_));
}

void RequestDispatcher::ReleaseParked(std::optional<uint32_t> tensor, int64_t now_ms,
                                      DispatchOutbox* out) {
  std::vector<Parked> waiting;
  if (tensor.has_value()) {
    auto it = parked_.find(*tensor);
    if (it == parked_.end()) return;
    for (Parked& p : it->second) waiting.push_back(std::move(p));
    parked_.erase(it);
  } else {
    for (auto& [t, queue] : parked_) {
      for (Parked& p : queue) waiting.push_back(std::move(p));
    }
    parked_.clear();
    parked_order_.clear();
    std::sort(waiting.begin(), waiting.end(),
              [](const Parked& a, const Parked& b) { return a.sequence < b.sequence; });
  }
  for (const Parked& p : waiting) Unparked(p);
  for (Parked& p : waiting) {
    Dispatch(std::move(p.frames), /*may_park=*/true, p.since_ms, now_ms, out);
  }
  if (parked_gauge_ != nullptr) parked_gauge_->Set(static_cast<double>(parked_count_));
}

void RequestDispatcher::Unparked(const Parked& p) {
  --parked_count_;
  parked_bytes_ -= p.bytes;
  parked_bytes_by_sender_[static_cast<size_t>(p.sender)] -= p.bytes;
}

void RequestDispatcher::ExpireParked(int64_t now_ms, DispatchOutbox* out) {
  while (!parked_order_.empty()) {
    const auto [sequence, tensor] = parked_order_.front();
    auto it = parked_.find(tensor);
    if (it == parked_.end() || it->second.front().sequence != sequence) {
      parked_order_.pop_front();  // released since (or parked again, further back)
      continue;
    }
    if (now_ms - it->second.front().since_ms <= kUndeclaredGraceMs) break;
    Parked p = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) parked_.erase(it);
    parked_order_.pop_front();
    Unparked(p);
    Dispatch(std::move(p.frames), /*may_park=*/false, p.since_ms, now_ms, out);
  }
  if (parked_gauge_ != nullptr) parked_gauge_->Set(static_cast<double>(parked_count_));
}

std::string RequestDispatcher::Summary() const {
  std::string out = absl::StrCat("served ", requests_, " requests; rejected ", rejected_, " (",
                                 rejected_without_token_, " without the sender's token)");
  if (refusals_.refused() > 0) absl::StrAppend(&out, "; ", refusals_.Summary());
  return out;
}

void RequestDispatcher::ToEveryShard(const ServerCommand& command, DispatchOutbox* out) const {
  for (size_t shard = 0; shard < num_shards_; ++shard) out->to_shards.emplace_back(shard, command);
}

}  // namespace bytecomp::server
