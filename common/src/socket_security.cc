#include "bytecomp/common/socket_security.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/common/net.h"
#include "bytecomp/common/refusal_log.h"
#include "bytecomp/common/transport.h"
#include "bytecomp/common/zap.h"

namespace bytecomp {
namespace {

// RFC 27: the endpoint a context's ZAP handler binds.
constexpr char kZapEndpoint[] = "inproc://zeromq.zap.01";
constexpr char kZapDomain[] = "bytecomp";
// How often the gate's thread looks at its stop flag and at newly watched sockets.
constexpr int kGatePollMs = 50;

bool IsLoopbackAddress(const sockaddr* address) {
  if (address->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(address);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (address->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(address);
    return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
  }
  return false;
}

// One event of a socket monitor (zmq_socket_monitor, version 1): event and value in a frame
// of 6 bytes, then the endpoint. nullopt when none is waiting.
struct MonitorEvent {
  uint16_t event = 0;
  uint32_t value = 0;
  std::string endpoint;
};
std::optional<MonitorEvent> ReadMonitorEvent(zmq::socket_t& monitor) {
  absl::StatusOr<std::vector<zmq::message_t>> frames =
      RecvFrames(monitor, std::chrono::milliseconds(0));
  if (!frames.ok() || frames->size() != 2 || (*frames)[0].size() != 6) return std::nullopt;
  MonitorEvent e;
  std::memcpy(&e.event, (*frames)[0].data(), sizeof(e.event));
  std::memcpy(&e.value, static_cast<const char*>((*frames)[0].data()) + 2, sizeof(e.value));
  e.endpoint = FrameToString((*frames)[1]);
  return e;
}

// A handshake that broke the protocol (ZAP never saw it), in words: "a peer that ...".
std::string HandshakeFailure(uint32_t value) {
  if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
    return "does not speak CURVE (no cluster key)";
  }
  if (value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC) {
    return "speaks CURVE without this job's key (another job's key?)";
  }
  return absl::StrCat("broke the ZMTP handshake (error 0x", absl::Hex(value), ")");
}

}  // namespace

bool IsLoopbackHost(const std::string& host) {
  const std::string h = absl::AsciiStrToLower(host);
  if (h == "localhost") return true;
  in_addr v4;
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  std::string bare = h;
  if (bare.size() > 2 && bare.front() == '[' && bare.back() == ']')
    bare = bare.substr(1, bare.size() - 2);
  if (inet_pton(AF_INET6, bare.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  if (h.empty() || h == "*") return false;
  addrinfo hints = {};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(h.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return false;
  bool all_loopback = true;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    all_loopback = all_loopback && IsLoopbackAddress(a->ai_addr);
  }
  freeaddrinfo(found);
  return all_loopback;
}

absl::StatusOr<int> ZmqIoThreads(int default_threads) {
  const char* v = std::getenv("BYTECOMP_IO_THREADS");
  if (v == nullptr || *v == '\0') return default_threads;
  int threads = 0;
  if (!absl::SimpleAtoi(v, &threads) || threads < 1 || threads > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("BYTECOMP_IO_THREADS='", v, "' is not a thread count in [1, 64]"));
  }
  return threads;
}

// ---------------------------------------------------------------------------------------

HandshakeWatch::HandshakeWatch(zmq::context_t& context, zmq::socket_t& socket, bool keyed)
    : socket_(socket), keyed_(keyed), events_(context, zmq::socket_type::pair) {
  const std::string endpoint =
      absl::StrCat("inproc://bytecomp-client-handshakes-", reinterpret_cast<uintptr_t>(this));
  events_.set(zmq::sockopt::linger, 0);
  started_ =
      zmq_socket_monitor(socket.handle(), endpoint.c_str(),
                         ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                             ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) == 0;
  if (started_) events_.connect(endpoint);
}

HandshakeWatch::~HandshakeWatch() {
  if (started_) zmq_socket_monitor(socket_.handle(), nullptr, 0);
}

std::optional<std::string> HandshakeWatch::Failure() {
  if (!started_) return std::nullopt;
  std::optional<MonitorEvent> e;
  while ((e = ReadMonitorEvent(events_)).has_value()) {
    if (e->event != ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) break;
    // The peer closed the connection during the handshake. A listener that finds the other
    // mechanism (CURVE against none) or cannot open a CURVE hello closes at once, often before
    // its own greeting names its mechanism (libzmq 4.3 queues it and drops it on the error),
    // so this side sees no more than that. Once could be a peer that went away; twice in a
    // row (libzmq reconnects within 100 ms) is the key.
    if (++cut_handshakes_ >= kCutHandshakesForMismatch) {
      return keyed_ ? "it closed the connection during the handshake, twice: it runs without a "
                      "cluster key or with another one (or is no ByteComp scheduler)"
                    : "it closed the connection during the handshake, twice: the job likely has "
                      "a cluster key and this node has none (give it the job's key file: "
                      "BYTECOMP_KEY_FILE or key_file)";
    }
  }
  if (!e.has_value()) return std::nullopt;
  if (e->event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
    return "it refused this node's cluster key (the job has another key file)";
  }
  if (e->value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
    return keyed_ ? "it does not speak CURVE: it runs without a cluster key, and this node has one"
                  : "it speaks CURVE: the job has a cluster key and this node has none (give it "
                    "the job's key file: BYTECOMP_KEY_FILE or key_file)";
  }
  return absl::StrCat("the handshake failed (ZMTP error 0x", absl::Hex(e->value),
                      keyed_ ? "; another cluster key?)" : ")");
}

// ---------------------------------------------------------------------------------------
// The gate: the ZAP handler (with a key), the watch on failed handshakes and the connection
// caps of listening sockets, on one thread.

class SocketSecurity::Gate {
  // A watched socket's monitor, and its connections where they are capped.
  struct Watched {
    void* socket;  // the watched socket's handle (UpdateCaps names it)
    zmq::socket_t monitor;
    std::optional<ConnectionBook> book;
  };

 public:
  Gate(zmq::context_t& context, std::string job_public_key)
      : context_(context),
        job_public_key_(std::move(job_public_key)),
        zap_(context, zmq::socket_type::rep) {}

  ~Gate() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    if (const std::string summary = log_.Summary(); !summary.empty()) {
      BC_LOG_WARNING("cluster key: ", summary);
    }
    if (const std::string summary = capped_.Summary(); !summary.empty()) {
      BC_LOG_WARNING("connections beyond the caps: ", summary);
    }
  }

  // The ZAP handler is bound only with a key (`job_public_key` not empty).
  absl::Status Start() {
    zap_.set(zmq::sockopt::linger, 0);
    if (!job_public_key_.empty()) {
      try {
        zap_.bind(kZapEndpoint);
      } catch (const zmq::error_t& e) {
        return absl::InternalError(absl::StrCat("cannot start the cluster key's ZAP handler (",
                                                kZapEndpoint, "): ", e.what()));
      }
    }
    thread_ = std::thread([this] { Run(); });
    return absl::OkStatus();
  }

  // Called on the socket's own thread, before it binds: its failed handshakes (`handshakes`),
  // and its connections against `caps`.
  absl::Status Watch(zmq::socket_t& socket, bool handshakes, std::optional<ConnectionCaps> caps) {
    const std::string endpoint =
        absl::StrCat("inproc://bytecomp-handshakes-", reinterpret_cast<uintptr_t>(this), "-",
                     watched_.fetch_add(1));
    // Only protocol failures: a peer that connects and leaves (a TCP health check) is no
    // refusal, and ZAP's refusals are counted where they are decided.
    const int events = (handshakes ? ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL : 0) |
                       (caps.has_value() ? ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED : 0);
    if (events == 0) return absl::OkStatus();
    if (zmq_socket_monitor(socket.handle(), endpoint.c_str(), events) != 0) {
      return absl::InternalError(
          absl::StrCat("cannot watch a socket's handshakes: ", zmq_strerror(zmq_errno())));
    }
    // Connected here, before the socket binds, so that no event is lost (a monitor drops what
    // it cannot hand over); the gate's thread takes the socket over.
    zmq::socket_t monitor(context_, zmq::socket_type::pair);
    monitor.set(zmq::sockopt::linger, 0);
    // No high-water mark on the events (6 bytes and an endpoint each): a dropped accept or end
    // would leave the connection caps counting wrong for good.
    monitor.set(zmq::sockopt::rcvhwm, 0);
    monitor.connect(endpoint);
    absl::MutexLock lock(&mu_);
    new_monitors_.push_back(Watched{socket.handle(), std::move(monitor), {}});
    if (caps.has_value()) new_monitors_.back().book.emplace(*caps);
    return absl::OkStatus();
  }

  // New caps for a socket watched with caps (its connections are counted on, against them).
  void UpdateCaps(zmq::socket_t& socket, const ConnectionCaps& caps) {
    absl::MutexLock lock(&mu_);
    new_caps_.emplace_back(socket.handle(), caps);
  }

  int64_t refused() const { return refused_.load(); }

 private:
  void Run() {
    std::vector<Watched> monitors;
    while (!stop_.load()) {
      {
        absl::MutexLock lock(&mu_);
        for (Watched& m : new_monitors_) monitors.push_back(std::move(m));
        new_monitors_.clear();
      }
      std::vector<zmq::pollitem_t> items{{zap_.handle(), 0, ZMQ_POLLIN, 0}};
      for (Watched& m : monitors) items.push_back({m.monitor.handle(), 0, ZMQ_POLLIN, 0});
      try {
        zmq::poll(items.data(), items.size(), std::chrono::milliseconds(kGatePollMs));
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) continue;
        // Fail closed: the handler stays bound and answers nobody, so no handshake completes
        // (an unbound handler would let libzmq admit every CURVE client).
        BC_LOG_ERROR("cluster key: the ZAP handler stopped answering (", e.what(),
                     "): no peer is admitted from now on");
        while (!stop_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(kGatePollMs));
        break;
      }
      {
        // After the wait: caps updated before a connection's accept are in force for it.
        absl::MutexLock lock(&mu_);
        for (const auto& [socket, caps] : new_caps_) {
          for (Watched& m : monitors) {
            if (m.socket == socket && m.book.has_value()) m.book->set_caps(caps);
          }
        }
        new_caps_.clear();
      }
      if (items[0].revents & ZMQ_POLLIN) Answer();
      for (size_t i = 1; i < items.size(); ++i) {
        if (items[i].revents & ZMQ_POLLIN) {
          ObserveWaiting(monitors[i - 1]);
        }
      }
    }
    zap_.close();
  }

