#include "bytecomp/common/sealed_messages.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace bytecomp {
namespace {

// A frame's associated data: the message's first counter, the frame's index, the frame count
// (little-endian 8 + 4 + 4 bytes).
std::string MessageBinding(uint64_t first, uint32_t index, uint32_t count) {
  std::string ad(16, '\0');
  for (int i = 0; i < 8; ++i) ad[i] = static_cast<char>(first >> (8 * i));
  for (int i = 0; i < 4; ++i) ad[8 + i] = static_cast<char>(index >> (8 * i));
  for (int i = 0; i < 4; ++i) ad[12 + i] = static_cast<char>(count >> (8 * i));
  return ad;
}

// Frames at least this large are opened in place rather than into a new message.
constexpr size_t kOpenInPlaceBytes = 4096;

absl::Span<const uint8_t> Bytes(const zmq::message_t& frame) {
  return {static_cast<const uint8_t*>(frame.data()), frame.size()};
}

}  // namespace

bool SealsDataFrames(const proto::ClusterConfig& config) {
  return !config.key_file().empty() && config.data_protection() != proto::ClusterConfig::curve;
}

DataProtection DataProtectionOf(const proto::ClusterConfig& config) {
  return config.data_protection() == proto::ClusterConfig::authenticate
             ? DataProtection::kAuthenticate
             : DataProtection::kEncrypt;
}

std::string DataProtectionSetting(const proto::ClusterConfig& config) {
  if (config.data_protection() == proto::ClusterConfig::data_protection_default) return "encrypt";
  return proto::ClusterConfig::DataProtection_Name(config.data_protection());
}

absl::StatusOr<DataKey> DataKeyFromBytes(absl::string_view bytes, uint32_t id,
                                         absl::string_view whose) {
  if (bytes.size() != kDataKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(whose, "'s data key is ", bytes.size(), " bytes, not ", kDataKeyBytes));
  }
  if (std::all_of(bytes.begin(), bytes.end(), [](char c) { return c == '\0'; })) {
    return absl::InvalidArgumentError(absl::StrCat(whose, "'s data key is all zero"));
  }
  DataKey key;
  key.id = id;
  std::memcpy(key.bytes.data(), bytes.data(), kDataKeyBytes);
  return key;
}

std::string DataKeyBytes(const DataKey& key) {
  return std::string(reinterpret_cast<const char*>(key.bytes.data()), key.bytes.size());
}

absl::StatusOr<std::unique_ptr<MessageSealer>> MessageSealer::Create(SealKey* key) {
  absl::StatusOr<std::unique_ptr<FrameSealer>> sealer = FrameSealer::Create(key);
  if (!sealer.ok()) return sealer.status();
  return std::unique_ptr<MessageSealer>(new MessageSealer(key, *std::move(sealer)));
}

absl::Status MessageSealer::Seal(std::vector<zmq::message_t>& frames, size_t skip) {
  if (skip >= frames.size()) return absl::OkStatus();
  const uint32_t count = static_cast<uint32_t>(frames.size() - skip);
  const uint64_t first = key_.TakeCounters(count);
  for (uint32_t i = 0; i < count; ++i) {
    zmq::message_t& frame = frames[skip + i];
    zmq::message_t sealed(frame.size() + kSealOverheadBytes);
    if (absl::Status s = sealer_->SealAt(
            first + i, Bytes(frame), MessageBinding(first, i, count),
            absl::Span<uint8_t>(static_cast<uint8_t*>(sealed.data()), sealed.size()));
        !s.ok()) {
      return s;
    }
    frame = std::move(sealed);
  }
  return absl::OkStatus();
}

