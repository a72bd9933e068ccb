#include "partition_sender.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/config.h"
#include "bytecomp/common/dtype.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/common/transport.h"
#include "stage_pipeline.h"

namespace bytecomp::worker {
namespace {

// ZeroMQ calls this from its I/O thread once it no longer needs a zero-copy push payload.
struct PayloadRelease {
  OperationTracker* tracker;
  HeldPayloads* held;
  std::shared_ptr<Operation> op;
  int64_t partition;
};
void ReleasePayload(void* /*data*/, void* hint) {
  auto* release = static_cast<PayloadRelease*>(hint);
  release->tracker->PayloadReleased(release->op, release->partition);
  release->held->Release();
  delete release;
}

// ZeroMQ's release of an encoded payload: drops the engine's reference to the buffer.
struct EncodedRelease {
  HeldPayloads* held;
  std::shared_ptr<EncodedPush> push;
};
void ReleaseEncoded(void* /*data*/, void* hint) {
  auto* release = static_cast<EncodedRelease*>(hint);
  release->push.reset();
  release->held->Release();
  delete release;
}

}  // namespace

PartitionSender::PartitionSender(Wiring wiring)
    : w_(wiring),
      connections_per_server_(static_cast<uint64_t>(wiring.config->connections_per_server())),
      budget_bytes_(wiring.config->max_inflight_bytes_per_server() > 0
                        ? wiring.config->max_inflight_bytes_per_server()
                        : wiring.config->partition_bytes()),
      keep_results_(ServerFailoverOn(*wiring.config)),
      open_(wiring.servers, true),
      failover_(wiring.servers),
      inflight_bytes_(wiring.servers, 0),
      inflight_pushes_(wiring.servers, 0),
      inflight_pulls_(wiring.servers, 0),
      deferred_pulls_(wiring.servers),
      queues_(wiring.servers),
      next_request_(wiring.first_request) {}

void PartitionSender::Take(DataCommand& command) {
  if (auto* start = std::get_if<StartOperation>(&command)) {
    const std::shared_ptr<Operation>& op = start->op;
    if (!closed_.ok()) {
      w_.tracker->FailAll(op, closed_);
      return;
    }
    for (int64_t p = 0; p < op->layout().num_partitions(); ++p) {
      queues_[ServerOf(*op, p)].push(
          PartitionTask{op, nullptr, p, op->request.priority, sequence_++});
    }
  } else if (auto* encoded = std::get_if<std::shared_ptr<EncodedPush>>(&command)) {
    const std::shared_ptr<EncodedPush>& e = *encoded;
    if (!closed_.ok()) {
      w_.tracker->ResultFailed(e->op, e->partition, closed_);
      return;
    }
    queues_[ServerOf(*e->op, e->partition)].push(
        PartitionTask{e->op, e, e->partition, e->op->request.priority, sequence_++});
  } else if (auto* move = std::get_if<MoveKeys>(&command)) {
    if (closed_.ok()) Move(*move);
  } else if (auto* reconnect = std::get_if<ReconnectServer>(&command)) {
    if (closed_.ok() && reconnect->server >= 0 && reconnect->server < w_.servers) {
      Reconnect(reconnect->server, reconnect->address, reconnect->epoch);
    }
  } else if (auto* fail = std::get_if<FailEverything>(&command)) {
    FailAll(fail->reason);
  }
}

void PartitionSender::SendReady() {
  for (size_t s = 0; s < queues_.size(); ++s) {
    while (!queues_[s].empty() && inflight_pushes_[s] < kMaxInflightPushesPerServer &&
           (inflight_bytes_[s] == 0 || inflight_bytes_[s] < budget_bytes_)) {
      PartitionTask task = queues_[s].top();
      queues_[s].pop();
      Send(task);
    }
  }
  int64_t queued = 0, inflight = 0;
  for (size_t s = 0; s < queues_.size(); ++s) {
    queued += static_cast<int64_t>(queues_[s].size());
    inflight += inflight_bytes_[s];
  }
  w_.traffic->queued_partitions.store(queued, std::memory_order_relaxed);
  w_.traffic->inflight_bytes.store(inflight, std::memory_order_relaxed);
}

proto::DataHeader PartitionSender::HeaderFor(const Operation& op, int64_t partition,
                                             uint32_t stage) const {
  const PartitionRange range = op.layout().range(partition);
  proto::DataHeader header;
  header.set_op(proto::OP_PUSH);
  header.set_key(MakeKey(op.layout().tensor_id, static_cast<uint32_t>(partition)));
  header.set_round(op.wire_round() + (stage == 2 ? 1 : 0));
  header.set_iteration(op.round());
  header.set_strategy_version(op.plan().version);
  header.set_stage(stage);
  header.set_dtype(op.dtype());
  header.set_element_count(range.count);
  header.set_sender(w_.rank);
  header.set_server_epoch(failover_.epoch(ServerOf(op, partition)));
  SetHeaderToken(w_.token, &header);
  if (op.plan().compressed()) header.set_codec(op.plan().push.name());
  return header;
}

void PartitionSender::Send(const PartitionTask& task) {
  Operation& op = *task.op;
  const int server = ServerOf(op, task.partition);
  const uint32_t stage = task.encoded != nullptr ? task.encoded->stage : 0;
  const bool aborted = task.encoded != nullptr && !task.encoded->abort_error.empty();
  const uint64_t request = next_request_++;
  proto::DataHeader header = HeaderFor(op, task.partition, stage);
  header.set_request_id(request);

  std::vector<zmq::message_t> push;
  int64_t bytes = 0;
  if (task.encoded == nullptr) {
    const PartitionRange range = op.layout().range(task.partition);
    const size_t elem = DTypeSize(op.dtype());
    bytes = range.count * static_cast<int64_t>(elem);
    header.set_payload_bytes(bytes);
    push.push_back(ProtoFrame(header));
    char* payload = op.host_data() + range.offset * elem;
    if (task.resend) {
      // Sent before, to a lost server, whose socket released the zero-copy payload: a copy,
      // so that the payload is released once.
      push.emplace_back(payload, static_cast<size_t>(bytes));
    } else {
      auto* release = new PayloadRelease{w_.tracker, w_.held, task.op, task.partition};
      push.emplace_back(payload, static_cast<size_t>(bytes), &ReleasePayload, release);
      w_.held->Hold();  // until its free function runs
    }
    w_.traffic->CountPush(bytes, bytes, "");
  } else if (aborted) {
    header.set_error(task.encoded->abort_error);
    push.push_back(ProtoFrame(header));
  } else {
    const EncodedPush& payload = *task.encoded;
    bytes = static_cast<int64_t>(payload.size());
    header.set_payload_bytes(bytes);
    push.push_back(ProtoFrame(header));
    auto* release = new EncodedRelease{w_.held, task.encoded};
    push.emplace_back(const_cast<uint8_t*>(payload.data()), payload.size(), &ReleaseEncoded,
                      release);
    w_.held->Hold();
  }
  // The pull goes right behind the push on the same connection (unless too many pulls are in
  // flight: SendOrDeferPull): the server sees them in order and holds the pull until the round
  // is complete, so a round costs one round trip.
  header.set_op(proto::OP_PULL);
  header.set_payload_bytes(0);
  header.clear_error();
  zmq::message_t pull = ProtoFrame(header);

  if (!open_[server]) {  // a lost server's partition that moved nowhere: cannot happen
    w_.tracker->ResultFailed(task.op, task.partition,
                             absl::UnavailableError(absl::StrCat(
                                 "server ", server, " was lost and no server holds partition ",
                                 task.partition, " of '", op.request.name, "'")));
    return;
  }
  const int connection = ConnectionOf(op.layout().tensor_id, static_cast<uint64_t>(task.partition));
  int64_t sent_us = 0;
  if (w_.timeline != nullptr) {
    sent_us = w_.clock_us();
    TraceStage(*w_.timeline, op, task.partition, telemetry::Stage::kPushSent, sent_us, -1, bytes);
  }
  op.pushed_bytes.fetch_add(bytes, std::memory_order_relaxed);
  InFlight& in = inflight_[request];
  in.op = task.op;
  in.encoded = task.encoded;
  in.priority = task.priority;
  in.sequence = task.sequence;
  in.partition = task.partition;
  in.stage = stage;
  in.aborted = aborted;
  in.server = server;
  in.connection = connection;
  in.bytes = bytes;
  in.unacked = true;
  in.pull = std::move(pull);
  in.sent_us = sent_us;
  inflight_bytes_[server] += bytes;
  ++inflight_pushes_[server];
  if (absl::Status s = w_.connections->Send(server, connection, push); !s.ok()) {
    Finished(in);
    inflight_.erase(request);
    // The pull reply will not come. (A zero-copy payload is released with its message.)
    w_.tracker->ResultFailed(
        task.op, task.partition,
        absl::UnavailableError(absl::StrCat("sending to server ", server, ": ", s.message())));
    return;
  }
  SendOrDeferPull(request, in);
}

void PartitionSender::SendOrDeferPull(uint64_t request, InFlight& in) {
  if (inflight_pulls_[in.server] >= kMaxInflightPullsPerServer) {
    deferred_pulls_[in.server].push_back(request);
    return;
  }
  std::vector<zmq::message_t> frames;
  frames.push_back(std::move(in.pull));
  in.pull_sent = true;
  ++inflight_pulls_[in.server];
  if (absl::Status s = w_.connections->Send(in.server, in.connection, frames); !s.ok()) {
    const InFlight failed = std::move(in);
    inflight_.erase(request);
    Finished(failed);
    w_.tracker->ResultFailed(failed.op, failed.partition,
                             absl::UnavailableError(absl::StrCat(
                                 "sending to server ", failed.server, ": ", s.message())));
  }
}

void PartitionSender::SendDeferredPulls(int server) {
  std::deque<uint64_t>& deferred = deferred_pulls_[server];
  while (!deferred.empty() && inflight_pulls_[server] < kMaxInflightPullsPerServer) {
    const uint64_t request = deferred.front();
    deferred.pop_front();
    auto it = inflight_.find(request);
    if (it == inflight_.end() || it->second.pull_sent) continue;  // answered or failed meanwhile
    SendOrDeferPull(request, it->second);
  }
}

void PartitionSender::Finished(const InFlight& in) {
  inflight_bytes_[in.server] -= in.bytes;
  if (in.unacked) --inflight_pushes_[in.server];
  if (in.pull_sent) --inflight_pulls_[in.server];
}

void PartitionSender::SendAbort(const Operation& op, int64_t partition, uint32_t stage,
                                const std::string& why) {
  proto::DataHeader header = HeaderFor(op, partition, stage);
  header.set_request_id(next_request_++);  // its ack or error is not waited for
  header.set_error(why);
  std::vector<zmq::message_t> frames;
  frames.push_back(ProtoFrame(header));
  const int server = ServerOf(op, partition);
  if (!open_[server]) return;  // a lost server's
  (void)w_.connections->Send(
      server, ConnectionOf(op.layout().tensor_id, static_cast<uint64_t>(partition)), frames);
}

std::optional<PulledPartition> PartitionSender::HandleReply(int server,
                                                            std::vector<zmq::message_t>& frames) {
  proto::DataHeader header;
  if (frames.empty() ||
      !header.ParseFromArray(frames[0].data(), static_cast<int>(frames[0].size()))) {
    BC_LOG_WARNING("malformed reply from server ", server);
    return std::nullopt;
  }
  auto it = inflight_.find(header.request_id());
  // A late answer (an abort's ack, a failed round's pull, a link probe's).
  if (it == inflight_.end()) return std::nullopt;
  if (header.op() != proto::OP_PUSH_ACK && header.op() != proto::OP_PULL_REPLY &&
      header.op() != proto::OP_ERROR) {
    return std::nullopt;
  }
  InFlight& in = it->second;
  // The in-flight budget counts pushes the server has not yet received: an ack frees it at
  // once, whatever the other workers do. (Counting until the pull reply would let two workers
  // that filled their budgets with different keys wait on each other forever.)
  inflight_bytes_[in.server] -= in.bytes;
  in.bytes = 0;
  if (in.unacked) {
    --inflight_pushes_[in.server];
    in.unacked = false;
  }
  if (header.op() == proto::OP_PUSH_ACK) return std::nullopt;
  if (header.op() == proto::OP_ERROR && header.server_epoch() != failover_.epoch(in.server)) {
    // Refused by a replacement this worker has not heard of yet (the request was queued for
    // the lost server and found the replacement on the same address): its ServerReplaced is
    // on the way, and Reconnect sends the request again with the new epoch.
    return std::nullopt;
  }
  const InFlight done = std::move(in);
  inflight_.erase(it);
  Finished(done);
  SendDeferredPulls(done.server);
  if (header.op() == proto::OP_PULL_REPLY) {
    if (done.aborted) {  // the error is recorded: the round cannot have a result
      w_.tracker->ResultIn(done.op, done.partition);
      return std::nullopt;
    }
    zmq::message_t payload;
    if (frames.size() == 2) payload = std::move(frames[1]);
    if (keep_results_) {
      proto::DataHeader replay = HeaderFor(*done.op, done.partition, done.stage);
      replay.set_codec(header.codec());  // the result's: raw, the fp32 sum, or the pull codec's
      replay.set_payload_bytes(static_cast<int64_t>(payload.size()));
      failover_.Keep(header.key(), done.server, std::move(replay), payload);
    }
    if (w_.timeline != nullptr) {
      const int64_t now = w_.clock_us();
      const int64_t bytes = static_cast<int64_t>(payload.size());
      TraceStage(*w_.timeline, *done.op, done.partition, telemetry::Stage::kRoundTrip, done.sent_us,
                 now - done.sent_us, bytes);
      TraceStage(*w_.timeline, *done.op, done.partition, telemetry::Stage::kPullReceived, now, -1,
                 bytes);
    }
    return PulledPartition{done.op, done.partition, done.stage, std::move(payload), server};
  }
  // The push or the pull was refused: the round on the server must still complete for the
  // other workers, so abort it (a no-op if our push was already counted).
  SendAbort(*done.op, done.partition, done.stage, header.error());
  w_.tracker->ResultFailed(done.op, done.partition, absl::FailedPreconditionError(header.error()));
  return std::nullopt;
}

void PartitionSender::FailAll(const absl::Status& reason) {
  if (!closed_.ok()) return;
  closed_ = reason.ok() ? absl::CancelledError("the engine stopped") : reason;
  // Closing the connections makes ZeroMQ drop the queued payloads, which releases them.
  for (int s = 0; s < w_.servers; ++s) {
    w_.connections->Close(s);
    open_[s] = false;
  }
  for (auto& [request, in] : inflight_) w_.tracker->ResultFailed(in.op, in.partition, closed_);
  inflight_.clear();
  for (std::deque<uint64_t>& deferred : deferred_pulls_) deferred.clear();
  for (auto& q : queues_) {
    for (; !q.empty(); q.pop()) {
      const PartitionTask& t = q.top();
      // Not sent (again): no pull reply. An uncompressed payload's release is reported here
      // for a first send only: a resend's zero-copy message went to the lost server's socket,
      // and its free function reports the release (once, when ZeroMQ drops it).
      if (t.encoded == nullptr && !t.resend) w_.tracker->PayloadReleased(t.op, t.partition);
      w_.tracker->ResultFailed(t.op, t.partition, closed_);
    }
  }
}

bool PartitionSender::SendReplays(std::vector<FailoverReplay::Replay>& replays) {
  for (FailoverReplay::Replay& replay : replays) {
    const int connection = ConnectionOf(KeyTensor(replay.key), KeyPartition(replay.key));
    if (absl::Status s = w_.connections->Send(replay.server, connection, replay.frames); !s.ok()) {
      FailAll(absl::UnavailableError(absl::StrCat("replaying to server ", replay.server,
                                                  " after a server was lost: ", s.message())));
      return false;
    }
  }
  return true;
}

void PartitionSender::Reconnect(int server, const std::string& address, uint64_t epoch) {
  std::vector<FailoverReplay::Replay> replays = failover_.Replace(server, epoch);
  w_.connections->Open(server, address);
  open_[server] = true;
  // First each key's replay, on the connection the key's requests take (one connection keeps
  // their order): the replacement learns where this worker stands before anything else.
  if (!SendReplays(replays)) return;
  // Then every push the lost server had not answered, in their first order: pushes and pulls
  // go again (the lost server's answers are gone with it).
  int64_t again = 0;
  for (auto it = inflight_.begin(); it != inflight_.end();) {
    if (it->second.server != server) {
      ++it;
      continue;
    }
    const InFlight& in = it->second;
    queues_[server].push(
        PartitionTask{in.op, in.encoded, in.partition, in.priority, in.sequence, /*resend=*/true});
    Finished(in);
    inflight_.erase(it++);
    ++again;
  }
  deferred_pulls_[server].clear();
  BC_LOG_INFO("connected to server ", server, "'s replacement at ", address, ": replayed ",
              static_cast<int64_t>(replays.size()), " results of completed rounds, pushing ", again,
              " unanswered ones again and ", static_cast<int64_t>(queues_[server].size()) - again,
              " not yet sent");
}

void PartitionSender::Move(const MoveKeys& move) {
  const int servers = w_.servers;
  for (const auto& [key, server] : move.keys) {
    if (server >= 0 && server < servers && open_[server]) failover_.Move(key, server);
  }
  if (move.from_server >= 0 && move.from_server < servers) {
    // Closing drops what waits for the lost server, which releases zero-copy payloads (an
    // operation completes only once they are).
    w_.connections->Close(move.from_server);
    open_[move.from_server] = false;
  }
  // Each moved key's replay first (its new server learns where this worker stands), then what
  // the lost server had not answered, then what was not yet sent to it.
  std::vector<FailoverReplay::Replay> replays = failover_.ReplaysToNewServers();
  if (!SendReplays(replays)) return;
  int64_t again = 0, queued = 0;
  for (auto it = inflight_.begin(); it != inflight_.end();) {
    const InFlight& in = it->second;
    const int now = ServerOf(*in.op, in.partition);
    if (now == in.server) {
      ++it;
      continue;
    }
    queues_[now].push(
        PartitionTask{in.op, in.encoded, in.partition, in.priority, in.sequence, /*resend=*/true});
    Finished(in);
    inflight_.erase(it++);
    ++again;
  }
  for (int s = 0; s < servers; ++s) {
    std::priority_queue<PartitionTask> stay;
    for (; !queues_[s].empty(); queues_[s].pop()) {
      const PartitionTask& task = queues_[s].top();
      const int now = ServerOf(*task.op, task.partition);
      if (now != s) ++queued;
      (now == s ? stay : queues_[now]).push(task);
    }
    queues_[s] = std::move(stay);
  }
  if (move.from_server >= 0 && move.from_server < servers) {
    deferred_pulls_[move.from_server].clear();
  }
  BC_LOG_INFO("server ", move.from_server, "'s partitions moved: replayed ",
              static_cast<int64_t>(replays.size()),
              " results of completed rounds to their new servers, pushing ", again,
              " unanswered requests again and ", queued, " not yet sent there");
}

}  // namespace bytecomp::worker