  void Answer() {
    absl::StatusOr<std::vector<zmq::message_t>> frames =
        RecvFrames(zap_, std::chrono::milliseconds(0));
    if (!frames.ok() || frames->empty()) return;
    std::vector<std::string> request;
    for (const zmq::message_t& f : *frames) request.push_back(FrameToString(f));
    ZapDecision decision = DecideZapRequest(request, job_public_key_);
    std::vector<zmq::message_t> reply;
    for (const std::string& f : decision.reply) reply.emplace_back(f.data(), f.size());
    if (absl::Status s = SendFrames(zap_, reply); !s.ok()) {
      BC_LOG_ERROR("cluster key: cannot answer a ZAP request: ", s.message());
    }
    if (!decision.admitted) {
      Refused(decision.peer_address.empty() ? "a peer" : decision.peer_address, decision.reason);
    }
  }

  // Handles every event of a watched socket that is waiting, in order. A connection whose
  // accept and end are both among them is over: it is neither counted nor cut, for its
  // descriptor may already hold a newer connection, which a cut would hit (a burst of short
  // connections did that to a peer reconnecting on the same host).
  void ObserveWaiting(Watched& watched) {
    std::vector<MonitorEvent> events;
    while (std::optional<MonitorEvent> e = ReadMonitorEvent(watched.monitor)) {
      events.push_back(*std::move(e));
    }
    std::vector<bool> over(events.size(), false);
    if (watched.book.has_value()) {
      std::vector<ConnectionEvent> connections;
      for (const MonitorEvent& e : events) {
        const bool accepted = e.event == ZMQ_EVENT_ACCEPTED;
        // Other events (a failed handshake) are neither: a descriptor no connection has.
        connections.push_back(ConnectionEvent{
            accepted,
            accepted || e.event == ZMQ_EVENT_DISCONNECTED ? static_cast<int>(e.value) : -1});
      }
      over = ConnectionsAlreadyOver(connections);
    }
    for (size_t i = 0; i < events.size(); ++i) {
      if (!over[i]) Observe(watched, events[i]);
    }
  }

