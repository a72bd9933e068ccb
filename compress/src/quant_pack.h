// Fixed-width code packing for the quantisation codecs (private to compress/src).
// Layout: LSB-first bit stream, code i occupies bits [i*bits, (i+1)*bits), the padding bits of
// the last byte are 0 (the same layout as BitWriter in codec_util.h, which the generic path
// uses). Groups of 8 codes fill exactly `bits` bytes, which the fast paths exploit.
#pragma once

#include <cstddef>
#include <cstdint>

namespace bytecomp::compress {

inline size_t PackedCodeBytes(size_t n, uint32_t bits) { return (n * bits + 7) / 8; }

// bits in [1, 16]; codes[i] < 2^bits.
void PackCodes(const uint16_t* codes, size_t n, uint32_t bits, uint8_t* out);
// Reads PackedCodeBytes(n, bits) bytes; returns false if the padding bits are not zero.
bool UnpackCodes(const uint8_t* in, size_t n, uint32_t bits, uint16_t* codes);

}  // namespace bytecomp::compress
