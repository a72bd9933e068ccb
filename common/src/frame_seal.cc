#include "bytecomp/common/frame_seal.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace bytecomp {
namespace {

constexpr size_t kNonceBytes = 12;
// EVP's lengths are ints: payloads go through in pieces of at most this.
constexpr size_t kPieceBytes = size_t{1} << 30;

EVP_CIPHER_CTX* Context(void* p) { return static_cast<EVP_CIPHER_CTX*>(p); }

std::string OpenSslError(absl::string_view what) {
  const unsigned long code = ERR_get_error();
  char text[256] = "no detail";
  if (code != 0) ERR_error_string_n(code, text, sizeof(text));
  ERR_clear_error();
  return absl::StrCat(what, " (OpenSSL: ", text, ")");
}

void PutLe32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void PutLe64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t GetLe32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{p[i]} << (8 * i);
  return v;
}
uint64_t GetLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

// The nonce: sender (4 bytes) then counter (8), as they stand in the prefix.
void NonceOf(const uint8_t* prefix, uint8_t* nonce) { std::memcpy(nonce, prefix + 8, kNonceBytes); }

// Feeds `n` bytes to the context as associated data (out == nullptr) or through the cipher.
bool Update(EVP_CIPHER_CTX* ctx, bool encrypt, uint8_t* out, const uint8_t* in, size_t n) {
  while (n > 0) {
    const int piece = static_cast<int>(std::min(n, kPieceBytes));
    int written = 0;
    const int ok = encrypt ? EVP_EncryptUpdate(ctx, out, &written, in, piece)
                           : EVP_DecryptUpdate(ctx, out, &written, in, piece);
    if (ok != 1) return false;
    if (out != nullptr) out += written;
    in += piece;
    n -= static_cast<size_t>(piece);
  }
  return true;
}

absl::StatusOr<void*> NewContext(const DataKey& key, bool encrypt) {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  if (ctx == nullptr) return absl::InternalError(OpenSslError("EVP_CIPHER_CTX_new failed"));
  const int ok =
      encrypt ? EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key.bytes.data(), nullptr)
              : EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key.bytes.data(), nullptr);
  if (ok != 1) {
    EVP_CIPHER_CTX_free(ctx);
    return absl::InternalError(OpenSslError("setting up AES-256-GCM failed"));
  }
  return ctx;
}

}  // namespace

absl::string_view DataProtectionName(DataProtection protection) {
  return protection == DataProtection::kEncrypt ? "encrypt" : "authenticate";
}

absl::StatusOr<DataKey> NewDataKey(uint32_t id) {
  DataKey key;
  key.id = id;
  if (RAND_bytes(key.bytes.data(), static_cast<int>(key.bytes.size())) != 1) {
    return absl::InternalError(OpenSslError("RAND_bytes failed to draw a data key"));
  }
  return key;
}

absl::StatusOr<std::unique_ptr<FrameSealer>> FrameSealer::Create(SealKey* key) {
  absl::StatusOr<void*> ctx = NewContext(key->key(), /*encrypt=*/true);
  if (!ctx.ok()) return ctx.status();
  return std::unique_ptr<FrameSealer>(new FrameSealer(key, *ctx));
}

FrameSealer::~FrameSealer() { EVP_CIPHER_CTX_free(Context(context_)); }

absl::Status FrameSealer::SealInPlace(absl::Span<uint8_t> frame, absl::string_view associated) {
  if (frame.size() < kSealOverheadBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a frame to seal in place needs ",
                                                   kSealOverheadBytes, " bytes of room, it has ",
                                                   frame.size()));
  }
  return SealInto(key_.TakeCounters(), frame.data() + kSealPrefixBytes,
                  frame.size() - kSealOverheadBytes, associated, frame.data());
}

absl::Status FrameSealer::Seal(absl::Span<const uint8_t> payload, absl::string_view associated,
                               absl::Span<uint8_t> out) {
  return SealAt(key_.TakeCounters(), payload, associated, out);
}

