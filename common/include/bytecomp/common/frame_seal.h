// Sealed data frames: authenticated encryption of bulk payloads with AES-256-GCM from OpenSSL's
// libcrypto (AES-NI and carry-less multiply where the CPU has them), the primitive of the data
// path's protection (docs/SECURITY.md, "Sealed data frames").
//
// A sealed frame is the payload between a 24-byte prefix and a 16-byte GCM tag:
//
//   offset  bytes  field
//   0       1      magic 0xBC
//   1       1      version 1
//   2       1      protection: 1 encrypt (payload encrypted and authenticated),
//                  2 authenticate (payload in the clear, authenticated: GMAC)
//   3       1      0
//   4       4      key id (little-endian): which of the job's data keys sealed it
//   8       4      sender: the sealing node's id, unique among the key's holders
//   12      8      counter: the sender's frame number under this key, never repeated
//   20      4      payload bytes
//   24      n      payload (ciphertext for encrypt)
//   24+n    16     tag
//
// The 96-bit GCM nonce is sender || counter, so nonces never repeat as long as every sender of
// a key has its own id and its counter only counts up (SealKey); the key is replaced whenever
// that cannot be promised (a restarted scheduler, a replacement node). The tag covers the
// prefix, the caller's associated data (what the frame must be bound to: the connection, the
// request's header) and the payload: a frame altered anywhere, sealed under another key, or
// moved to another connection or request is refused, and FrameOpener refuses a frame it has
// opened before (a window of the last kReplayWindow counters per key, so frames that arrive
// over several connections may be reordered within it). Each key has one sender: the node that
// drew it seals under it, the nodes it was given to only open.
//
// Sealing and opening are one pass over the payload, in place or from one buffer into another,
// on the caller's thread: each thread that touches the bytes seals them with its own
// FrameSealer (contexts are not shared), the counter shared through the SealKey.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace bytecomp {

enum class DataProtection : uint8_t { kEncrypt = 1, kAuthenticate = 2 };

// "encrypt" or "authenticate".
absl::string_view DataProtectionName(DataProtection protection);

inline constexpr uint8_t kSealMagic = 0xBC;
inline constexpr uint8_t kSealVersion = 1;
inline constexpr size_t kDataKeyBytes = 32;
inline constexpr size_t kSealPrefixBytes = 24;
inline constexpr size_t kSealTagBytes = 16;
inline constexpr size_t kSealOverheadBytes = kSealPrefixBytes + kSealTagBytes;
// Counters below the highest opened one by this much or more are refused as too old.
inline constexpr uint64_t kReplayWindow = 65536;

struct DataKey {
  uint32_t id = 0;  // carried in every frame; the job numbers its keys
  std::array<uint8_t, kDataKeyBytes> bytes{};
};

// A fresh key from OpenSSL's random generator.
absl::StatusOr<DataKey> NewDataKey(uint32_t id);

// What one sender seals under one key: the key, the sender's id and its frame counter, shared
// by the sender's FrameSealers (one per thread).
class SealKey {
 public:
  SealKey(DataProtection protection, const DataKey& key, uint32_t sender)
      : protection_(protection), key_(key), sender_(sender) {}
  SealKey(const SealKey&) = delete;
  SealKey& operator=(const SealKey&) = delete;

  DataProtection protection() const { return protection_; }
  const DataKey& key() const { return key_; }
  uint32_t sender() const { return sender_; }
  // The next `n` counters (each value once): [returned, returned + n).
  uint64_t TakeCounters(uint64_t n = 1) {
    return next_counter_.fetch_add(n, std::memory_order_relaxed);
  }
  uint64_t sealed() const { return next_counter_.load(std::memory_order_relaxed); }

 private:
  const DataProtection protection_;
  const DataKey key_;
  const uint32_t sender_;
  std::atomic<uint64_t> next_counter_{0};
};

// Seals frames under one SealKey; one per thread (it owns an OpenSSL context).
class FrameSealer {
 public:
  static absl::StatusOr<std::unique_ptr<FrameSealer>> Create(SealKey* key);
  ~FrameSealer();
  FrameSealer(const FrameSealer&) = delete;
  FrameSealer& operator=(const FrameSealer&) = delete;

