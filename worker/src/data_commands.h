// What the other threads hand to the data I/O thread (worker/src/data_loop.h) through its
// WakeQueue, and the data loop to its PartitionSender (partition_sender.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "bytecomp/cpu_offload.h"
#include "operation.h"

namespace bytecomp::worker {

// An uncompressed operation: every partition is pushed straight from host_data() (zero-copy).
struct StartOperation {
  std::shared_ptr<Operation> op;
};

// One encoded partition ready to push, or an abort (the worker could not encode it; the round
// must still complete on the server for the other workers).
struct EncodedPush {
  std::shared_ptr<Operation> op;
  int64_t partition = 0;
  uint32_t stage = 0;  // two-round codecs: 1 or 2
  std::vector<uint8_t> payload;
  // Encoded on the device: the payload copied to pinned host memory instead.
  cpu_offload::PinnedBuffer pinned;
  size_t pinned_bytes = 0;
  std::string abort_error;  // non-empty: push this error instead of a payload

  static std::shared_ptr<EncodedPush> For(std::shared_ptr<Operation> op, int64_t partition,
                                          uint32_t stage = 0) {
    auto push = std::make_shared<EncodedPush>();
    push->op = std::move(op);
    push->partition = partition;
    push->stage = stage;
    return push;
  }
  const uint8_t* data() const { return pinned ? pinned.data() : payload.data(); }
  size_t size() const { return pinned ? pinned_bytes : payload.size(); }
};

// The engine failed: fail everything in flight and close the sockets.
struct FailEverything {
  absl::Status reason;
};
struct StopData {};
// Server failover: server `server`'s keys are held by a replacement at `address`.
struct ReconnectServer {
  int server = 0;
  std::string address;
  uint64_t epoch = 0;    // DataHeader.server_epoch from now on
  std::string data_key;  // the replacement's (ServerReplaced.data_key; empty: nothing sealed)
};

// Server failover without a replacement (KeysMoved): partitions now on other servers.
struct MoveKeys {
  int from_server = 0;
  std::vector<std::pair<uint64_t, int>> keys;  // (key, the server holding it now)
};

using DataCommand = std::variant<StartOperation, std::shared_ptr<EncodedPush>, FailEverything,
                                 StopData, ReconnectServer, MoveKeys>;

}  // namespace bytecomp::worker
