// Fixed-width code packing for the quantisation codecs (private to compress/src).
// Layout: format/bit_stream.h's LSB-first bit stream, code i in bits [i*bits, (i+1)*bits), the
// padding bits of the last byte 0 (BitWriter and BitReader are the generic path). Groups of 8
// codes fill exactly `bits` bytes, which the fast paths exploit.
#pragma once

#include <cstddef>
#include <cstdint>

#include "bytecomp/compress/format/bit_stream.h"

namespace bytecomp::compress {

// bits in [1, 16]; codes[i] < 2^bits.
void PackCodes(const uint16_t* codes, size_t n, uint32_t bits, uint8_t* out);
// Reads PackedBytes(n, bits) bytes; returns false if the padding bits are not zero.
bool UnpackCodes(const uint8_t* in, size_t n, uint32_t bits, uint16_t* codes);

}  // namespace bytecomp::compress
