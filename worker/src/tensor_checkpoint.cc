#include "tensor_checkpoint.h"

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace bytecomp::worker {

std::string EncodeTensorState(const std::vector<std::string>& partition_states) {
  std::string out;
  const uint32_t parts = static_cast<uint32_t>(partition_states.size());
  out.append(reinterpret_cast<const char*>(&parts), 4);
  for (const std::string& state : partition_states) {
    const uint64_t len = state.size();
    out.append(reinterpret_cast<const char*>(&len), 8);
    out += state;
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> DecodeTensorState(absl::string_view tensor,
                                                           absl::string_view state,
                                                           size_t partitions) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("error-feedback state of '", tensor, "': ", why));
  };
  uint32_t count = 0;
  if (state.size() < 4) return bad("truncated");
  std::memcpy(&count, state.data(), 4);
  size_t pos = 4;
  if (count != partitions)
    return bad(absl::StrCat(count, " partitions, the tensor has ", partitions));
  std::vector<std::string> states(partitions);
  for (size_t p = 0; p < partitions; ++p) {
    uint64_t len = 0;
    if (state.size() - pos < 8) return bad("truncated");
    std::memcpy(&len, state.data() + pos, 8);
    pos += 8;
    if (state.size() - pos < len) return bad("truncated");
    states[p] = std::string(state.substr(pos, len));
    pos += len;
  }
  if (pos != state.size()) return bad("trailing bytes");
  return states;
}

}  // namespace bytecomp::worker
