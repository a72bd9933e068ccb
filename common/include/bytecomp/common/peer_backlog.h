// What each peer of a ROUTER socket has been sent and not yet taken: the bytes ZeroMQ still
// holds for it (queued toward its connection, not yet written to the kernel). A peer that reads
// its replies keeps this near zero; one that stops reading would otherwise pin every reply it
// is sent (a round's sum each round) up to the socket's send queue of thousands of messages.
// Beyond a bound, its next reply is dropped and its connection cut (shutdown of the TCP socket
// its messages came on), which makes ZeroMQ release everything it held for it; a worker that
// was only slow reconnects and its operations end in their time limit, as with a lost reply.
//
// Socket-free apart from the cut, and owned by one thread (the server's I/O thread); ZeroMQ's
// own threads release the counted bytes (Track's messages carry a free function).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "zmq.hpp"

namespace bytecomp {

class PeerBacklog {
 public:
  // `bound_bytes`: what one peer may hold unread before it is cut.
  explicit PeerBacklog(int64_t bound_bytes) : bound_bytes_(bound_bytes) {}

  // The bound may grow with the job (a server learns its keys from declarations).
  void set_bound(int64_t bound_bytes) { bound_bytes_ = bound_bytes; }
  int64_t bound() const { return bound_bytes_; }

  // A message from `peer` (a routing id) came on connection `fd` (ZMQ_SRCFD of the frames it
  // sent; ZeroMQ does not set it on the routing id):
  // the connection Cut closes.
  void Heard(absl::string_view peer, int fd);

  // Counts the frames of a message to `peer` (frames[0] is its routing id) against it until
  // ZeroMQ releases them: frames of kTrackedFrameBytes or more are replaced by frames over the
  // same bytes whose release is counted. False, with nothing changed, when the peer holds
  // bound_bytes unread already: the message is to be dropped and the peer cut.
  bool Track(std::vector<zmq::message_t>& frames);

  // Bytes `peer` holds unread now.
  int64_t Unread(absl::string_view peer) const;

  // Closes the connection the peer's messages last came on (if it is still that peer's: the
  // descriptor may have been reused), which drops everything queued for it. Returns what
  // happened, for the log line: "connection cut" or why not.
  std::string Cut(absl::string_view peer);

  uint64_t cut() const { return cut_; }

  // Smaller frames are not counted (ZeroMQ copies them; their number is bounded by the send
  // queue).
  static constexpr size_t kTrackedFrameBytes = 1024;

 private:
  struct Peer {
    std::shared_ptr<std::atomic<int64_t>> unread = std::make_shared<std::atomic<int64_t>>(0);
    int fd = -1;
    std::string remote;  // the connection's remote address when heard ("" if unknown)
    bool cut = false;    // Cut closed `fd` (what else came on it is not heard again)
  };
  // Peers with nothing unread are forgotten beyond this many (routing ids change with every
  // connection, so the table would otherwise grow with reconnects).
  static constexpr size_t kMaxIdlePeers = 4096;

  Peer& Find(absl::string_view peer);
  void Prune();

  int64_t bound_bytes_;
  absl::flat_hash_map<std::string, Peer> peers_;
  uint64_t cut_ = 0;
};

}  // namespace bytecomp
