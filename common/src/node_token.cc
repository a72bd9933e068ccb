#include "bytecomp/common/node_token.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "bytecomp/common/logging.h"

namespace bytecomp {
namespace {

void FillRandom(uint8_t* out, size_t n) {
  size_t filled = 0;
  while (filled < n) {
    const ssize_t got = getrandom(out + filled, n - filled, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      // Without a random source a node cannot prove who it is; nothing sensible goes on.
      BC_LOG_ERROR("getrandom failed: ", std::strerror(errno));
      std::abort();
    }
    filled += static_cast<size_t>(got);
  }
}

uint64_t LoadBigEndian(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

void StoreBigEndian(uint64_t v, char* p) {
  for (int i = 7; i >= 0; --i) {
    p[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
}

}  // namespace

NodeToken NewNodeToken() {
  NodeToken token;
  while (token.empty()) {
    uint8_t bytes[16];
    FillRandom(bytes, sizeof(bytes));
    token.high = LoadBigEndian(bytes);
    token.low = LoadBigEndian(bytes + 8);
  }
  return token;
}

std::string TokenBytes(const NodeToken& token) {
  std::string out(16, '\0');
  StoreBigEndian(token.high, out.data());
  StoreBigEndian(token.low, out.data() + 8);
  return out;
}

std::optional<NodeToken> TokenFromBytes(absl::string_view bytes) {
  if (bytes.size() != 16) return std::nullopt;
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  NodeToken token{LoadBigEndian(p), LoadBigEndian(p + 8)};
  if (token.empty()) return std::nullopt;
  return token;
}

}  // namespace bytecomp
