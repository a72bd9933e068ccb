// The cluster key as the sockets of one ZeroMQ context use it, and where a process without a
// key may listen and connect.
//
// With a key (ClusterConfig.key_file, cluster_key.h) every socket speaks ZeroMQ CURVE (RFC 26):
// connecting sockets are CURVE clients with the job's keypair that trust only a server holding
// the job's secret key; listening sockets are CURVE servers with the job's secret key, and a ZAP
// handler (RFC 27) on a thread of this object admits only clients presenting the job's public
// key (zap.h). So only holders of the secret key get a message through, either way. The same
// thread watches each listening socket's failed handshakes (peers without CURVE, or with another
// server key), which never reach ZAP. Refusals are logged once per peer, rate limited, and
// summarised when this object goes.
//
// Without a key, sockets are plain TCP, and a process listens and connects on loopback only,
// unless ClusterConfig.allow_insecure (then with a warning).
//
// Lifetime: create it after the context and before the sockets; destroy it after every
// listening socket it secured and before the context. libzmq admits every CURVE client when no
// ZAP handler is bound in the context, so the handler must outlive the listening sockets.
// Thread-safe: SecureConnecting from any thread; SecureListening from the socket's thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "bytecomp/common/cluster_key.h"
#include "bytecomp/common/connection_book.h"
#include "cluster_config.pb.h"
#include "zmq.hpp"

namespace bytecomp {

// True for 127.0.0.0/8, ::1, "localhost", and a name all of whose addresses are loopback.
bool IsLoopbackHost(const std::string& host);

// ZeroMQ I/O threads for a server's or worker's context: BYTECOMP_IO_THREADS (1..64), else
// `default_threads`. With a cluster key every byte is encrypted and decrypted on these threads
// (one CURVE stream runs on one of them), so a fast link wants several, with at least as many
// connections per server.
absl::StatusOr<int> ZmqIoThreads(int default_threads);

// A connecting socket's failed handshakes, for a clear error where a key does not match: libzmq
// gives up such a connection without a word to the socket's owner. Made by
// SocketSecurity::WatchHandshakes before connect(); owned by the socket's thread; destroy it
// before the socket.
class HandshakeWatch {
 public:
  HandshakeWatch(zmq::context_t& context, zmq::socket_t& socket, bool keyed);
  ~HandshakeWatch();
  HandshakeWatch(const HandshakeWatch&) = delete;
  HandshakeWatch& operator=(const HandshakeWatch&) = delete;
  // Why a handshake failed so far ("the peer speaks CURVE: ..."), or nullopt. Does not wait.
  std::optional<std::string> Failure();

 private:
  zmq::socket_t& socket_;
  const bool keyed_;
  static constexpr int kCutHandshakesForMismatch = 2;
  zmq::socket_t events_;
  bool started_ = false;
  int cut_handshakes_ = 0;  // handshakes the peer closed without a word
};

class SocketSecurity {
 public:
  // From config.key_file (read and checked: ReadClusterKeyFile) and config.allow_insecure.
  static absl::StatusOr<std::unique_ptr<SocketSecurity>> FromConfig(
      zmq::context_t& context, const proto::ClusterConfig& config);
  // `key`: nullopt for plain sockets. `key_source` names it in logs (a file path).
  SocketSecurity(zmq::context_t& context, std::optional<ClusterKey> key, bool allow_insecure,
                 std::string key_source = "");
  ~SocketSecurity();
  SocketSecurity(const SocketSecurity&) = delete;
  SocketSecurity& operator=(const SocketSecurity&) = delete;

  bool keyed() const { return key_.has_value(); }
  bool allow_insecure() const { return allow_insecure_; }
  // For start-up logs: "CURVE with the cluster key <public> from <file>" or "no cluster key ...".
  std::string Describe() const;

  // Before connect(): a CURVE client with the job's keypair (nothing without a key).
  void SecureConnecting(zmq::socket_t& socket) const;
  // Before bind(): a CURVE server with the job's secret key; the first call starts the ZAP
  // handler. Its failed handshakes are watched. With `caps`, its connections are held to them
  // (ConnectionBook: one beyond is cut when accepted), with or without a key.
  absl::Status SecureListening(zmq::socket_t& socket,
                               std::optional<ConnectionCaps> caps = std::nullopt);
  // Before bind(): only the connection caps, for a socket without CURVE (sealed data frames
  // authenticate each message instead).
  absl::Status CapConnections(zmq::socket_t& socket, const ConnectionCaps& caps);
  // The caps of a socket capped above, once the job is known (a server binds before it learns
  // the job's worker count from the scheduler); from its next accepted connection on.
  void UpdateConnectionCaps(zmq::socket_t& socket, const ConnectionCaps& caps);
  // Before connect(): watches the socket's handshakes (with or without a key), so that a peer
  // with another key, or none, is reported instead of waited for.
  std::unique_ptr<HandshakeWatch> WatchHandshakes(zmq::socket_t& socket) const;

  // The interface to listen on. `requested` empty: every interface (0.0.0.0) with a key or
  // allow_insecure, 127.0.0.1 without. Without either, a host that is not loopback is refused
  // with an error naming `who` and the remedies; with allow_insecure it is a logged warning.
  absl::StatusOr<std::string> ListenHost(const std::string& requested, absl::string_view who) const;
  // A host this process may reach `what` at (e.g. "the scheduler address"): without a key only
  // loopback, unless allow_insecure (a warning, logged once per process part).
  absl::Status CheckPlainHost(const std::string& host, absl::string_view what) const;

  // Connections refused so far: by the ZAP handler, and failed handshakes on listening sockets
  // (not those cut beyond the connection caps).
  int64_t refused() const;

 private:
  class Gate;  // the ZAP handler's thread (socket_security.cc)
  absl::Status StartGate() ABSL_EXCLUSIVE_LOCKS_REQUIRED(gate_mu_);

  zmq::context_t& context_;
  const std::optional<ClusterKey> key_;
  const bool allow_insecure_;
  const std::string key_source_;
  mutable std::atomic<bool> warned_insecure_{false};  // allow_insecure's warning, once
  mutable absl::Mutex gate_mu_;
  std::unique_ptr<Gate> gate_ ABSL_GUARDED_BY(gate_mu_);
};

}  // namespace bytecomp
