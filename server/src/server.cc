#include "bytecomp/server/server.h"

#include <deque>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bytecomp/common.h"
#include "bytecomp/server/bandwidth_turn.h"
#include "bytecomp/server/key_store.h"
#include "bytecomp/server/request_validator.h"
#include "control.pb.h"
#include "data.pb.h"

namespace bytecomp::server {
namespace {

constexpr char kControlEndpoint[] = "inproc://server-control";
constexpr char kRepliesEndpoint[] = "inproc://server-replies";
std::string EngineEndpoint(int i) { return absl::StrCat("inproc://server-engine-", i); }

// Inproc messages from the control thread to the I/O thread: [kind, body].
constexpr char kDeclare[] = "declare";
constexpr char kStrategy[] = "strategy";
constexpr char kFail[] = "fail";
constexpr char kStop[] = "stop";

// How long a request for a key not yet declared waits for the scheduler's declaration (the
// worker may learn of it a moment before this server does).
constexpr int64_t kUndeclaredGraceMs = 3000;
constexpr size_t kMaxParkedRequests = 4096;

// Sends frames without throwing; a failure here means the process is shutting down.
void SendOrLog(zmq::socket_t& socket, std::vector<zmq::message_t>& frames) {
  if (absl::Status s = SendFrames(socket, frames); !s.ok()) BC_LOG_WARNING("send: ", s.ToString());
}

std::vector<zmq::message_t> ReplyFrames(OutgoingReply& reply) {
  std::vector<zmq::message_t> frames;
  frames.push_back(std::move(reply.identity));
  frames.push_back(ProtoFrame(reply.header));
  if (reply.has_payload) frames.push_back(std::move(reply.payload));
  return frames;
}

void EngineLoop(zmq::context_t& ctx, int index, int my_rank, int num_workers, int num_servers,
                std::vector<int> pushers) {
  zmq::socket_t in(ctx, zmq::socket_type::pull);
  in.bind(EngineEndpoint(index));
  zmq::socket_t out(ctx, zmq::socket_type::push);
  out.connect(kRepliesEndpoint);
  Catalog catalog(num_servers);  // this engine's copy, updated in order with its requests
  KeyStore store(my_rank, num_workers, catalog, std::move(pushers));
  std::vector<OutgoingReply> replies;
  while (true) {
    absl::StatusOr<std::vector<zmq::message_t>> frames = RecvFrames(in);
    if (!frames.ok() || frames->empty()) break;
    if (frames->size() <= 2 && (*frames)[0].size() < 16 &&
        std::string(static_cast<const char*>((*frames)[0].data()), (*frames)[0].size()).rfind("cmd:", 0) == 0) {
      const std::string cmd = FrameToString((*frames)[0]).substr(4);
      const std::string body = frames->size() == 2 ? FrameToString((*frames)[1]) : "";
      if (cmd == kStop) break;
      if (cmd == kFail) store.FailHeldPulls(body, &replies);
      if (cmd == kDeclare) {
        proto::DeclareReply declared;
        if (declared.ParseFromString(body)) (void)catalog.AddTensor(declared);
      }
      if (cmd == kStrategy) {
        proto::Strategy strategy;
        if (strategy.ParseFromString(body)) (void)catalog.AddStrategy(strategy);
      }
    } else {
      proto::DataHeader header;
      header.ParseFromArray((*frames)[1].data(), static_cast<int>((*frames)[1].size()));
      zmq::message_t payload;
      if (frames->size() > 2) payload = std::move((*frames)[2]);
      store.Handle(std::move((*frames)[0]), header, std::move(payload), &replies);
    }
    for (OutgoingReply& r : replies) {
      std::vector<zmq::message_t> f = ReplyFrames(r);
      SendOrLog(out, f);
    }
    replies.clear();
  }
  std::vector<std::string> pushes;
  for (size_t r = 0; r < store.pushes_by_worker().size(); ++r) {
    if (store.pushes_by_worker()[r] > 0) pushes.push_back(absl::StrCat(r, "=", store.pushes_by_worker()[r]));
  }
  // The per-worker push counts show who pushed (one local root per machine when hierarchical).
  BC_LOG_INFO("engine ", index, " stops after ", store.rounds_completed(), " rounds on ",
              store.num_keys(), " keys; pushes by worker: ",
              pushes.empty() ? "none" : absl::StrJoin(pushes, " "));
}

class IoLoop {
 public:
  IoLoop(zmq::context_t& ctx, zmq::socket_t& router, int my_rank, int num_workers,
         int num_servers, int engines, std::vector<int> pushers)
      : router_(router),
        validator_(my_rank, num_workers, num_servers, std::move(pushers)),
        my_rank_(my_rank) {
    control_ = zmq::socket_t(ctx, zmq::socket_type::pair);
    control_.connect(kControlEndpoint);
    replies_ = zmq::socket_t(ctx, zmq::socket_type::pull);
    replies_.bind(kRepliesEndpoint);
    for (int i = 0; i < engines; ++i) {
      engines_.emplace_back(ctx, zmq::socket_type::push);
      engines_.back().set(zmq::sockopt::sndhwm, 0);
    }
  }

