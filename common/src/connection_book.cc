#include "bytecomp/common/connection_book.h"

#include "absl/strings/str_cat.h"

namespace bytecomp {

std::optional<std::string> ConnectionBook::Accepted(int fd, const std::string& address) {
  Closed(fd);  // a descriptor reused before its old connection's end was heard
  if (open() >= caps_.total) {
    return absl::StrCat("the socket holds ", open(), " connections, its cap for this job");
  }
  if (open_from(address) >= caps_.per_address) {
    return absl::StrCat(open_from(address), " connections from ", address.empty() ? "?" : address,
                        " are open, the cap per address for this job");
  }
  open_[fd] = address;
  ++per_address_[address];
  return std::nullopt;
}

void ConnectionBook::Closed(int fd) {
  auto it = open_.find(fd);
  if (it == open_.end()) return;
  auto from = per_address_.find(it->second);
  if (from != per_address_.end() && --from->second <= 0) per_address_.erase(from);
  open_.erase(it);
}

int ConnectionBook::open_from(const std::string& address) const {
  auto it = per_address_.find(address);
  return it == per_address_.end() ? 0 : it->second;
}

}  // namespace bytecomp
