// The data I/O thread: priority-ordered pushes and pulls over C DEALER sockets per server.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine_impl.h"

namespace bytecomp::worker {
namespace {

// ZeroMQ calls this from its I/O thread once it no longer needs a zero-copy push payload.
struct PayloadRelease {
  EngineImpl* engine;
  std::shared_ptr<Operation> op;
};
void ReleasePayload(void* /*data*/, void* hint) {
  auto* release = static_cast<PayloadRelease*>(hint);
  release->engine->FinishEvents(release->op, 1);
  delete release;
}

// ZeroMQ's release of an encoded payload: drops the engine's reference to the buffer.
void ReleaseEncoded(void* /*data*/, void* hint) { delete static_cast<std::shared_ptr<EncodedPush>*>(hint); }

}  // namespace

void DataLoop::Connect() {
  const proto::ClusterConfig& config = engine_.config_;
  const int servers = engine_.info.num_servers;
  const int conns = config.connections_per_server();
  sockets_.resize(servers);
  queues_.resize(servers);
  inflight_bytes_.assign(servers, 0);
  budget_bytes_ = config.max_inflight_bytes_per_server() > 0
                      ? config.max_inflight_bytes_per_server()
                      : config.partition_bytes();
  for (int s = 0; s < servers; ++s) {
    const std::string& address = engine_.topology_.servers(s).data_address();
    for (int c = 0; c < conns; ++c) {
      sockets_[s].emplace_back(*engine_.context_, zmq::socket_type::dealer);
      ConfigureSocket(sockets_[s].back());
      sockets_[s].back().connect(address);
    }
  }
}

void DataLoop::Run() {
  Connect();
  ProbeLinks();
  std::vector<zmq::pollitem_t> items;
  std::vector<std::pair<int, zmq::socket_t*>> item_socket;  // (server, socket) per item
  for (size_t s = 0; s < sockets_.size(); ++s) {
    for (auto& sock : sockets_[s]) {
      items.push_back({sock.handle(), 0, ZMQ_POLLIN, 0});
      item_socket.emplace_back(static_cast<int>(s), &sock);
    }
  }
  items.push_back({nullptr, engine_.data_queue_.fd(), ZMQ_POLLIN, 0});
  const size_t queue_item = items.size() - 1;
  bool stop = false;
  while (!stop) {
    try {
      // Once the sockets are closed (failure), only the command queue is watched.
      if (closed_) {
        zmq::poll(&items[queue_item], 1, std::chrono::milliseconds(1000));
      } else {
        zmq::poll(items.data(), items.size(), std::chrono::milliseconds(1000));
      }
    } catch (const zmq::error_t& e) {
      FailAll(absl::UnavailableError(absl::StrCat("data poll: ", e.what())));
      continue;
    }
    if (items[queue_item].revents & ZMQ_POLLIN) {
      for (DataCommand& cmd : engine_.data_queue_.TakeAll()) {
        if (auto* start = std::get_if<StartOperation>(&cmd)) {
          if (closed_) {
            start->op->RecordError(engine_.EngineStatus());
            engine_.FinishEvents(start->op, start->op->pending_events.load());
          } else {
            Enqueue(start->op);
          }
        } else if (auto* encoded = std::get_if<std::shared_ptr<EncodedPush>>(&cmd)) {
          const std::shared_ptr<EncodedPush>& e = *encoded;
          if (closed_) {
            e->op->RecordError(engine_.EngineStatus());
            engine_.FinishEvents(e->op, 1);
          } else {
            const int server = e->op->layout.partition_server[e->partition];
            queues_[server].push(PartitionTask{e->op, e, e->partition, e->op->priority, sequence_++});
          }
        } else if (auto* fail = std::get_if<FailEverything>(&cmd)) {
          FailAll(fail->reason);
        } else {
          stop = true;
        }
      }
    }
    if (closed_) continue;
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
  if (!closed_) FailAll(absl::CancelledError("the engine stopped"));
}

void DataLoop::Enqueue(const std::shared_ptr<Operation>& op) {
  for (int64_t p = 0; p < op->layout.num_partitions(); ++p) {
    const int server = op->layout.partition_server[p];
    queues_[server].push(PartitionTask{op, nullptr, p, op->priority, sequence_++});
  }
}

void DataLoop::SendReady() {
  for (size_t s = 0; s < queues_.size(); ++s) {
    while (!queues_[s].empty() &&
           (inflight_bytes_[s] == 0 || inflight_bytes_[s] < budget_bytes_)) {
      PartitionTask task = queues_[s].top();
      queues_[s].pop();
      Send(task);
    }
  }
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
  header.set_dtype(op.dtype);
  header.set_element_count(range.count);
  header.set_sender(engine_.info.rank);
  if (op.plan.compressed()) header.set_codec(op.plan.push.name());
  return header;
}

void DataLoop::Send(const PartitionTask& task) {
  Operation& op = *task.op;
  const int server = op.layout.partition_server[task.partition];
  const uint32_t stage = task.encoded != nullptr ? task.encoded->stage : 0;
  const uint64_t request = next_request_++;
  proto::DataHeader header = HeaderFor(op, task.partition, stage);
  header.set_request_id(request);

  std::vector<zmq::message_t> push;
  int64_t bytes = 0;
  if (task.encoded == nullptr) {
    const PartitionRange range = op.layout.range(task.partition);
    const size_t elem = DTypeSize(op.dtype);
    bytes = range.count * static_cast<int64_t>(elem);
    header.set_payload_bytes(bytes);
    push.push_back(ProtoFrame(header));
    char* payload = op.host_data() + range.offset * elem;
    push.emplace_back(payload, static_cast<size_t>(bytes), &ReleasePayload,
                      new PayloadRelease{&engine_, task.op});
    engine_.CountPush(bytes, bytes);
  } else if (!task.encoded->abort_error.empty()) {
    header.set_error(task.encoded->abort_error);
    push.push_back(ProtoFrame(header));
  } else {
    const EncodedPush& payload = *task.encoded;
    bytes = static_cast<int64_t>(payload.size());
    header.set_payload_bytes(bytes);
    push.push_back(ProtoFrame(header));
    push.emplace_back(const_cast<uint8_t*>(payload.data()), payload.size(), &ReleaseEncoded,
                      new std::shared_ptr<EncodedPush>(task.encoded));
  }
  // The pull goes right behind the push on the same connection: the server sees them in order
  // and holds the pull until the round is complete, so a round costs one round trip.
  header.set_op(proto::OP_PULL);
  header.set_payload_bytes(0);
  header.clear_error();
  std::vector<zmq::message_t> pull;
  pull.push_back(ProtoFrame(header));

  auto& conns = sockets_[server];
  zmq::socket_t& socket = conns[(task.partition + op.layout.tensor_id) % conns.size()];
  InFlight& in = inflight_[request];
  in = InFlight{task.op, task.partition, stage, task.encoded != nullptr, false, server, bytes};
  inflight_bytes_[server] += bytes;
  absl::Status s = SendFrames(socket, push);
  if (s.ok()) s = SendFrames(socket, pull);
  if (!s.ok()) {
    task.op->RecordError(absl::UnavailableError(
        absl::StrCat("sending to server ", server, ": ", s.message())));
    inflight_bytes_[server] -= bytes;
    inflight_.erase(request);
    engine_.FinishEvents(task.op, 1);  // the pull reply that will not come
  }
}

void DataLoop::SendAbort(const Operation& op, int64_t partition, uint32_t stage,
                         const std::string& why) {
  proto::DataHeader header = HeaderFor(op, partition, stage);
  header.set_request_id(next_request_++);  // its ack or error is not waited for
  header.set_error(why);
  std::vector<zmq::message_t> frames;
  frames.push_back(ProtoFrame(header));
  auto& conns = sockets_[op.layout.partition_server[partition]];
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
  InFlight& in = it->second;
  // The in-flight budget counts pushes the server has not yet received: an ack frees it at
  // once, whatever the other workers do. (Counting until the pull reply would let two workers
  // that filled their budgets with different keys wait on each other forever.)
  auto release_budget = [&] {
    inflight_bytes_[in.server] -= in.bytes;
    in.bytes = 0;
  };
  if (header.op() == proto::OP_PUSH_ACK) {
    release_budget();
    return;
  }
  std::shared_ptr<Operation> op = in.op;
  const int64_t partition = in.partition;
  if (header.op() == proto::OP_PULL_REPLY) {
    zmq::message_t payload;
    if (frames.size() == 2) payload = std::move(frames[1]);
    release_budget();
    const uint32_t stage = in.stage;
    const bool compressed = in.compressed;
    inflight_.erase(it);
    if (compressed) {
      engine_.SubmitDecode(op, partition, stage, std::move(payload), server);
      return;
    }
    const PartitionRange range = op->layout.range(partition);
    const size_t expected = static_cast<size_t>(range.count) * DTypeSize(op->dtype);
    if (payload.size() != expected) {
      op->RecordError(absl::DataLossError(absl::StrCat(
          "server ", server, " answered the pull of '", op->name, "' partition ", partition,
          " with ", payload.size(), " bytes, expected ", expected)));
      engine_.FinishEvents(op, 1);
      return;
    }
    engine_.CountPull(static_cast<int64_t>(payload.size()), static_cast<int64_t>(expected));
    // The copy into the caller's tensor runs on the pool, so this thread goes on receiving.
    engine_.SubmitToPool(
        op->priority, proto::PLACEMENT_CPU_POOL,
        [this, op, partition, p = std::move(payload)]() mutable {
          const PartitionRange r = op->layout.range(partition);
          if (op->average) {
            std::vector<float> sum(static_cast<size_t>(r.count));
            ToFloat32(op->dtype, p.data(), sum.data(), sum.size());
            engine_.WriteResult(*op, partition, sum.data());
          } else {
            std::memcpy(op->host_data() + r.offset * DTypeSize(op->dtype), p.data(), p.size());
          }
          engine_.DeliverPartition(op, partition);
        },
        op, nullptr);
    return;
  }
  if (header.op() != proto::OP_ERROR) return;
  // The push or the pull was refused: the round on the server must still complete for the
  // other workers, so abort it (a no-op if our push was already counted).
  op->RecordError(absl::FailedPreconditionError(header.error()));
  release_budget();
  const uint32_t stage = in.stage;
  inflight_.erase(it);
  SendAbort(*op, partition, stage, header.error());
  engine_.FinishEvents(op, 1);
}

void DataLoop::FailAll(const absl::Status& reason) {
  if (closed_) return;
  closed_ = true;
  // Closing the sockets makes ZeroMQ drop the queued payloads, which releases them.
  sockets_.clear();
  for (auto& [request, in] : inflight_) {
    in.op->RecordError(reason);
    engine_.FinishEvents(in.op, 1);
  }
  inflight_.clear();
  for (auto& q : queues_) {
    while (!q.empty()) {
      const PartitionTask& t = q.top();
      t.op->RecordError(reason);
      // Never sent: no pull reply, and (uncompressed) no payload for ZeroMQ to release.
      engine_.FinishEvents(t.op, t.encoded != nullptr ? 1 : 2);
      q.pop();
    }
  }
}

}  // namespace bytecomp::worker
