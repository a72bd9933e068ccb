// u8bit's payload, written and read by the CPU codec (compress/src/quant_u8bit.cc) and the CUDA
// one (compress/cuda/src/quant_more_kernels.cu). Little-endian:
//   f32 max |x|, then n bytes: bit 7 the sign (1 negative), bits 0-6 Dettmers' dynamic tree
//   code of |x| / max |x| (elementwise.h U8bitCode: the nearest of the 128 magnitudes
//   U8bitMagnitude; U8bitValue decodes). Size: 4 + n (no count: the size says n).
// The byte 0x80 (a negative zero) is never written. Decoders reject a wrong size, a non-finite
// or negative max and the byte 0x80.
#pragma once

#include <cstddef>
#include <cstdint>

#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/format_error.h"
#include "bytecomp/compress/format/host_device.h"
#include "bytecomp/compress/format/little_endian.h"

namespace bytecomp::compress::u8bit {

constexpr size_t kHeaderBytes = 4;
constexpr uint8_t kNegativeZero = 0x80;

BYTECOMP_HD size_t PayloadBytes(size_t n) { return kHeaderBytes + n; }

// The header's checks for a payload of `bytes` bytes decoded into n elements: the size, then
// the max (its first 4 bytes, read only when the size is right).
BYTECOMP_HD FormatError CheckHeader(const uint8_t* header, size_t bytes, size_t n) {
  FormatError e = CheckPayloadSize(bytes, PayloadBytes(n), n);
  if (e.ok()) e = CheckHeaderValue(GetF32(header), kMaxAbsValue, true);
  return e;
}

// Element i's code: every byte but 0x80.
BYTECOMP_HD FormatError CheckCode(uint8_t code, size_t i) {
  if (code != kNegativeZero) return FormatError();
  return MakeFormatError(FormatErrorCode::kU8bitNegativeZero, i);
}

}  // namespace bytecomp::compress::u8bit