  // Seals `frame` in place: its first kSealPrefixBytes and last kSealTagBytes are room for the
  // prefix and the tag, the bytes between them the payload.
  absl::Status SealInPlace(absl::Span<uint8_t> frame, absl::string_view associated);
  // Seals `payload` into `out` (payload.size() + kSealOverheadBytes bytes; it may not overlap
  // the payload): the copy a send needs anyway, made by the cipher.
  absl::Status Seal(absl::Span<const uint8_t> payload, absl::string_view associated,
                    absl::Span<uint8_t> out);
  // Seal, under a counter the caller took from the SealKey (frames sealed as one message).
  absl::Status SealAt(uint64_t counter, absl::Span<const uint8_t> payload,
                      absl::string_view associated, absl::Span<uint8_t> out);

 private:
  FrameSealer(SealKey* key, void* context) : key_(*key), context_(context) {}
  absl::Status SealInto(uint64_t counter, const uint8_t* payload, size_t n,
                        absl::string_view associated, uint8_t* out);

  SealKey& key_;
  void* context_;  // EVP_CIPHER_CTX, its key schedule set once
};

// The counter in a sealed frame's prefix, or nullopt when `frame` is too short to hold one
// (not checked otherwise: OpenInPlace says whether the frame is sound).
std::optional<uint64_t> SealedCounter(absl::Span<const uint8_t> frame);
// The key id in a sealed frame's prefix, or nullopt when `frame` is too short (not checked
// otherwise).
std::optional<uint32_t> SealedKeyId(absl::Span<const uint8_t> frame);

// Opens frames sealed under the keys it was given; one per thread. Keeps, per key, which
// counters it has opened.
class FrameOpener {
 public:
  explicit FrameOpener(DataProtection protection) : protection_(protection) {}
  ~FrameOpener();
  FrameOpener(const FrameOpener&) = delete;
  FrameOpener& operator=(const FrameOpener&) = delete;

  DataProtection protection() const { return protection_; }

  // Frames sealed under `key` by `sender` open from now on. A key of the same id is replaced,
  // its counters forgotten (a replacement node draws a new key under its predecessor's id).
  absl::Status AddKey(const DataKey& key, uint32_t sender);
  void DropKey(uint32_t id);
  bool HoldsKey(uint32_t id) const { return keys_.contains(id); }

  // Opens `frame` in place and returns the payload within it. On any error the frame's bytes
  // are not to be used (a failed decryption may have overwritten them) and the error says
  // what was wrong: too short, not a sealed frame, another version or protection, an unknown
  // key or another sender, a length that disagrees with the frame, a counter opened before or
  // too old, or a tag that does not match (altered, another key, other associated data).
  absl::StatusOr<absl::Span<uint8_t>> OpenInPlace(absl::Span<uint8_t> frame,
                                                  absl::string_view associated);
  // Opens `frame` into `out` (frame.size() - kSealOverheadBytes bytes): the copy a receive
  // needs anyway, made by the cipher. The same checks; `frame` is left as it was.
  absl::Status Open(absl::Span<const uint8_t> frame, absl::string_view associated,
                    absl::Span<uint8_t> out);

  uint64_t opened() const { return opened_; }
  uint64_t refused() const { return refused_; }

 private:
  struct Window {
    uint64_t top = 0;  // highest counter opened + 1 (0: none yet)
    // Bit (c % kReplayWindow) for each counter c in [top - kReplayWindow, top) opened.
    std::vector<uint64_t> seen = std::vector<uint64_t>(kReplayWindow / 64);
  };
  struct Key {
    void* context = nullptr;  // EVP_CIPHER_CTX, its key schedule set once
    uint32_t sender = 0;
    Window window;
  };
  // Checks the prefix and the counter; the key the frame names.
  absl::StatusOr<Key*> Check(absl::Span<const uint8_t> frame);
  absl::Status Decrypt(Key& key, absl::Span<const uint8_t> frame, absl::string_view associated,
                       uint8_t* out);
  absl::Status Counted(absl::Status status);
  static absl::Status CheckCounter(const Window& w, uint64_t counter, uint32_t sender);
  static void MarkCounter(Window& w, uint64_t counter);

  const DataProtection protection_;
  absl::flat_hash_map<uint32_t, Key> keys_;  // by key id
  uint64_t opened_ = 0;
  uint64_t refused_ = 0;
};

}  // namespace bytecomp
