// What a sealed_frame fuzz input means (sealed_frame_fuzzer.cc), shared with make_fuzz_seeds so
// the two cannot drift: U8 protection (bit 0: authenticate, else encrypt), String associated
// data, U8 where to flip a byte of the round-trip frame, then the rest: a frame to open.
#pragma once

#include <cstdint>

#include "bytecomp/common/frame_seal.h"

namespace bytecomp::fuzz {

// The fixed data keys the target opens with (ids 1 and 2), so seeds sealed once stay valid.
inline DataKey SealedFrameKey(uint32_t id) {
  DataKey key;
  key.id = id;
  for (size_t i = 0; i < key.bytes.size(); ++i) key.bytes[i] = static_cast<uint8_t>(i * 7 + id);
  return key;
}

// The sender of each key.
inline uint32_t SealedFrameSender(uint32_t key_id) { return key_id + 2; }

inline DataProtection SealedFrameProtection(uint8_t byte) {
  return (byte & 1) ? DataProtection::kAuthenticate : DataProtection::kEncrypt;
}

}  // namespace bytecomp::fuzz
