#include "bytecomp/common/peer_backlog.h"

#include <sys/socket.h>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/net.h"

namespace bytecomp {
namespace {

// A tracked frame's original and the count it is held against; freed with ZeroMQ's release.
struct Held {
  zmq::message_t original;
  std::shared_ptr<std::atomic<int64_t>> unread;
  int64_t bytes = 0;
};

void Release(void* /*data*/, void* hint) {
  Held* held = static_cast<Held*>(hint);
  held->unread->fetch_sub(held->bytes, std::memory_order_relaxed);
  delete held;
}

}  // namespace

PeerBacklog::Peer& PeerBacklog::Find(absl::string_view peer) {
  auto it = peers_.find(peer);
  if (it != peers_.end()) return it->second;
  if (peers_.size() >= kMaxIdlePeers) Prune();
  return peers_[std::string(peer)];
}

void PeerBacklog::Prune() {
  absl::erase_if(peers_, [](const auto& entry) {
    return entry.second.unread->load(std::memory_order_relaxed) <= 0;
  });
}

void PeerBacklog::Heard(absl::string_view peer, int fd) {
  Peer& p = Find(peer);
  if (p.fd == fd && (p.cut || !p.remote.empty())) return;  // the same connection
  p.fd = fd;
  p.cut = false;
  p.remote = RemoteAddressOf(fd);
}

bool PeerBacklog::Track(std::vector<zmq::message_t>& frames) {
  if (frames.empty()) return true;
  Peer& p = Find(absl::string_view(static_cast<const char*>(frames[0].data()), frames[0].size()));
  if (p.unread->load(std::memory_order_relaxed) >= bound_bytes_) return false;
  for (size_t i = 1; i < frames.size(); ++i) {
    if (frames[i].size() < kTrackedFrameBytes) continue;
    // Moved to the heap first: a small message keeps its bytes inside itself.
    auto* held = new Held{std::move(frames[i]), p.unread, 0};
    held->bytes = static_cast<int64_t>(held->original.size());
    p.unread->fetch_add(held->bytes, std::memory_order_relaxed);
    frames[i] = zmq::message_t(held->original.data(), held->original.size(), Release, held);
  }
  return true;
}

int64_t PeerBacklog::Unread(absl::string_view peer) const {
  auto it = peers_.find(peer);
  return it == peers_.end() ? 0 : it->second.unread->load(std::memory_order_relaxed);
}

std::string PeerBacklog::Cut(absl::string_view peer) {
  auto it = peers_.find(peer);
  if (it == peers_.end() || it->second.fd < 0) return "its connection is not known";
  Peer& p = it->second;
  if (p.cut) return "its connection was cut already";
  // The descriptor is the peer's only while it still leads to the address it came from.
  if (p.remote.empty() || RemoteAddressOf(p.fd) != p.remote) {
    return "its connection is gone already";
  }
  if (shutdown(p.fd, SHUT_RDWR) != 0) return "its connection could not be cut";
  ++cut_;
  p.cut = true;
  return absl::StrCat("connection from ", p.remote, " cut");
}

}  // namespace bytecomp
