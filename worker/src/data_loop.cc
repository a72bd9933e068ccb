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

// Writes a pull reply into the caller's tensor, dividing by the worker count when averaging.
void WriteResult(const Operation& op, const PartitionRange& range, const void* sum, int workers) {
  const size_t elem = DTypeSize(op.dtype);
  char* dst = static_cast<char*>(op.data) + range.offset * elem;
  const size_t n = static_cast<size_t>(range.count);
  if (!op.average) {
    std::memcpy(dst, sum, n * elem);
    return;
  }
  const float w = static_cast<float>(workers);
  if (op.dtype == proto::DTYPE_FLOAT32) {
    const float* s = static_cast<const float*>(sum);
    float* d = reinterpret_cast<float*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = s[i] / w;
    return;
  }
  std::vector<float> wide(n);
  ToFloat32(op.dtype, sum, wide.data(), n);
  for (float& x : wide) x /= w;
  FromFloat32(op.dtype, wide.data(), dst, n);
}

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
                      : 4 * conns * config.partition_bytes();
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
    queues_[server].push(PartitionTask{op, p, op->priority, sequence_++});
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

void DataLoop::Send(const PartitionTask& task) {
  Operation& op = *task.op;
  const PartitionRange range = op.layout.range(task.partition);
  const int server = op.layout.partition_server[task.partition];
  const size_t elem = DTypeSize(op.dtype);
  const int64_t bytes = range.count * static_cast<int64_t>(elem);
  const uint64_t request = next_request_++;

  proto::DataHeader header;
  header.set_op(proto::OP_PUSH);
  header.set_key(MakeKey(op.layout.tensor_id, static_cast<uint32_t>(task.partition)));
  header.set_round(op.round);
  header.set_dtype(op.dtype);
  header.set_element_count(range.count);
  header.set_payload_bytes(bytes);
  header.set_sender(engine_.info.rank);
  header.set_request_id(request);

  auto& conns = sockets_[server];
  zmq::socket_t& socket = conns[(task.partition + op.layout.tensor_id) % conns.size()];
  std::vector<zmq::message_t> push;
  push.push_back(ProtoFrame(header));
  char* payload = static_cast<char*>(op.data) + range.offset * elem;
  push.emplace_back(payload, static_cast<size_t>(bytes), &ReleasePayload,
                    new PayloadRelease{&engine_, task.op});
  // The pull goes right behind the push on the same connection: the server sees them in order
  // and holds the pull until the round is complete, so a round costs one round trip.
  header.set_op(proto::OP_PULL);
  header.set_payload_bytes(0);
  std::vector<zmq::message_t> pull;
  pull.push_back(ProtoFrame(header));
  inflight_[request] = InFlight{task.op, task.partition, server, bytes};
  inflight_bytes_[server] += bytes;
  absl::Status s = SendFrames(socket, push);
  if (s.ok()) s = SendFrames(socket, pull);
  if (!s.ok()) {
    task.op->RecordError(absl::UnavailableError(
        absl::StrCat("sending to server ", server, ": ", s.message())));
    inflight_.erase(request);
    inflight_bytes_[server] -= bytes;
    engine_.FinishEvents(task.op, 1);  // the pull reply that will not come
  }
}

void DataLoop::HandleReply(int server, std::vector<zmq::message_t>& frames) {
  proto::DataHeader header;
  if (frames.empty() || !header.ParseFromArray(frames[0].data(), static_cast<int>(frames[0].size()))) {
    BC_LOG_WARNING("malformed reply from server ", server);
    return;
  }
  auto it = inflight_.find(header.request_id());
  if (it == inflight_.end()) {
    if (header.op() == proto::OP_ERROR) BC_LOG_ERROR(header.error());
    return;
  }
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
  if (header.op() == proto::OP_PULL_REPLY) {
    const PartitionRange range = in.op->layout.range(in.partition);
    const size_t expected = static_cast<size_t>(range.count) * DTypeSize(in.op->dtype);
    if (frames.size() != 2 || frames[1].size() != expected) {
      in.op->RecordError(absl::DataLossError(absl::StrCat(
          "server ", server, " answered the pull of '", in.op->name, "' partition ", in.partition,
          " with ", frames.size() == 2 ? frames[1].size() : 0, " bytes, expected ", expected)));
    } else {
      WriteResult(*in.op, range, frames[1].data(), engine_.info.size);
    }
  } else if (header.op() == proto::OP_ERROR) {
    in.op->RecordError(absl::FailedPreconditionError(header.error()));
  } else {
    return;
  }
  release_budget();
  std::shared_ptr<Operation> op = std::move(in.op);
  inflight_.erase(it);
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
      engine_.FinishEvents(t.op, 2);  // never sent: no pull reply, no payload to release
      q.pop();
    }
  }
}

}  // namespace bytecomp::worker