  // Handles one event of a watched socket.
  void Observe(Watched& watched, const MonitorEvent& e) {
    const int fd = static_cast<int>(e.value);
    if (e.event == ZMQ_EVENT_ACCEPTED && watched.book.has_value()) {
      const std::string host = RemoteAddressOf(fd, /*with_port=*/false);
      if (std::optional<std::string> why = watched.book->Accepted(fd, host); why.has_value()) {
        shutdown(fd, SHUT_RDWR);  // ZeroMQ sees the connection end, and drops it
        capped_.RefuseAndLog(
            host, absl::StrCat("cut a connection from ", host, " on ", e.endpoint, ": ", *why),
            MonotonicMs());
      }
      return;
    }
    if (e.event == ZMQ_EVENT_DISCONNECTED) {
      if (watched.book.has_value()) watched.book->Closed(fd);
      return;
    }
    // libzmq names the listening endpoint here, not the peer's address: such refusals are
    // logged once per endpoint and kind.
    Refused(absl::StrCat("a peer on ", e.endpoint, " that ", HandshakeFailure(e.value)),
            "no handshake");
  }

  void Refused(const std::string& peer, const std::string& why) {
    refused_.fetch_add(1);
    if (std::optional<std::string> line = log_.Refused(peer, why, MonotonicMs())) {
      BC_LOG_WARNING("cluster key: ", *line);
    }
  }

