// A node's token: 128 random bits a node draws at start and registers with the scheduler.
// Every later control message of the node carries it, and so does every push and pull of a
// worker; the scheduler and the servers take a message as a node's only with its token, so a
// connection can act only as the rank the scheduler gave the node behind it (a routing id or a
// sender field can be chosen by anyone who reaches the port).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "data.pb.h"

namespace bytecomp {

struct NodeToken {
  uint64_t high = 0;
  uint64_t low = 0;
  // No token: a node never draws it.
  bool empty() const { return (high | low) == 0; }
};

// 128 bits from the kernel's random source (getrandom), never all zero.
NodeToken NewNodeToken();

// The wire form in control messages: 16 bytes, high half first, big-endian.
std::string TokenBytes(const NodeToken& token);
// nullopt unless `bytes` is 16 bytes, not all zero.
std::optional<NodeToken> TokenFromBytes(absl::string_view bytes);

// Compares in constant time (no early exit on the first differing bit), so that the time a
// refusal takes tells a guesser nothing. An empty token matches nothing.
inline bool SameToken(const NodeToken& a, const NodeToken& b) {
  const uint64_t diff = (a.high ^ b.high) | (a.low ^ b.low);
  const uint64_t set = a.high | a.low;
  return (diff == 0) & (set != 0);
}

// The token of a data request, and setting it (DataHeader.token_high/low).
inline NodeToken HeaderToken(const proto::DataHeader& header) {
  return NodeToken{header.token_high(), header.token_low()};
}
inline void SetHeaderToken(const NodeToken& token, proto::DataHeader* header) {
  header->set_token_high(token.high);
  header->set_token_low(token.low);
}

}  // namespace bytecomp