  // Engines bind their inputs, so connect after they started.
  void ConnectEngines() {
    for (size_t i = 0; i < engines_.size(); ++i) engines_[i].connect(EngineEndpoint(static_cast<int>(i)));
  }

  void Run() {
    zmq::pollitem_t items[] = {{router_.handle(), 0, ZMQ_POLLIN, 0},
                               {replies_.handle(), 0, ZMQ_POLLIN, 0},
                               {control_.handle(), 0, ZMQ_POLLIN, 0}};
    while (!stopping_) {
      zmq::poll(items, 3, std::chrono::milliseconds(parked_.empty() ? 1000 : 50));
      if (items[1].revents & ZMQ_POLLIN) DrainReplies();
      if (items[0].revents & ZMQ_POLLIN) DrainRequests();
      if (items[2].revents & ZMQ_POLLIN) HandleControl();
      ExpireParked();
    }
    BroadcastToEngines(kStop, "");
    BC_LOG_INFO("served ", requests_, " requests; rejected ", rejected_);
  }

 private:
  struct Parked {
    int64_t since_ms;
    std::vector<zmq::message_t> frames;
  };

  void DrainReplies() {
    for (int i = 0; i < 256; ++i) {
      absl::StatusOr<std::vector<zmq::message_t>> frames = RecvFrames(replies_, std::chrono::milliseconds(0));
      if (!frames.ok() || frames->empty()) return;
      SendOrLog(router_, *frames);
    }
  }

  void DrainRequests() {
    for (int i = 0; i < 256; ++i) {
      absl::StatusOr<std::vector<zmq::message_t>> frames = RecvFrames(router_, std::chrono::milliseconds(0));
      if (!frames.ok() || frames->empty()) return;
      ++requests_;
      Dispatch(std::move(*frames), /*may_park=*/true);
    }
  }

  void Dispatch(std::vector<zmq::message_t> frames, bool may_park) {
    proto::DataHeader header;
    if (frames.size() < 2 || frames.size() > 3) {
      return RejectRaw(frames, absl::StrCat("malformed request: ", frames.size() - 1,
                                            " frames after the identity (expected a header and "
                                            "an optional payload)"));
    }
    if (!header.ParseFromArray(frames[1].data(), static_cast<int>(frames[1].size()))) {
      return RejectRaw(frames, absl::StrCat("malformed request: the header frame (",
                                            frames[1].size(), " bytes) is not a DataHeader"));
    }
    const bool has_payload = frames.size() == 3;
    if (header.op() == proto::OP_PROBE) {
      return AnswerProbe(frames[0], header, has_payload ? frames[2].size() : 0, has_payload);
    }
    if (may_park && validator_.AwaitsDeclaration(header) && parked_.size() < kMaxParkedRequests) {
      parked_.push_back(Parked{MonotonicMs(), std::move(frames)});
      return;
    }
    absl::Status valid = validator_.Validate(header, has_payload, has_payload ? frames[2].size() : 0);
    if (!valid.ok()) return Reject(frames[0], header, std::string(valid.message()));
    const size_t engine = (header.key() ^ (header.key() >> 32)) % engines_.size();
    SendOrLog(engines_[engine], frames);
  }

