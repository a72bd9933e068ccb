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