absl::Status FrameSealer::SealAt(uint64_t counter, absl::Span<const uint8_t> payload,
                                 absl::string_view associated, absl::Span<uint8_t> out) {
  if (out.size() != payload.size() + kSealOverheadBytes) {
    return absl::InvalidArgumentError(absl::StrCat("sealing ", payload.size(), " bytes needs ",
                                                   payload.size() + kSealOverheadBytes,
                                                   " bytes out, got ", out.size()));
  }
  const uint8_t* p = payload.data();
  const uint8_t* o = out.data();
  if (p < o + out.size() && o < p + payload.size()) {
    return absl::InvalidArgumentError(
        "Seal's payload and output overlap (SealInPlace seals in place)");
  }
  return SealInto(counter, payload.data(), payload.size(), associated, out.data());
}

absl::Status FrameSealer::SealInto(uint64_t counter, const uint8_t* payload, size_t n,
                                   absl::string_view associated, uint8_t* out) {
  if (n > UINT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("a sealed frame holds at most 4 GiB, not ", n));
  }
  const bool encrypt = key_.protection() == DataProtection::kEncrypt;
  uint8_t prefix[kSealPrefixBytes] = {kSealMagic, kSealVersion,
                                      static_cast<uint8_t>(key_.protection()), 0};
  PutLe32(prefix + 4, key_.key().id);
  PutLe32(prefix + 8, key_.sender());
  PutLe64(prefix + 12, counter);
  PutLe32(prefix + 20, static_cast<uint32_t>(n));
  uint8_t nonce[kNonceBytes];
  NonceOf(prefix, nonce);
  EVP_CIPHER_CTX* ctx = Context(context_);
  uint8_t* body = out + kSealPrefixBytes;
  int written = 0;
  const bool ok =
      EVP_EncryptInit_ex(ctx, nullptr, nullptr, nullptr, nonce) == 1 &&
      Update(ctx, true, nullptr, prefix, kSealPrefixBytes) &&
      Update(ctx, true, nullptr, reinterpret_cast<const uint8_t*>(associated.data()),
             associated.size()) &&
      // encrypt: the payload through the cipher into the body; authenticate: the payload as
      // associated data (GMAC), copied into the body when it is not there already.
      (encrypt ? Update(ctx, true, body, payload, n) : Update(ctx, true, nullptr, payload, n)) &&
      EVP_EncryptFinal_ex(ctx, body + n, &written) == 1 &&
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, kSealTagBytes, body + n) == 1;
  if (!ok) return absl::InternalError(OpenSslError("AES-256-GCM sealing failed"));
  if (!encrypt && body != payload) std::memcpy(body, payload, n);
  // The prefix last: in place it sits before the payload, which the cipher has read by now.
  std::memcpy(out, prefix, kSealPrefixBytes);
  return absl::OkStatus();
}

std::optional<uint64_t> SealedCounter(absl::Span<const uint8_t> frame) {
  if (frame.size() < kSealPrefixBytes) return std::nullopt;
  return GetLe64(frame.data() + 12);
}

std::optional<uint32_t> SealedKeyId(absl::Span<const uint8_t> frame) {
  if (frame.size() < kSealPrefixBytes) return std::nullopt;
  return GetLe32(frame.data() + 4);
}

FrameOpener::~FrameOpener() {
  for (auto& [id, key] : keys_) EVP_CIPHER_CTX_free(Context(key.context));
}

absl::Status FrameOpener::AddKey(const DataKey& key, uint32_t sender) {
  absl::StatusOr<void*> ctx = NewContext(key, /*encrypt=*/false);
  if (!ctx.ok()) return ctx.status();
  DropKey(key.id);
  Key& k = keys_[key.id];
  k.context = *ctx;
  k.sender = sender;
  return absl::OkStatus();
}

void FrameOpener::DropKey(uint32_t id) {
  auto it = keys_.find(id);
  if (it == keys_.end()) return;
  EVP_CIPHER_CTX_free(Context(it->second.context));
  keys_.erase(it);
}