  // Link probes are answered here, off the key engines: the payload is dropped and the reply
  // carries the requested number of bytes. The bandwidth turn lets one prober (connection) at a
  // time do its transfers.
  void AnswerProbe(zmq::message_t& identity, const proto::DataHeader& request,
                   size_t payload_size, bool has_payload) {
    absl::Status valid = validator_.ValidateProbe(request, has_payload, payload_size);
    if (!valid.ok()) return Reject(identity, request, std::string(valid.message()));
    absl::StatusOr<proto::ProbeTurn> turn = bandwidth_turn_.OnProbe(
        absl::string_view(static_cast<const char*>(identity.data()), identity.size()), request,
        MonotonicMs());
    if (!turn.ok()) return Reject(identity, request, std::string(turn.status().message()));
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
    if (request.probe_reply_bytes() > 0) {
      frames.push_back(ProbePayload(request.probe_reply_bytes()));
    }
    SendOrLog(router_, frames);
  }

  void RejectRaw(std::vector<zmq::message_t>& frames, const std::string& why) {
    proto::DataHeader none;
    Reject(frames[0], none, why);
  }

  void Reject(zmq::message_t& identity, const proto::DataHeader& request, const std::string& why) {
    ++rejected_;
    if (rejected_ <= 20 || rejected_ % 1000 == 0) BC_LOG_WARNING("rejected request: ", why);
    proto::DataHeader reply;
    reply.set_op(proto::OP_ERROR);
    reply.set_key(request.key());
    reply.set_round(request.round());
    reply.set_request_id(request.request_id());
    reply.set_sender(my_rank_);
    reply.set_error(absl::StrCat("server ", my_rank_, ": ", why));
    std::vector<zmq::message_t> frames;
    frames.push_back(std::move(identity));
    frames.push_back(ProtoFrame(reply));
    SendOrLog(router_, frames);
  }

  void HandleControl() {
    absl::StatusOr<std::vector<zmq::message_t>> frames = RecvFrames(control_, std::chrono::milliseconds(0));
    if (!frames.ok() || frames->empty()) return;
    const std::string kind = FrameToString((*frames)[0]);
    const std::string body = frames->size() == 2 ? FrameToString((*frames)[1]) : "";
    if (kind == kStop) {
      stopping_ = true;
      return;
    }
    if (kind == kDeclare) {
      proto::DeclareReply declared;
      if (!declared.ParseFromString(body)) return;
      if (absl::Status s = validator_.catalog().AddTensor(declared); !s.ok()) {
        BC_LOG_ERROR("ignoring declaration: ", s.ToString());
        return;
      }
    } else if (kind == kStrategy) {
      proto::Strategy strategy;
      if (!strategy.ParseFromString(body)) return;
      if (absl::Status s = validator_.catalog().AddStrategy(strategy); !s.ok()) {
        BC_LOG_ERROR("ignoring strategy: ", s.ToString());
        return;
      }
      BC_LOG_INFO("strategy version ", strategy.version(), " from round ", strategy.first_round());
    }
    // Engines hear of it before any request that needed it.
    BroadcastToEngines(kind, body);
    if (kind == kDeclare || kind == kStrategy) {
      // Requests that arrived early go through now, in arrival order.
      std::deque<Parked> waiting;
      waiting.swap(parked_);
      for (Parked& p : waiting) Dispatch(std::move(p.frames), /*may_park=*/true);
    }
  }

  void BroadcastToEngines(const std::string& kind, const std::string& body) {
    for (auto& e : engines_) {
      std::vector<zmq::message_t> f;
      f.push_back(zmq::message_t(absl::StrCat("cmd:", kind)));
      if (!body.empty()) f.push_back(zmq::message_t(body.data(), body.size()));
      SendOrLog(e, f);
    }
  }

  void ExpireParked() {
    const int64_t now = MonotonicMs();
    while (!parked_.empty() && now - parked_.front().since_ms > kUndeclaredGraceMs) {
      Parked p = std::move(parked_.front());
      parked_.pop_front();
      Dispatch(std::move(p.frames), /*may_park=*/false);
    }
  }

