#include "bytecomp/common/connection_book.h"

#include <deque>

#include "absl/strings/str_cat.h"

namespace bytecomp {

std::optional<std::string> ConnectionBook::Accepted(int fd, const std::string& address) {
  if (ended_first_.erase(fd) > 0) return std::nullopt;  // it ended before its accept was heard
  // A descriptor reused before its old connection's end was heard: that one is gone.
  Forget(fd);
  cut_.erase(fd);
  std::optional<std::string> why;
  if (open() >= caps_.total) {
    why = absl::StrCat("the socket holds ", open(), " connections, its cap for this job");
  } else if (open_from(address) >= caps_.per_address) {
    why = absl::StrCat(open_from(address), " connections from ", address.empty() ? "?" : address,
                       " are open, the cap per address for this job");
  }
  if (why.has_value()) {
    cut_.insert(fd);
    return why;
  }
  open_[fd] = address;
  ++per_address_[address];
  return std::nullopt;
}

void ConnectionBook::Closed(int fd) {
  if (Forget(fd) || cut_.erase(fd) > 0) return;
  ended_first_.insert(fd);
}

bool ConnectionBook::Forget(int fd) {
  auto it = open_.find(fd);
  if (it == open_.end()) return false;
  auto from = per_address_.find(it->second);
  if (from != per_address_.end() && --from->second <= 0) per_address_.erase(from);
  open_.erase(it);
  return true;
}

int ConnectionBook::open_from(const std::string& address) const {
  auto it = per_address_.find(address);
  return it == per_address_.end() ? 0 : it->second;
}

std::vector<bool> ConnectionsAlreadyOver(const std::vector<ConnectionEvent>& events) {
  absl::flat_hash_map<int, std::deque<size_t>> ends;  // descriptor -> its ends' places
  for (size_t i = 0; i < events.size(); ++i) {
    if (!events[i].accepted) ends[events[i].fd].push_back(i);
  }
  std::vector<bool> over(events.size(), false);
  for (size_t i = 0; i < events.size(); ++i) {
    if (over[i] || !events[i].accepted) continue;
    auto it = ends.find(events[i].fd);
    if (it == ends.end()) continue;
    std::deque<size_t>& later = it->second;
    while (!later.empty() && later.front() < i) later.pop_front();
    if (later.empty()) continue;
    over[i] = over[later.front()] = true;
    later.pop_front();
  }
  return over;
}

}  // namespace bytecomp
