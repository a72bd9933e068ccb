// The LSB-first bit stream of the packed wire formats (sparse bit-packed index sections,
// quantisation codes, tags): value i occupies bits [i*bits, (i+1)*bits) of a byte string that is
// exactly PackedBytes(count, bits) long, the padding bits of the last byte 0. __host__
// __device__, so a CUDA thread reads a section exactly as a CPU decoder does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "bytecomp/compress/format/host_device.h"

namespace bytecomp::compress {

// Bits needed to hold v (0 for 0).
BYTECOMP_HD int BitWidth(uint32_t v) {
#if defined(__CUDA_ARCH__)
  return 32 - __clz(static_cast<int>(v));
#else
  return v == 0 ? 0 : 32 - __builtin_clz(v);
#endif
}

BYTECOMP_HD size_t PackedBytes(size_t count, int bits) {
  return (count * static_cast<size_t>(bits) + 7) / 8;
}

// Whether the padding bits after `count` values of `bits` bits (the rest of the last byte) are 0.
BYTECOMP_HD bool PaddingBitsZero(const uint8_t* packed, size_t count, int bits) {
  const uint32_t used_bits = static_cast<uint32_t>((count * static_cast<size_t>(bits)) % 8);
  return used_bits == 0 || (packed[PackedBytes(count, bits) - 1] >> used_bits) == 0;
}

// The `bits` bits (0..32) from bit position `bit` of a stream of `size` bytes, as BitReader
// reads them there (bytes past the end read as 0): random access, for a thread per value.
BYTECOMP_HD uint32_t BitsAt(const uint8_t* data, size_t size, uint64_t bit, int bits) {
  const size_t first = static_cast<size_t>(bit / 8);
  uint64_t acc = 0;
  for (size_t t = 0; t < 5; ++t) {
    if (first + t < size) acc |= static_cast<uint64_t>(data[first + t]) << (8 * t);
  }
  return static_cast<uint32_t>((acc >> (bit % 8)) & ((uint64_t{1} << bits) - 1));
}

// ---- groups of 8 codes, the GPU's unit of the fixed-width formats (qsgd, dithering, sketch):
// 8 codes of `bits` bits (1..16) fill exactly `bits` bytes, group g the bytes from g * bits.
// The last group holds the codes below n and only the bytes that exist. The host tests run
// the groups one after another against the CPU codecs.

// Writes group g of the n codes code_of(i) into the PackedBytes(n, bits) bytes at packed.
BYTECOMP_HD_TEMPLATE
template <typename CodeOf>
BYTECOMP_HD void PutCodeGroup(size_t n, size_t g, uint32_t bits, uint8_t* packed, CodeOf code_of) {
  unsigned __int128 acc = 0;
  for (uint32_t j = 0; j < 8; ++j) {
    const size_t i = 8 * g + j;
    if (i >= n) break;
    acc |= static_cast<unsigned __int128>(code_of(i)) << (j * bits);
  }
  const size_t first_byte = g * bits;
  const size_t total_bytes = PackedBytes(n, static_cast<int>(bits));
  for (uint32_t k = 0; k < bits && first_byte + k < total_bytes; ++k) {
    packed[first_byte + k] = static_cast<uint8_t>(acc >> (8 * k));
  }
}

// Reads group g: codes[j] is the code of element 8g + j; for 8g + j >= n, the padding bits
// there (0 in a valid stream).
BYTECOMP_HD void GetCodeGroup(const uint8_t* packed, size_t n, size_t g, uint32_t bits,
                              uint32_t codes[8]) {
  const size_t first_byte = g * bits;
  const size_t total_bytes = PackedBytes(n, static_cast<int>(bits));
  unsigned __int128 acc = 0;
  for (uint32_t k = 0; k < bits && first_byte + k < total_bytes; ++k) {
    acc |= static_cast<unsigned __int128>(packed[first_byte + k]) << (8 * k);
  }
  const uint32_t mask = (1u << bits) - 1u;
  for (uint32_t j = 0; j < 8; ++j) codes[j] = static_cast<uint32_t>(acc >> (j * bits)) & mask;
}

// Writes the stream; flushes 8 bytes at a time.
class BitWriter {
 public:
  BYTECOMP_HD explicit BitWriter(uint8_t* out) : out_(out) {}
  BYTECOMP_HD void Put(uint32_t value, int bits) {  // bits in [0, 32]; value < 2^bits
    acc_ |= static_cast<uint64_t>(value) << filled_;
    filled_ += bits;
    if (filled_ >= 64) {
      std::memcpy(out_, &acc_, 8);
      out_ += 8;
      filled_ -= 64;
      // The bits of value that did not fit (none when filled_ is now 0: value >> bits == 0).
      acc_ = static_cast<uint64_t>(value) >> (bits - filled_);
    }
  }
  // Writes the last partial word (the final byte zero-padded); returns the end pointer.
  BYTECOMP_HD uint8_t* Finish() {
    const int bytes = (filled_ + 7) / 8;
    std::memcpy(out_, &acc_, bytes);
    out_ += bytes;
    acc_ = 0;
    filled_ = 0;
    return out_;
  }

 private:
  uint8_t* out_;
  uint64_t acc_ = 0;
  int filled_ = 0;
};

// Reads what BitWriter wrote; never reads past [data, data + size): a short stream yields
// zero bits, and the caller checks the size beforehand (PackedBytes).
class BitReader {
 public:
  BYTECOMP_HD BitReader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  BYTECOMP_HD uint32_t Get(int bits) {  // bits in [0, 32]
    if (filled_ < bits) Refill();
    const uint32_t v = static_cast<uint32_t>(acc_ & ((uint64_t{1} << bits) - 1));
    acc_ >>= bits;
    filled_ -= bits;
    return v;
  }

 private:
  BYTECOMP_HD void Refill() {
    // Top up to at least 57 bits, a byte at a time near the end, 8 bytes at a time elsewhere.
    if (end_ - p_ >= 8 && filled_ <= 0) {
      std::memcpy(&acc_, p_, 8);
      p_ += 8;
      filled_ = 64;
      return;
    }
    while (filled_ <= 56) {
      const uint64_t byte = p_ < end_ ? *p_++ : 0;
      acc_ |= byte << filled_;
      filled_ += 8;
    }
  }

  const uint8_t* p_;
  const uint8_t* end_;
  uint64_t acc_ = 0;
  int filled_ = 0;
};

}  // namespace bytecomp::compress
