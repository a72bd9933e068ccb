// The connections a listening socket holds, counted per remote address and in all, against
// caps derived from the job: ZeroMQ accepts every connection and keeps, for each, a message
// being received up to the socket's largest (a peer that sends part of one and stops holds that
// memory as long as it stays connected), so the number of connections bounds that memory. A
// connection beyond a cap is cut as soon as it is accepted. Socket-free; the socket watch that
// sees the socket's accept and disconnect events (socket_security.cc) owns one per socket.
#pragma once

#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"

namespace bytecomp {

struct ConnectionCaps {
  int per_address = 0;  // connections from one remote address (host, not port)
  int total = 0;        // connections in all
};

class ConnectionBook {
 public:
  explicit ConnectionBook(ConnectionCaps caps) : caps_(caps) {}

  // A connection accepted on descriptor `fd` from `address` (host only; "" if unknown). Returns
  // nullopt when it is within the caps (it is counted), else why it is to be cut (it is not).
  std::optional<std::string> Accepted(int fd, const std::string& address);
  // The connection on `fd` ended (or was cut); nothing for a descriptor not counted.
  void Closed(int fd);

  int open() const { return static_cast<int>(open_.size()); }
  int open_from(const std::string& address) const;
  const ConnectionCaps& caps() const { return caps_; }
  // Later connections are held to `caps`; those open stay counted.
  void set_caps(const ConnectionCaps& caps) { caps_ = caps; }

 private:
  ConnectionCaps caps_;
  absl::flat_hash_map<int, std::string> open_;         // fd -> address
  absl::flat_hash_map<std::string, int> per_address_;  // address -> open connections
};

}  // namespace bytecomp