absl::Status FrameOpener::CheckCounter(const Window& w, uint64_t counter, uint32_t sender) {
  if (counter >= w.top) return absl::OkStatus();
  if (w.top - counter > kReplayWindow) {
    return absl::PermissionDeniedError(
        absl::StrCat("frame ", counter, " from sender ", sender, " is older than the last ",
                     kReplayWindow, " this node opened from it (", w.top - 1,
                     " is the newest): a replay or a frame held back"));
  }
  if ((w.seen[(counter % kReplayWindow) / 64] >> (counter % 64)) & 1) {
    return absl::PermissionDeniedError(
        absl::StrCat("frame ", counter, " from sender ", sender, " was opened before: a replay"));
  }
  return absl::OkStatus();
}

void FrameOpener::MarkCounter(Window& w, uint64_t counter) {
  if (counter >= w.top) {
    // Counters [top, counter] enter the window; their bits held counters kReplayWindow older.
    if (counter - w.top >= kReplayWindow) {
      std::fill(w.seen.begin(), w.seen.end(), 0);
    } else {
      for (uint64_t c = w.top; c <= counter; ++c) {
        w.seen[(c % kReplayWindow) / 64] &= ~(uint64_t{1} << (c % 64));
      }
    }
    w.top = counter + 1;
  }
  w.seen[(counter % kReplayWindow) / 64] |= uint64_t{1} << (counter % 64);
}

absl::Status FrameOpener::Counted(absl::Status status) {
  if (status.ok()) {
    ++opened_;
  } else {
    ++refused_;
  }
  return status;
}

absl::StatusOr<absl::Span<uint8_t>> FrameOpener::OpenInPlace(absl::Span<uint8_t> frame,
                                                             absl::string_view associated) {
  absl::StatusOr<Key*> key = Check(frame);
  if (!key.ok()) return Counted(key.status());
  uint8_t* body = frame.data() + kSealPrefixBytes;
  if (absl::Status s = Counted(Decrypt(**key, frame, associated, body)); !s.ok()) return s;
  return absl::Span<uint8_t>(body, frame.size() - kSealOverheadBytes);
}

absl::Status FrameOpener::Open(absl::Span<const uint8_t> frame, absl::string_view associated,
                               absl::Span<uint8_t> out) {
  absl::StatusOr<Key*> key = Check(frame);
  if (!key.ok()) return Counted(key.status());
  if (out.size() != frame.size() - kSealOverheadBytes) {
    return Counted(absl::InvalidArgumentError(absl::StrCat("opening a frame of ",
                                                           frame.size() - kSealOverheadBytes,
                                                           " payload bytes into ", out.size())));
  }
  return Counted(Decrypt(**key, frame, associated, out.data()));
}

