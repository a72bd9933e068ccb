// The admission decision of a keyed job's listening sockets, without sockets: ZeroMQ's ZAP
// (RFC 27, https://rfc.zeromq.org/spec/27/) asks, for each peer that completed a CURVE
// handshake, whether to let it in; we admit exactly the peers presenting the job's public key,
// which the CURVE handshake has proved they hold the secret key of. Refused peers are logged
// once each, at a bounded rate, and counted (ConnectionRefusalLog). SocketSecurity
// (socket_security.h) runs these on a thread of its own.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"

namespace bytecomp {

struct ZapDecision {
  bool admitted = false;
  std::string peer_address;        // the request's address frame (the peer's IP)
  std::string reason;              // why it was refused (empty when admitted)
  std::vector<std::string> reply;  // the frames to send back (after REP's envelope)
};

// One ZAP request (the frames after REP's envelope: version, request id, domain, address,
// identity, mechanism, credentials...) -> the reply. `job_public_key` is the 32-byte binary key.
ZapDecision DecideZapRequest(const std::vector<std::string>& request,
                             absl::string_view job_public_key);

// Refused connections (handshakes without the key): unlike RefusalLog (refusal_log.h), which
// rate-limits the lines of each peer's refused messages, a peer's connection refusals are
// alike, so each peer is logged once, at most `lines_per_minute` such lines a minute; everything is
// counted for the summary at exit. Memory is bounded: at most `max_peers` peers are remembered,
// later ones only counted. Not thread-safe (the gate's thread owns it).
class ConnectionRefusalLog {
 public:
  explicit ConnectionRefusalLog(int lines_per_minute = 10, size_t max_peers = 4096)
      : lines_per_minute_(lines_per_minute), max_peers_(max_peers) {}

  // A refusal of `peer` (an address, or a description where the address is unknown) for
  // `why`. Returns the line to log now, or nullopt (the peer was logged before, or the rate
  // is used up: then once a line saying that further refusals are only counted).
  std::optional<std::string> Refused(const std::string& peer, absl::string_view why,
                                     int64_t now_ms);

  int64_t total() const { return total_; }
  // "refused N connections from M peers without the cluster key (K not logged ...)", or empty.
  std::string Summary() const;

 private:
  const int lines_per_minute_;
  const size_t max_peers_;
  absl::flat_hash_set<std::string> peers_;
  int64_t total_ = 0;
  int64_t peers_not_remembered_ = 0;  // refusals beyond max_peers_
  int64_t lines_unlogged_ = 0;        // first refusals of a peer dropped by the rate limit
  int64_t window_start_ms_ = -1;
  int lines_in_window_ = 0;
  bool told_rate_limited_ = false;
};

}  // namespace bytecomp
