#include "data_loop.h"

#include "absl/strings/str_cat.h"
#include "bytecomp/common/config.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/common/partition.h"
#include "bytecomp/worker/engine/operation.h"

namespace bytecomp::worker {
namespace {

// How long the loop, once stopped, waits for ZeroMQ to drop the payloads of its closed sockets
// (HeldPayloads): it takes milliseconds.
constexpr absl::Duration kHeldPayloadsWait = absl::Seconds(5);

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

void DataLoop::Connect() {
  const proto::ClusterConfig& config = *w_.config;
  const int servers = w_.topology->num_servers();
  sockets_.resize(servers);
  queues_.resize(servers);
  inflight_bytes_.assign(servers, 0);
  inflight_pushes_.assign(servers, 0);
  inflight_pulls_.assign(servers, 0);
  deferred_pulls_.assign(servers, {});
  epochs_.assign(servers, 0);
  budget_bytes_ = config.max_inflight_bytes_per_server() > 0
                      ? config.max_inflight_bytes_per_server()
                      : config.partition_bytes();
  for (int s = 0; s < servers; ++s) ConnectServer(s, w_.topology->servers(s).data_address());
}

void DataLoop::ConnectServer(int server, const std::string& address) {
  const proto::ClusterConfig& config = *w_.config;
  // Closing a socket drops what it still queues, which releases zero-copy payloads.
  sockets_[server].clear();
  for (int c = 0; c < config.connections_per_server(); ++c) {
    sockets_[server].emplace_back(*w_.context, zmq::socket_type::dealer);
    ConfigureSocket(sockets_[server].back());
    w_.security->SecureConnecting(sockets_[server].back());
    LimitSocket(sockets_[server].back(), DataSocketLimits(config));
    sockets_[server].back().connect(address);
  }
  sockets_changed_ = true;
}

void DataLoop::Run() {
  Connect();
  ProbeLinks();
  std::vector<zmq::pollitem_t> items;
  std::vector<std::pair<int, zmq::socket_t*>> item_socket;  // (server, socket) per item
  size_t queue_item = 0;
  auto build_items = [&] {
    items.clear();
    item_socket.clear();
    for (size_t s = 0; s < sockets_.size(); ++s) {
      for (auto& sock : sockets_[s]) {
        items.push_back({sock.handle(), 0, ZMQ_POLLIN, 0});
        item_socket.emplace_back(static_cast<int>(s), &sock);
      }
    }
    items.push_back({nullptr, w_.commands->fd(), ZMQ_POLLIN, 0});
    queue_item = items.size() - 1;
    sockets_changed_ = false;
  };
  build_items();
  bool stop = false;
  while (!stop) {
    try {
      // Once the sockets are closed (failure), only the command queue is watched.
      if (!closed_.ok()) {
        zmq::poll(&items[queue_item], 1, std::chrono::milliseconds(1000));
      } else {
        zmq::poll(items.data(), items.size(), std::chrono::milliseconds(1000));
      }
    } catch (const zmq::error_t& e) {
      FailAll(absl::UnavailableError(absl::StrCat("data poll: ", e.what())));
      continue;
    }
    if (items[queue_item].revents & ZMQ_POLLIN) {
      for (DataCommand& command : w_.commands->TakeAll()) Take(command, &stop);
    }
    if (!closed_.ok()) continue;
    if (sockets_changed_) {  // a server's connections were replaced: their events are stale
      build_items();
      SendReady();
      continue;
    }
    for (size_t i = 0; i < queue_item; ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      auto [server, socket] = item_socket[i];
      for (int n = 0; n < 64; ++n) {  // drain what is there without blocking
        absl::StatusOr<std::vector<zmq::message_t>> frames =
            RecvFrames(*socket, std::chrono::milliseconds(0));
        if (!frames.ok() || frames->empty()) break;
        HandleReply(server, *frames);
      }
    }
    SendReady();
  }
  if (closed_.ok()) FailAll(absl::CancelledError("the engine stopped"));
  // The sockets are closed; ZeroMQ drops what they still queued on its own threads.
  if (const int64_t held = held_.AwaitNone(kHeldPayloadsWait); held > 0) {
    BC_LOG_ERROR("internal error: ZeroMQ still holds ", held, " push payloads ",
                 absl::FormatDuration(kHeldPayloadsWait),
                 " after the data loop closed its sockets; their operations complete when the "
                 "engine's ZeroMQ context ends");
  }
}

void DataLoop::Take(DataCommand& command, bool* stop) {
  if (auto* start = std::get_if<StartOperation>(&command)) {
    const std::shared_ptr<Operation>& op = start->op;
    if (!closed_.ok()) {
      w_.tracker->FailAll(op, closed_);
      return;
    }
    for (int64_t p = 0; p < op->layout.num_partitions(); ++p) {
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
    if (closed_.ok() && reconnect->server >= 0 &&
        reconnect->server < static_cast<int>(sockets_.size())) {
      Reconnect(reconnect->server, reconnect->address, reconnect->epoch);
    }
  } else if (auto* fail = std::get_if<FailEverything>(&command)) {
    FailAll(fail->reason);
  } else {
    *stop = true;
  }
}

void DataLoop::SendReady() {
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

proto::DataHeader DataLoop::HeaderFor(const Operation& op, int64_t partition, uint32_t stage) const {
  const PartitionRange range = op.layout.range(partition);
  proto::DataHeader header;
  header.set_op(proto::OP_PUSH);
  header.set_key(MakeKey(op.layout.tensor_id, static_cast<uint32_t>(partition)));
  header.set_round(op.wire_round + (stage == 2 ? 1 : 0));
  header.set_iteration(op.round);
  header.set_strategy_version(op.plan.version);
  header.set_stage(stage);
  header.set_dtype(op.request.dtype);
  header.set_element_count(range.count);
  header.set_sender(w_.rank);
  header.set_server_epoch(epochs_[ServerOf(op, partition)]);
  SetHeaderToken(w_.token, &header);
  if (op.plan.compressed()) header.set_codec(op.plan.push.name());
  return header;
}

void DataLoop::Send(const PartitionTask& task) {
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
    const PartitionRange range = op.layout.range(task.partition);
    const size_t elem = DTypeSize(op.request.dtype);
    bytes = range.count * static_cast<int64_t>(elem);
    header.set_payload_bytes(bytes);
    push.push_back(ProtoFrame(header));
    char* payload = op.host_data() + range.offset * elem;
    if (task.resend) {
      // Sent before, to a lost server, whose socket released the zero-copy payload: a copy,
      // so that the payload is released once.
      push.emplace_back(payload, static_cast<size_t>(bytes));
    } else {
      auto* release = new PayloadRelease{w_.tracker, &held_, task.op, task.partition};
      push.emplace_back(payload, static_cast<size_t>(bytes), &ReleasePayload, release);
      held_.Hold();  // until its free function runs
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
    auto* release = new EncodedRelease{&held_, task.encoded};
    push.emplace_back(const_cast<uint8_t*>(payload.data()), payload.size(), &ReleaseEncoded,
                      release);
    held_.Hold();
  }
  // The pull goes right behind the push on the same connection (unless too many pulls are in
  // flight: SendOrDeferPull): the server sees them in order and holds the pull until the round
  // is complete, so a round costs one round trip.
  header.set_op(proto::OP_PULL);
  header.set_payload_bytes(0);
  header.clear_error();
  zmq::message_t pull = ProtoFrame(header);

  auto& conns = sockets_[server];
  if (conns.empty()) {  // a lost server's partition that moved nowhere: cannot happen
    w_.tracker->ResultFailed(task.op, task.partition, absl::UnavailableError(absl::StrCat(
        "server ", server, " was lost and no server holds partition ", task.partition, " of '",
        op.request.name, "'")));
    return;
  }
  zmq::socket_t& socket = conns[(task.partition + op.layout.tensor_id) % conns.size()];
  int64_t sent_us = 0;
  if (w_.timeline != nullptr) {
    sent_us = telemetry::Timeline::NowUs();
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
  in.bytes = bytes;
  in.unacked = true;
  in.socket = &socket;
  in.pull = std::move(pull);
  in.sent_us = sent_us;
  inflight_bytes_[server] += bytes;
  ++inflight_pushes_[server];
  if (absl::Status s = SendFrames(socket, push); !s.ok()) {
    Finished(in);
    inflight_.erase(request);
    // The pull reply will not come. (A zero-copy payload is released with its message.)
    w_.tracker->ResultFailed(task.op, task.partition, absl::UnavailableError(absl::StrCat(
                                                          "sending to server ", server, ": ",
                                                          s.message())));
    return;
  }
  SendOrDeferPull(request, in);
}

void DataLoop::SendOrDeferPull(uint64_t request, InFlight& in) {
  if (inflight_pulls_[in.server] >= kMaxInflightPullsPerServer) {
    deferred_pulls_[in.server].push_back(request);
    return;
  }
  std::vector<zmq::message_t> frames;
  frames.push_back(std::move(in.pull));
  in.pull_sent = true;
  ++inflight_pulls_[in.server];
  if (absl::Status s = SendFrames(*in.socket, frames); !s.ok()) {
    const InFlight failed = std::move(in);
    inflight_.erase(request);
    Finished(failed);
    w_.tracker->ResultFailed(failed.op, failed.partition,
                             absl::UnavailableError(absl::StrCat(
                                 "sending to server ", failed.server, ": ", s.message())));
  }
}

void DataLoop::SendDeferredPulls(int server) {
  std::deque<uint64_t>& deferred = deferred_pulls_[server];
  while (!deferred.empty() && inflight_pulls_[server] < kMaxInflightPullsPerServer) {
    const uint64_t request = deferred.front();
    deferred.pop_front();
    auto it = inflight_.find(request);
    if (it == inflight_.end() || it->second.pull_sent) continue;  // answered or failed meanwhile
    SendOrDeferPull(request, it->second);
  }
}

void DataLoop::Finished(const InFlight& in) {
  inflight_bytes_[in.server] -= in.bytes;
  if (in.unacked) --inflight_pushes_[in.server];
  if (in.pull_sent) --inflight_pulls_[in.server];
}

void DataLoop::SendAbort(const Operation& op, int64_t partition, uint32_t stage,
                         const std::string& why) {
  proto::DataHeader header = HeaderFor(op, partition, stage);
  header.set_request_id(next_request_++);  // its ack or error is not waited for
  header.set_error(why);
  std::vector<zmq::message_t> frames;
  frames.push_back(ProtoFrame(header));
  auto& conns = sockets_[ServerOf(op, partition)];
  if (conns.empty()) return;  // a lost server's
  (void)SendFrames(conns[(partition + op.layout.tensor_id) % conns.size()], frames);
}

void DataLoop::HandleReply(int server, std::vector<zmq::message_t>& frames) {
  proto::DataHeader header;
  if (frames.empty() || !header.ParseFromArray(frames[0].data(), static_cast<int>(frames[0].size()))) {
    BC_LOG_WARNING("malformed reply from server ", server);
    return;
  }
  auto it = inflight_.find(header.request_id());
  if (it == inflight_.end()) return;  // a late answer (an abort's ack, a failed round's pull)
  if (header.op() != proto::OP_PUSH_ACK && header.op() != proto::OP_PULL_REPLY &&
      header.op() != proto::OP_ERROR) {
    return;
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
  if (header.op() == proto::OP_PUSH_ACK) return;
  if (header.op() == proto::OP_ERROR && header.server_epoch() != epochs_[in.server]) {
    // Refused by a replacement this worker has not heard of yet (the request was queued for
    // the lost server and found the replacement on the same address): its ServerReplaced is
    // on the way, and Reconnect sends the request again with the new epoch.
    return;
  }
  const InFlight done = std::move(in);
  inflight_.erase(it);
  Finished(done);
  SendDeferredPulls(done.server);
  if (header.op() == proto::OP_PULL_REPLY) {
    if (done.aborted) {  // the error is recorded: the round cannot have a result
      w_.tracker->ResultIn(done.op, done.partition);
      return;
    }
    zmq::message_t payload;
    if (frames.size() == 2) payload = std::move(frames[1]);
    if (ServerFailoverOn(*w_.config)) KeepCompleted(done, header, payload);
    if (w_.timeline != nullptr) {
      const int64_t now = telemetry::Timeline::NowUs();
      const int64_t bytes = static_cast<int64_t>(payload.size());
      TraceStage(*w_.timeline, *done.op, done.partition, telemetry::Stage::kRoundTrip,
                 done.sent_us, now - done.sent_us, bytes);
      TraceStage(*w_.timeline, *done.op, done.partition, telemetry::Stage::kPullReceived, now, -1,
                 bytes);
    }
    done.op->stages->Pulled(done.op, done.partition, done.stage, std::move(payload), server);
    return;
  }
  // The push or the pull was refused: the round on the server must still complete for the
  // other workers, so abort it (a no-op if our push was already counted).
  SendAbort(*done.op, done.partition, done.stage, header.error());
  w_.tracker->ResultFailed(done.op, done.partition, absl::FailedPreconditionError(header.error()));
}

void DataLoop::FailAll(const absl::Status& reason) {
  if (!closed_.ok()) return;
  closed_ = reason.ok() ? absl::CancelledError("the engine stopped") : reason;
  // Closing the sockets makes ZeroMQ drop the queued payloads, which releases them.
  sockets_.clear();
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

void DataLoop::KeepCompleted(const InFlight& done, const proto::DataHeader& reply,
                             const zmq::message_t& payload) {
  Completed& kept = completed_[reply.key()];
  kept.server = done.server;
  kept.header = HeaderFor(*done.op, done.partition, done.stage);
  kept.header.set_codec(reply.codec());  // the result's: raw, the fp32 sum, or the pull codec's
  kept.header.set_payload_bytes(static_cast<int64_t>(payload.size()));
  // Shares the receive buffer (the stages only read it): no copy.
  kept.payload.copy(const_cast<zmq::message_t&>(payload));
}

void DataLoop::Reconnect(int server, const std::string& address, uint64_t epoch) {
  epochs_[server] = epoch;
  ConnectServer(server, address);
  // First each key's replay, on the connection the key's requests take (one connection keeps
  // their order): the replacement learns where this worker stands before anything else.
  int64_t replays = 0;
  for (const auto& [key, kept] : completed_) {
    if (kept.server != server) continue;
    if (!Replay(key, kept, server)) return;
    ++replays;
  }
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
              replays, " results of completed rounds, pushing ", again, " unanswered ones again and ",
              static_cast<int64_t>(queues_[server].size()) - again, " not yet sent");
}

int DataLoop::ServerOf(const Operation& op, int64_t partition) const {
  if (!moved_.empty()) {
    auto it = moved_.find(MakeKey(op.layout.tensor_id, static_cast<uint32_t>(partition)));
    if (it != moved_.end()) return it->second;
  }
  return op.layout.partition_server[partition];
}

bool DataLoop::Replay(uint64_t key, const Completed& kept, int server) {
  proto::DataHeader header = kept.header;
  header.set_replay(true);
  header.set_server_epoch(epochs_[server]);
  std::vector<zmq::message_t> frames;
  frames.push_back(ProtoFrame(header));
  frames.emplace_back();
  frames.back().copy(const_cast<zmq::message_t&>(kept.payload));
  auto& conns = sockets_[server];
  zmq::socket_t& socket = conns[(KeyPartition(key) + KeyTensor(key)) % conns.size()];
  if (absl::Status s = SendFrames(socket, frames); !s.ok()) {
    FailAll(absl::UnavailableError(
        absl::StrCat("replaying to server ", server, " after a server was lost: ", s.message())));
    return false;
  }
  return true;
}

void DataLoop::Move(const MoveKeys& move) {
  const int servers = static_cast<int>(sockets_.size());
  for (const auto& [key, server] : move.keys) {
    if (server >= 0 && server < servers && !sockets_[server].empty()) moved_[key] = server;
  }
  if (move.from_server >= 0 && move.from_server < servers) {
    // Closing drops what waits for the lost server, which releases zero-copy payloads (an
    // operation completes only once they are).
    sockets_[move.from_server].clear();
    sockets_changed_ = true;
  }
  // Each moved key's replay first (its new server learns where this worker stands), then what
  // the lost server had not answered, then what was not yet sent to it.
  int64_t replays = 0, again = 0, queued = 0;
  for (auto& [key, kept] : completed_) {
    auto it = moved_.find(key);
    if (it == moved_.end() || it->second == kept.server) continue;
    kept.server = it->second;
    if (!Replay(key, kept, kept.server)) return;
    ++replays;
  }
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
  if (move.from_server >= 0 && move.from_server < servers) deferred_pulls_[move.from_server].clear();
  BC_LOG_INFO("server ", move.from_server, "'s partitions moved: replayed ", replays,
              " results of completed rounds to their new servers, pushing ", again,
              " unanswered requests again and ", queued, " not yet sent there");
}

}  // namespace bytecomp::worker