 private:
  zmq::socket_t& router_;
  zmq::socket_t control_;
  zmq::socket_t replies_;
  std::vector<zmq::socket_t> engines_;
  RequestValidator validator_;
  BandwidthTurn bandwidth_turn_{kProbeTurnQuietMs};
  std::deque<Parked> parked_;
  int my_rank_;
  bool stopping_ = false;
  uint64_t requests_ = 0;
  uint64_t rejected_ = 0;
};

void SendControl(zmq::socket_t& to_io, const char* kind, const std::string& body) {
  std::vector<zmq::message_t> frames;
  frames.emplace_back(kind, std::strlen(kind));
  if (!body.empty() || std::strcmp(kind, kStop) != 0) frames.emplace_back(body.data(), body.size());
  SendOrLog(to_io, frames);
}

}  // namespace

absl::Status AggregationServer::Run() {
  const proto::ClusterConfig& config = options_.config;
  zmq::context_t ctx(2);  // two I/O threads: several TCP streams per server
  zmq::socket_t router(ctx, zmq::socket_type::router);
  ConfigureSocket(router);
  router.set(zmq::sockopt::router_mandatory, 0);
  absl::StatusOr<int> port = BindTcp(router, options_.bind_host, options_.port);
  if (!port.ok()) return port.status();

  std::string host = config.advertise_host();
  if (host.empty()) {
    absl::StatusOr<HostPort> sched = ParseHostPort(config.scheduler_address());
    if (!sched.ok()) return sched.status();
    absl::StatusOr<std::string> local = LocalAddressToward(sched->host);
    if (!local.ok()) return local.status();
    host = *local;
  }
  const std::string data_address = TcpEndpoint(host, *port);

  SchedulerClient scheduler(ctx, config);
  absl::StatusOr<proto::Topology> topology =
      scheduler.Register(proto::ROLE_SERVER, options_.requested_rank, data_address);
  if (!topology.ok()) return topology.status();
  const int rank = topology->your_rank();
  SetLogIdentity(absl::StrCat("server ", rank));
  const proto::ClusterConfig& effective = topology->config();
  const int engines = std::max(1, effective.server_engine_threads());
  BC_LOG_INFO("serving data on ", data_address, " for ", topology->num_workers(), " workers with ",
              engines, " engine threads");

  zmq::socket_t to_io(ctx, zmq::socket_type::pair);
  to_io.bind(kControlEndpoint);
  const std::vector<int> pushers(topology->pushers().begin(), topology->pushers().end());
  IoLoop io(ctx, router, rank, topology->num_workers(), topology->num_servers(), engines, pushers);
  std::vector<std::thread> engine_threads;
  for (int i = 0; i < engines; ++i) {
    engine_threads.emplace_back(EngineLoop, std::ref(ctx), i, rank, topology->num_workers(),
                                topology->num_servers(), pushers);
  }
  // Give the engines a moment to bind their inproc endpoints before connecting to them (inproc
  // connect-before-bind works in ZeroMQ >= 4.x, so this is only ordering hygiene).
  io.ConnectEngines();
  std::thread io_thread([&io] { io.Run(); });
  SendControl(to_io, kStrategy, topology->strategy().SerializeAsString());

  absl::Status result = absl::OkStatus();
  while (true) {
    if (stop_requested_.load()) {
      BC_LOG_INFO("stop requested by signal");
      proto::ControlMessage bye;
      bye.mutable_shutdown()->set_reason(absl::StrCat("server ", rank, " received a stop signal"));
      (void)scheduler.Send(bye);
      result = absl::CancelledError("stopped by signal");
      break;
    }
    scheduler.HeartbeatIfDue();
    absl::StatusOr<std::optional<proto::ControlMessage>> msg = scheduler.Receive(200);
    if (!msg.ok()) {
      result = msg.status();
      break;
    }
    if (!msg->has_value()) continue;
    const proto::ControlMessage& m = **msg;
    if (m.has_declare_reply() && m.declare_reply().ok()) {
      SendControl(to_io, kDeclare, m.declare_reply().SerializeAsString());
    } else if (m.has_strategy_commit()) {
      SendControl(to_io, kStrategy, m.strategy_commit().strategy().SerializeAsString());
    } else if (m.has_node_failed()) {
      const std::string reason =
          absl::StrCat(proto::Role_Name(m.node_failed().node().role()), " ",
                       m.node_failed().node().rank(), " failed: ", m.node_failed().reason());
      BC_LOG_ERROR(reason);
      SendControl(to_io, kFail, reason);
    } else if (m.has_shutdown()) {
      BC_LOG_INFO("shutdown: ", m.shutdown().reason());
      break;
    }
  }
  SendControl(to_io, kStop, "");
  io_thread.join();
  for (std::thread& t : engine_threads) t.join();
  return result;
}

}  // namespace bytecomp::server