  zmq::context_t& context_;
  const std::string job_public_key_;  // 32 bytes, binary
  zmq::socket_t zap_;                 // the thread's once it runs
  ConnectionRefusalLog log_;          // the thread's; read after it ended
  RefusalLog capped_;                 // connections cut beyond the caps; the same
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> refused_{0};
  std::atomic<int> watched_{0};
  absl::Mutex mu_;
  std::vector<Watched> new_monitors_ ABSL_GUARDED_BY(mu_);  // connected, not yet polled
  std::vector<std::pair<void*, ConnectionCaps>> new_caps_ ABSL_GUARDED_BY(mu_);  // UpdateCaps
  std::thread thread_;
};

// ---------------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<SocketSecurity>> SocketSecurity::FromConfig(
    zmq::context_t& context, const proto::ClusterConfig& config) {
  if (config.key_file().empty()) {
    return std::make_unique<SocketSecurity>(context, std::nullopt, config.allow_insecure());
  }
  absl::StatusOr<LoadedClusterKey> loaded = ReadClusterKeyFile(config.key_file());
  if (!loaded.ok()) return loaded.status();
  if (!loaded->warning.empty()) BC_LOG_WARNING(loaded->warning);
  return std::make_unique<SocketSecurity>(context, loaded->key, config.allow_insecure(),
                                          config.key_file());
}

SocketSecurity::SocketSecurity(zmq::context_t& context, std::optional<ClusterKey> key,
                               bool allow_insecure, std::string key_source)
    : context_(context),
      key_(std::move(key)),
      allow_insecure_(allow_insecure),
      key_source_(std::move(key_source)) {}

SocketSecurity::~SocketSecurity() {
  absl::MutexLock lock(&gate_mu_);
  gate_.reset();
}

std::string SocketSecurity::Describe() const {
  if (!keyed()) {
    return allow_insecure_ ? "no cluster key (allow_insecure: plain TCP on any address)"
                           : "no cluster key (plain TCP, loopback only)";
  }
  return absl::StrCat("CURVE with the cluster key ", key_->public_key,
                      key_source_.empty() ? "" : absl::StrCat(" from ", key_source_));
}

