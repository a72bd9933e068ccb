#include "data_loop.h"

#include <optional>
#include <variant>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/config.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/common/sealed_messages.h"
#include "stage_pipeline.h"

namespace bytecomp::worker {
namespace {

// How long the loop, once stopped, waits for ZeroMQ to drop the payloads of its closed sockets
// (HeldPayloads): it takes milliseconds.
constexpr absl::Duration kHeldPayloadsWait = absl::Seconds(5);

}  // namespace

absl::Status DataLoop::DealerSockets::Send(int server, int connection,
                                           std::vector<zmq::message_t>& frames) {
  if (absl::Status s = seals_.Seal(frames); !s.ok()) return s;
  return SendFrames(sockets_[server][connection], frames);
}

void DataLoop::DealerSockets::Open(int server, const std::string& address) {
  const proto::ClusterConfig& config = *w_.config;
  // Closing a socket drops what it still queues, which releases zero-copy payloads.
  sockets_[server].clear();
  for (int c = 0; c < config.connections_per_server(); ++c) {
    sockets_[server].emplace_back(*w_.context, zmq::socket_type::dealer);
    ConfigureSocket(sockets_[server].back());
    if (!seals_.on()) w_.security->SecureConnecting(sockets_[server].back());
    LimitSocket(sockets_[server].back(), DataSocketLimits(config));
    sockets_[server].back().connect(address);
  }
  changed_ = true;
}

void DataLoop::DealerSockets::Close(int server) {
  sockets_[server].clear();
  changed_ = true;
}

absl::Status DataLoop::StartSealing() {
  if (w_.data_key.empty()) return absl::OkStatus();
  const uint32_t rank = static_cast<uint32_t>(w_.rank);
  absl::StatusOr<DataKey> key = DataKeyFromBytes(w_.data_key, rank, "this worker");
  if (!key.ok()) return key.status();
  std::vector<DataKey> servers;
  for (const proto::ServerInfo& server : w_.topology->servers()) {
    absl::StatusOr<DataKey> theirs =
        DataKeyFromBytes(server.data_key(), static_cast<uint32_t>(server.rank()),
                         absl::StrCat("server ", server.rank()));
    if (!theirs.ok()) return theirs.status();
    servers.push_back(*theirs);
  }
  seal_key_ = std::make_unique<SealKey>(DataProtectionOf(*w_.config), *key, rank);
  absl::StatusOr<DataSeals> seals = NewDataSeals(seal_key_.get(), servers);
  if (!seals.ok()) return seals.status();
  seals_ = *std::move(seals);
  return absl::OkStatus();
}

absl::Status DataLoop::TakeReplacementKey(const ReconnectServer& reconnect) {
  if (!seals_.on()) return absl::OkStatus();
  absl::StatusOr<DataKey> key =
      DataKeyFromBytes(reconnect.data_key, static_cast<uint32_t>(reconnect.server),
                       absl::StrCat("replacement server ", reconnect.server));
  if (!key.ok()) return key.status();
  return seals_.opener->keys().AddKey(*key, key->id);
}

bool DataLoop::OpenReply(int server, std::vector<zmq::message_t>& frames) {
  absl::Status s = seals_.Open(frames);
  if (s.ok()) return true;
  unsealed_.RefuseAndLog(
      absl::StrCat("server ", server),
      absl::StrCat("dropped a reply on server ", server,
                   "'s connection not sealed under its data key (", s.message(), ")"),
      MonotonicMs());
  return false;
}

void DataLoop::Run() {
  const int servers = w_.topology->num_servers();
  const absl::Status sealing = StartSealing();
  uint64_t next_request = 1;
  if (sealing.ok()) {
    for (int s = 0; s < servers; ++s) sockets_.Open(s, w_.topology->servers(s).data_address());
    ProbeLinks(&next_request);
  }
  PartitionSender::Wiring wiring;
  wiring.config = w_.config;
  wiring.servers = servers;
  wiring.rank = w_.rank;
  wiring.token = w_.token;
  wiring.connections = &sockets_;
  wiring.tracker = w_.tracker;
  wiring.traffic = w_.traffic;
  wiring.held = w_.held;
  wiring.timeline = w_.timeline;
  wiring.first_request = next_request;
  PartitionSender sender(wiring);
  if (!sealing.ok()) {
    // Nothing can be sent: every operation fails naming why, until the engine stops.
    BC_LOG_ERROR("cannot seal the data messages: ", sealing.ToString());
    sender.FailAll(absl::Status(
        sealing.code(), absl::StrCat("cannot seal the data messages: ", sealing.message())));
  }

  std::vector<zmq::pollitem_t> items;
  std::vector<std::pair<int, zmq::socket_t*>> item_socket;  // (server, socket) per item
  size_t queue_item = 0;
  auto build_items = [&] {
    items.clear();
    item_socket.clear();
    for (size_t s = 0; s < sockets_.sockets().size(); ++s) {
      for (auto& sock : sockets_.sockets()[s]) {
        items.push_back({sock.handle(), 0, ZMQ_POLLIN, 0});
        item_socket.emplace_back(static_cast<int>(s), &sock);
      }
    }
    items.push_back({nullptr, w_.commands->fd(), ZMQ_POLLIN, 0});
    queue_item = items.size() - 1;
  };
  sockets_.TakeChanged();
  build_items();
  bool stop = false;
  while (!stop) {
    try {
      // Once the sockets are closed (failure), only the command queue is watched.
      if (!sender.closed().ok()) {
        zmq::poll(&items[queue_item], 1, std::chrono::milliseconds(1000));
      } else {
        zmq::poll(items.data(), items.size(), std::chrono::milliseconds(1000));
      }
    } catch (const zmq::error_t& e) {
      sender.FailAll(absl::UnavailableError(absl::StrCat("data poll: ", e.what())));
      continue;
    }
    if (items[queue_item].revents & ZMQ_POLLIN) {
      for (DataCommand& command : w_.commands->TakeAll()) {
        if (std::holds_alternative<StopData>(command)) {
          stop = true;
        } else {
          if (auto* reconnect = std::get_if<ReconnectServer>(&command)) {
            if (absl::Status s = TakeReplacementKey(*reconnect); !s.ok()) {
              sender.FailAll(absl::Status(
                  s.code(),
                  absl::StrCat("cannot open the replacement server's replies: ", s.message())));
              continue;
            }
          }
          sender.Take(command);
        }
      }
    }
    if (!sender.closed().ok()) continue;
    if (sockets_.TakeChanged()) {  // a server's connections were replaced: their events are stale
      build_items();
      sender.SendReady();
      continue;
    }
    for (size_t i = 0; i < queue_item; ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      auto [server, socket] = item_socket[i];
      for (int n = 0; n < 64; ++n) {  // drain what is there without blocking
        absl::StatusOr<std::vector<zmq::message_t>> frames =
            RecvFrames(*socket, std::chrono::milliseconds(0));
        if (!frames.ok() || frames->empty()) break;
        if (!OpenReply(server, *frames)) continue;
        if (std::optional<PulledPartition> pulled = sender.HandleReply(server, *frames)) {
          pulled->op->stages->Pulled(pulled->op, pulled->partition, pulled->stage,
                                     std::move(pulled->payload), pulled->server);
        }
      }
    }
    sender.SendReady();
  }
  if (sender.closed().ok()) sender.FailAll(absl::CancelledError("the engine stopped"));
  // The sockets are closed; ZeroMQ drops what they still queued on its own threads.
  if (const int64_t held = w_.held->AwaitNone(kHeldPayloadsWait); held > 0) {
    BC_LOG_ERROR("internal error: ZeroMQ still holds ", held, " push payloads ",
                 absl::FormatDuration(kHeldPayloadsWait),
                 " after the data loop closed its sockets; their operations complete when the "
                 "engine's ZeroMQ context ends");
  }
}

}  // namespace bytecomp::worker
