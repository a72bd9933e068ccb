// natural's payload, written and read by the CPU codec (compress/src/quant_natural.cc) and the
// CUDA one (compress/cuda/src/quant_kernels.cu):
//   u8 exponent_low (1..254), then n bytes: bit 7 sign, bits 0-6 code c, 0 = zero, c >= 1:
//   2^(exponent_low + c - 1 - 127) (elementwise.h NaturalCode, NaturalValue). Size: 1 + n.
// exponent_low = NaturalExponentLow(the largest biased exponent of |x|). Decoders reject an
// exponent_low outside 1..254, a code beyond the float range and the byte 0x80 (a negative
// zero, never written).
#pragma once

#include <cstddef>
#include <cstdint>

#include "bytecomp/compress/format/format_error.h"
#include "bytecomp/compress/format/host_device.h"

namespace bytecomp::compress::natural {

BYTECOMP_HD size_t PayloadBytes(size_t n) { return 1 + n; }

BYTECOMP_HD FormatError CheckExponentLow(uint32_t exponent_low) {
  if (exponent_low >= 1 && exponent_low <= 254) return FormatError();
  return MakeFormatError(FormatErrorCode::kExponentLowRange, exponent_low);
}

// The codes' check from their largest 7-bit code and whether a byte 0x80 is among them.
BYTECOMP_HD FormatError CheckCodes(uint32_t max_code, bool negative_zero, uint32_t exponent_low) {
  if (max_code > 0 && exponent_low + max_code - 1 > 254) {
    return MakeFormatError(FormatErrorCode::kNaturalCodeRange, max_code, exponent_low);
  }
  if (negative_zero) return MakeFormatError(FormatErrorCode::kNaturalNegativeZero);
  return FormatError();
}

// The same for one code (a GPU thread's element).
BYTECOMP_HD FormatError CheckCode(uint8_t code, uint32_t exponent_low) {
  return CheckCodes(code & 0x7fu, code == 0x80u, exponent_low);
}

}  // namespace bytecomp::compress::natural