void SocketSecurity::SecureConnecting(zmq::socket_t& socket) const {
  if (!keyed()) return;
  socket.set(zmq::sockopt::curve_serverkey, key_->public_key);
  socket.set(zmq::sockopt::curve_publickey, key_->public_key);
  socket.set(zmq::sockopt::curve_secretkey, key_->secret_key);
}

absl::Status SocketSecurity::StartGate() {
  if (gate_ != nullptr) return absl::OkStatus();
  std::string public_key;
  if (keyed()) {
    uint8_t binary[32];
    zmq_z85_decode(binary, key_->public_key.c_str());
    public_key.assign(reinterpret_cast<char*>(binary), 32);
  }
  auto gate = std::make_unique<Gate>(context_, std::move(public_key));
  if (absl::Status s = gate->Start(); !s.ok()) return s;
  gate_ = std::move(gate);
  return absl::OkStatus();
}

absl::Status SocketSecurity::SecureListening(zmq::socket_t& socket,
                                             std::optional<ConnectionCaps> caps) {
  if (!keyed() && !caps.has_value()) return absl::OkStatus();
  absl::MutexLock lock(&gate_mu_);
  if (absl::Status s = StartGate(); !s.ok()) return s;
  if (keyed()) {
    socket.set(zmq::sockopt::curve_server, true);
    socket.set(zmq::sockopt::curve_secretkey, key_->secret_key);
    socket.set(zmq::sockopt::zap_domain, kZapDomain);
  }
  return gate_->Watch(socket, /*handshakes=*/keyed(), caps);
}

void SocketSecurity::UpdateConnectionCaps(zmq::socket_t& socket, const ConnectionCaps& caps) {
  absl::MutexLock lock(&gate_mu_);
  if (gate_ != nullptr) gate_->UpdateCaps(socket, caps);
}

absl::Status SocketSecurity::CapConnections(zmq::socket_t& socket, const ConnectionCaps& caps) {
  absl::MutexLock lock(&gate_mu_);
  if (absl::Status s = StartGate(); !s.ok()) return s;
  return gate_->Watch(socket, /*handshakes=*/false, caps);
}

std::unique_ptr<HandshakeWatch> SocketSecurity::WatchHandshakes(zmq::socket_t& socket) const {
  return std::make_unique<HandshakeWatch>(context_, socket, keyed());
}

int64_t SocketSecurity::refused() const {
  absl::MutexLock lock(&gate_mu_);
  return gate_ == nullptr ? 0 : gate_->refused();
}

absl::Status SocketSecurity::CheckPlainHost(const std::string& host, absl::string_view what) const {
  if (keyed() || IsLoopbackHost(host)) return absl::OkStatus();
  if (allow_insecure_) {
    if (warned_insecure_.exchange(true)) return absl::OkStatus();
    BC_LOG_WARNING("allow_insecure: ", what, " ", host,
                   " is not loopback and there is no cluster key: the traffic is neither "
                   "encrypted nor authenticated, and anyone who reaches the port can join, push, "
                   "pull and stop the job");
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      what, " ", host,
      " is not loopback, and this process has no cluster key: without one "
      "ByteComp stays on loopback, since anyone who reaches its ports could join, push, pull and "
      "stop the job. Give every node the job's key file (key_file in the cluster config, "
      "BYTECOMP_KEY_FILE or --key_file; bytecomp-keygen writes one), or set allow_insecure: true"));
}

absl::StatusOr<std::string> SocketSecurity::ListenHost(const std::string& requested,
                                                       absl::string_view who) const {
  std::string host = requested;
  if (host.empty()) host = keyed() || allow_insecure_ ? "0.0.0.0" : "127.0.0.1";
  if (absl::Status s = CheckPlainHost(host, absl::StrCat(who, ": the listen address")); !s.ok()) {
    return s;
  }
  return host;
}

}  // namespace bytecomp
