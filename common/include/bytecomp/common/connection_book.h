// The connections a listening socket holds, counted per remote address and in all, against
// caps derived from the job: ZeroMQ accepts every connection and keeps, for each, a message
// being received up to the socket's largest (a peer that sends part of one and stops holds that
// memory as long as it stays connected), so the number of connections bounds that memory. A
// connection beyond a cap is cut as soon as it is accepted. Socket-free; the socket watch that
// sees the socket's accept and disconnect events (socket_security.cc) owns one per socket.
//
// The two events come from different ZeroMQ threads: the listener reports an accept after it
// handed the connection to an I/O thread, which may already have seen it end and reported
// that first. An end heard for a descriptor not counted is therefore remembered, and the
// accept that follows counts nothing: otherwise the connection would stay counted for good
// (a burst of short connections left an address at its cap, and every later connection from
// it, a worker reconnecting included, was cut).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

namespace bytecomp {

struct ConnectionCaps {
  int per_address = 0;  // connections from one remote address (host, not port)
  int total = 0;        // connections in all
};

class ConnectionBook {
 public:
  explicit ConnectionBook(ConnectionCaps caps) : caps_(caps) {}

  // A connection accepted on descriptor `fd` from `address` (host only; "" if unknown). Returns
  // nullopt when it is within the caps (it is counted) or already ended (its end was heard
  // first: nothing to count or cut), else why it is to be cut (it is not counted).
  std::optional<std::string> Accepted(int fd, const std::string& address);
  // The connection on `fd` ended (or was cut). For a descriptor neither counted nor cut, the
  // end is remembered for its accept, which comes after.
  void Closed(int fd);

  int open() const { return static_cast<int>(open_.size()); }
  int open_from(const std::string& address) const;
  const ConnectionCaps& caps() const { return caps_; }
  // Later connections are held to `caps`; those open stay counted.
  void set_caps(const ConnectionCaps& caps) { caps_ = caps; }

 private:
  // Uncounts the connection on `fd`; false when none was counted there.
  bool Forget(int fd);

  ConnectionCaps caps_;
  absl::flat_hash_map<int, std::string> open_;         // fd -> address
  absl::flat_hash_map<std::string, int> per_address_;  // address -> open connections
  absl::flat_hash_set<int> cut_;                       // cut, their end not heard yet
  absl::flat_hash_set<int> ended_first_;               // ended, their accept not heard yet
};

// A connection's accept or end, as a socket's monitor reports it.
struct ConnectionEvent {
  bool accepted = false;  // else its end
  int fd = -1;
};

// Of the events waiting at one time, in order: those of connections already over, to be
// skipped (an accept and a later end of the same descriptor). Such a connection is neither
// counted nor cut: its descriptor may hold a newer connection by now, which a cut would hit.
std::vector<bool> ConnectionsAlreadyOver(const std::vector<ConnectionEvent>& events);

}  // namespace bytecomp