absl::StatusOr<FrameOpener::Key*> FrameOpener::Check(absl::Span<const uint8_t> frame) {
  if (frame.size() < kSealOverheadBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a sealed frame of ", frame.size(),
                                                   " bytes, shorter than its ", kSealOverheadBytes,
                                                   "-byte prefix and tag"));
  }
  const uint8_t* prefix = frame.data();
  if (prefix[0] != kSealMagic) {
    return absl::InvalidArgumentError(absl::StrCat("not a sealed frame (first byte ",
                                                   static_cast<int>(prefix[0]), ", not ",
                                                   static_cast<int>(kSealMagic), ")"));
  }
  if (prefix[1] != kSealVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("a sealed frame of version ", static_cast<int>(prefix[1]),
                     "; this build opens version ", static_cast<int>(kSealVersion)));
  }
  if (prefix[2] != static_cast<uint8_t>(protection_) || prefix[3] != 0) {
    const bool known = prefix[2] == static_cast<uint8_t>(DataProtection::kEncrypt) ||
                       prefix[2] == static_cast<uint8_t>(DataProtection::kAuthenticate);
    return absl::PermissionDeniedError(
        absl::StrCat("a sealed frame with protection ",
                     known ? DataProtectionName(static_cast<DataProtection>(prefix[2]))
                           : absl::StrCat("byte ", static_cast<int>(prefix[2])),
                     prefix[3] != 0 ? " and a nonzero reserved byte" : "",
                     " where the job's data_protection is ", DataProtectionName(protection_)));
  }
  const uint32_t key_id = GetLe32(prefix + 4);
  const uint32_t sender = GetLe32(prefix + 8);
  const uint64_t counter = GetLe64(prefix + 12);
  const uint32_t length = GetLe32(prefix + 20);
  if (counter == UINT64_MAX) {
    return absl::InvalidArgumentError("a sealed frame with the last counter, which no sealer uses");
  }
  if (size_t{length} + kSealOverheadBytes != frame.size()) {
    return absl::InvalidArgumentError(absl::StrCat("a sealed frame says it holds ", length,
                                                   " payload bytes, but carries ",
                                                   frame.size() - kSealOverheadBytes));
  }
  auto it = keys_.find(key_id);
  if (it == keys_.end()) {
    std::vector<uint32_t> held;
    for (const auto& [id, key] : keys_) held.push_back(id);
    std::sort(held.begin(), held.end());
    return absl::PermissionDeniedError(absl::StrCat(
        "a frame sealed under data key ", key_id, ", which this node does not hold (it holds ",
        held.empty() ? "none" : absl::StrJoin(held, ", "), ")"));
  }
  if (sender != it->second.sender) {
    return absl::PermissionDeniedError(absl::StrCat("a frame under data key ", key_id,
                                                    " from sender ", sender, "; only sender ",
                                                    it->second.sender, " seals under it"));
  }
  if (absl::Status s = CheckCounter(it->second.window, counter, sender); !s.ok()) return s;
  return &it->second;
}

absl::Status FrameOpener::Decrypt(Key& key, absl::Span<const uint8_t> frame,
                                  absl::string_view associated, uint8_t* out) {
  const uint8_t* prefix = frame.data();
  const size_t length = frame.size() - kSealOverheadBytes;
  const uint8_t* body = prefix + kSealPrefixBytes;
  // The tag is copied out: an in-place decryption may not overwrite what it checks against.
  uint8_t tag[kSealTagBytes];
  std::memcpy(tag, body + length, kSealTagBytes);
  uint8_t nonce[kNonceBytes];
  NonceOf(prefix, nonce);
  EVP_CIPHER_CTX* ctx = Context(key.context);
  const bool encrypt = protection_ == DataProtection::kEncrypt;
  int written = 0;
  const bool fed = EVP_DecryptInit_ex(ctx, nullptr, nullptr, nullptr, nonce) == 1 &&
                   Update(ctx, false, nullptr, prefix, kSealPrefixBytes) &&
                   Update(ctx, false, nullptr, reinterpret_cast<const uint8_t*>(associated.data()),
                          associated.size()) &&
                   (encrypt ? Update(ctx, false, out, body, length)
                            : Update(ctx, false, nullptr, body, length)) &&
                   EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, kSealTagBytes, tag) == 1;
  if (!fed) return absl::InternalError(OpenSslError("AES-256-GCM opening failed"));
  const uint32_t sender = GetLe32(prefix + 8);
  const uint64_t counter = GetLe64(prefix + 12);
  if (EVP_DecryptFinal_ex(ctx, tag, &written) != 1) {
    ERR_clear_error();
    return absl::PermissionDeniedError(absl::StrCat(
        "a frame from sender ", sender, " (data key ", GetLe32(prefix + 4), ", frame ", counter,
        ") failed authentication: altered, sealed under another key, or bound to another "
        "connection or request"));
  }
  if (!encrypt && out != body) std::memcpy(out, body, length);
  // Counted as opened only once authentic: a forged counter cannot move the window.
  MarkCounter(key.window, counter);
  return absl::OkStatus();
}

}  // namespace bytecomp
