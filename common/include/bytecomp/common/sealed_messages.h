// The data path's messages sealed (frame_seal.h): which jobs seal, the node's data key as it
// travels in the control messages, and whole ZeroMQ multipart messages sealed and opened on
// the thread that sends or receives them.
//
// A message of n frames is sealed frame by frame under n consecutive counters of the sender's
// key, each frame's associated data (first counter, index, n): a frame moved into another
// message, dropped, reordered or repeated is refused, as is a message whose frames name
// different keys. Frames before `skip` (a ROUTER's routing id) are neither sealed nor opened.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bytecomp/common/frame_seal.h"
#include "cluster_config.pb.h"
#include "zmq.hpp"

namespace bytecomp {

// With a cluster key and data_protection encrypt or authenticate (the default): the data
// sockets are plain TCP and every data message is sealed.
bool SealsDataFrames(const proto::ClusterConfig& config);
// The protection of a job that seals (encrypt for the default value).
DataProtection DataProtectionOf(const proto::ClusterConfig& config);
// "encrypt", "authenticate", "curve".
std::string DataProtectionSetting(const proto::ClusterConfig& config);

// The key bytes a Register, ServerInfo, ServerReplaced or Topology carries, as key `id`; an
// error naming `whose` key when they are not kDataKeyBytes long or all zero.
absl::StatusOr<DataKey> DataKeyFromBytes(absl::string_view bytes, uint32_t id,
                                         absl::string_view whose);
std::string DataKeyBytes(const DataKey& key);

// Seals outgoing messages under one node's SealKey; one per sending thread.
class MessageSealer {
 public:
  static absl::StatusOr<std::unique_ptr<MessageSealer>> Create(SealKey* key);
  // Replaces frames[skip..] by their sealed copies (the cipher makes the copy the send needs;
  // zero-copy payloads are released).
  absl::Status Seal(std::vector<zmq::message_t>& frames, size_t skip = 0);

 private:
  explicit MessageSealer(SealKey* key, std::unique_ptr<FrameSealer> sealer)
      : key_(*key), sealer_(std::move(sealer)) {}
  SealKey& key_;
  std::unique_ptr<FrameSealer> sealer_;
};

// Opens incoming messages sealed under the peers' keys; one per receiving thread.
class MessageOpener {
 public:
  explicit MessageOpener(DataProtection protection) : opener_(protection) {}
  // The peers' keys: AddKey, DropKey (frame_seal.h).
  FrameOpener& keys() { return opener_; }
  // Replaces frames[skip..] by their payloads (a large frame opens in place: its payload message
  // points into the received one) and returns the id of the key that sealed them.
  // On an error the message is not to be used, and the error says what was wrong with it.
  absl::StatusOr<uint32_t> Open(std::vector<zmq::message_t>& frames, size_t skip = 0);
  // Opens the frame at `skip` alone (a request's header) and checks that every later frame
  // names the same key and the counter that follows (frame i: the first's + i); those stay
  // sealed, to be opened with OpenFrame, by this opener or another thread's holding the same
  // keys (the tag then proves the frame belongs to this message). The same errors as Open.
  absl::StatusOr<uint32_t> OpenFirst(std::vector<zmq::message_t>& frames, size_t skip = 0);
  // Opens frame `index` of a `count`-frame message whose first frame OpenFirst opened (in
  // place where large, as Open does).
  absl::Status OpenFrame(zmq::message_t& frame, uint32_t index, uint32_t count);

 private:
  struct Head {
    uint64_t first = 0;  // the first frame's counter
    uint32_t key_id = 0;
    uint32_t count = 0;
  };
  // The first frame's counter and key; every frame long enough to be sealed, and each later
  // one naming the same key and the counter that follows.
  absl::StatusOr<Head> CheckFrames(const std::vector<zmq::message_t>& frames, size_t skip) const;
  absl::Status OpenOne(zmq::message_t& frame, uint64_t first, uint32_t index, uint32_t count);

  FrameOpener opener_;
};

// A node's two ends of the sealed data path, used on one thread: the sealer of what it sends
// (its own key) and the opener of what it receives (its peers' keys). Both null where the job
// does not seal: then Seal and Open leave every message as it is.
struct DataSeals {
  std::unique_ptr<MessageSealer> sealer;
  std::unique_ptr<MessageOpener> opener;

  bool on() const { return sealer != nullptr; }
  absl::Status Seal(std::vector<zmq::message_t>& frames, size_t skip = 0) {
    return sealer == nullptr ? absl::OkStatus() : sealer->Seal(frames, skip);
  }
  // OK without an opener; else MessageOpener::Open's status.
  absl::Status Open(std::vector<zmq::message_t>& frames, size_t skip = 0) {
    return opener == nullptr ? absl::OkStatus() : opener->Open(frames, skip).status();
  }
  // OK without an opener; else MessageOpener::OpenFirst's status.
  absl::Status OpenFirst(std::vector<zmq::message_t>& frames, size_t skip = 0) {
    return opener == nullptr ? absl::OkStatus() : opener->OpenFirst(frames, skip).status();
  }
};

// One thread's DataSeals: a sealer under `seal_key` (shared by the node's threads: one counter)
// and an opener holding `peers` (each key's id is its sender's).
absl::StatusOr<DataSeals> NewDataSeals(SealKey* seal_key, const std::vector<DataKey>& peers);

}  // namespace bytecomp