absl::StatusOr<MessageOpener::Head> MessageOpener::CheckFrames(
    const std::vector<zmq::message_t>& frames, size_t skip) const {
  if (skip >= frames.size()) return absl::InvalidArgumentError("an empty message");
  Head head;
  head.count = static_cast<uint32_t>(frames.size() - skip);
  const std::optional<uint64_t> first = SealedCounter(Bytes(frames[skip]));
  const std::optional<uint32_t> key_id = SealedKeyId(Bytes(frames[skip]));
  if (!first.has_value() || !key_id.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("not a sealed message: its first frame is ",
                                                   frames[skip].size(),
                                                   " bytes, shorter than "
                                                   "a sealed frame's prefix (",
                                                   kSealPrefixBytes, ")"));
  }
  if (Bytes(frames[skip])[0] != kSealMagic) {
    return absl::InvalidArgumentError(
        "not a sealed message: its first frame does not begin as a sealed frame does");
  }
  head.first = *first;
  head.key_id = *key_id;
  for (uint32_t i = 0; i < head.count; ++i) {
    const zmq::message_t& frame = frames[skip + i];
    if (frame.size() < kSealOverheadBytes) {
      return absl::InvalidArgumentError(absl::StrCat("frame ", i, " of the message is ",
                                                     frame.size(),
                                                     " bytes, shorter than a "
                                                     "sealed frame (",
                                                     kSealOverheadBytes, ")"));
    }
    if (i == 0) continue;
    if (SealedKeyId(Bytes(frame)) != head.key_id) {
      return absl::InvalidArgumentError(
          absl::StrCat("frame ", i, " of a sealed message names another key than its first"));
    }
    // What the tag then proves: each frame was sealed as frame i of this message.
    if (SealedCounter(Bytes(frame)) != head.first + i) {
      return absl::InvalidArgumentError(absl::StrCat(
          "frame ", i, " of a sealed message does not follow its first frame's counter"));
    }
  }
  return head;
}

absl::Status MessageOpener::OpenOne(zmq::message_t& frame, uint64_t first, uint32_t index,
                                    uint32_t count) {
  const std::string binding = MessageBinding(first, index, count);
  if (frame.size() < kOpenInPlaceBytes) {
    zmq::message_t payload(frame.size() - kSealOverheadBytes);
    if (absl::Status s = opener_.Open(
            Bytes(frame), binding,
            absl::Span<uint8_t>(static_cast<uint8_t*>(payload.data()), payload.size()));
        !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("frame ", index, " of ", count, ": ", s.message()));
    }
    frame = std::move(payload);
    return absl::OkStatus();
  }
  // A large frame opens where it lies: the payload becomes a message that points into the
  // received one, which it keeps until ZeroMQ or the caller drops it.
  auto* received = new zmq::message_t(std::move(frame));
  absl::StatusOr<absl::Span<uint8_t>> payload = opener_.OpenInPlace(
      absl::Span<uint8_t>(static_cast<uint8_t*>(received->data()), received->size()), binding);
  if (!payload.ok()) {
    delete received;
    return absl::Status(payload.status().code(), absl::StrCat("frame ", index, " of ", count, ": ",
                                                              payload.status().message()));
  }
  frame = zmq::message_t(
      payload->data(), payload->size(),
      [](void*, void* hint) { delete static_cast<zmq::message_t*>(hint); }, received);
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> MessageOpener::Open(std::vector<zmq::message_t>& frames, size_t skip) {
  absl::StatusOr<Head> head = CheckFrames(frames, skip);
  if (!head.ok()) return head.status();
  for (uint32_t i = 0; i < head->count; ++i) {
    if (absl::Status s = OpenOne(frames[skip + i], head->first, i, head->count); !s.ok()) return s;
  }
  return head->key_id;
}

absl::StatusOr<uint32_t> MessageOpener::OpenFirst(std::vector<zmq::message_t>& frames,
                                                  size_t skip) {
  absl::StatusOr<Head> head = CheckFrames(frames, skip);
  if (!head.ok()) return head.status();
  if (absl::Status s = OpenOne(frames[skip], head->first, 0, head->count); !s.ok()) return s;
  return head->key_id;
}

absl::Status MessageOpener::OpenFrame(zmq::message_t& frame, uint32_t index, uint32_t count) {
  const std::optional<uint64_t> counter = SealedCounter(Bytes(frame));
  if (frame.size() < kSealOverheadBytes || !counter.has_value() || *counter < index) {
    return absl::InvalidArgumentError(absl::StrCat(
        "frame ", index, " of ", count, " is not a sealed frame (", frame.size(), " bytes)"));
  }
  return OpenOne(frame, *counter - index, index, count);
}

absl::StatusOr<DataSeals> NewDataSeals(SealKey* seal_key, const std::vector<DataKey>& peers) {
  DataSeals seals;
  absl::StatusOr<std::unique_ptr<MessageSealer>> sealer = MessageSealer::Create(seal_key);
  if (!sealer.ok()) return sealer.status();
  seals.sealer = *std::move(sealer);
  seals.opener = std::make_unique<MessageOpener>(seal_key->protection());
  for (const DataKey& peer : peers) {
    if (absl::Status s = seals.opener->keys().AddKey(peer, peer.id); !s.ok()) return s;
  }
  return seals;
}

}  // namespace bytecomp
