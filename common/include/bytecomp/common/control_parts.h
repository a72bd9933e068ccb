// Control messages too large for one frame of the scheduler's socket (kMaxControlFrameBytes):
// a node cuts the serialized message into ControlParts (proto/control.proto), the scheduler
// joins each node's parts back into the message. Only registered nodes send parts (each carries
// the node's token like any message), so a peer the scheduler does not know can make it hold
// no more than one frame per connection; a node holds at most one message in assembly, of at
// most the bound given (MaxControlReportBytes of the job's config).
// Socket-free; each side owned by one thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "control.pb.h"

namespace bytecomp {

// The most bytes of the whole message one part carries: a part with its envelope and the
// node's token stays far under kMaxControlFrameBytes.
inline constexpr int64_t kControlPartBytes = int64_t{256} << 10;

// `message` (with the node's token set, or not: the parts carry it) as it goes to the
// scheduler: itself when it serializes to at most kControlPartBytes, else parts of the
// serialized bytes, in order, numbered `message_id`. The parts have no token.
std::vector<proto::ControlMessage> SplitControlMessage(const proto::ControlMessage& message,
                                                       uint64_t message_id);

// One node's message being joined.
class ControlAssembly {
 public:
  // `max_bytes`: the largest whole message taken.
  explicit ControlAssembly(int64_t max_bytes) : max_bytes_(max_bytes) {}

  // The next part of the node's. nullopt while parts are still to come; the whole message
  // when `part` completed it. An error says what is wrong with the part or the message
  // (numbering, sizes, a message that does not parse or is itself a part or a Register); the
  // message being joined is then dropped. A part 0 starts a new message, dropping one left
  // unfinished (its node reconnected and lost the rest).
  absl::StatusOr<std::optional<proto::ControlMessage>> Add(const proto::ControlPart& part);

  // Bytes held for the message being joined.
  int64_t held_bytes() const { return static_cast<int64_t>(data_.size()); }

 private:
  absl::Status Check(const proto::ControlPart& part) const;

  int64_t max_bytes_;
  bool joining_ = false;
  uint64_t message_id_ = 0;
  uint32_t next_index_ = 0;
  uint32_t count_ = 0;
  int64_t total_bytes_ = 0;
  std::string data_;
};

}  // namespace bytecomp
