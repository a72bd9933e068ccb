// The sparse message of topk, threshold and dgc (and the index sections of adaq), written and
// read by the CPU codecs (compress/src/sparse_*.cc) and the CUDA kernels
// (compress/cuda/src/sparse_*.cu) through these functions. Little-endian:
//   offset 0   u8   version, 1
//   offset 1   u8   index encoding (below: 0 raw, 1 bit-packed deltas, 2 varint deltas)
//   offset 2   u8   bit width of the deltas (bit-packed only, else 0)
//   offset 3   u8   0
//   offset 4   u32  n, the element count (must equal the decode length)
//   offset 8   u32  k, the number of elements sent (topk: exactly KeptCount(ratio, n))
//   offset 12  u32  index_bytes, the size of the index section
//   offset 16  k fp32 values, in increasing index order
//   offset 16 + 4k  the index section, strictly increasing indices < n
//   size = 16 + 4k + index_bytes. Every n == 0 message is a header alone (k = 0).
//
// Index sections: k strictly increasing indices i_0 < ... < i_{k-1} < n in one of three
// encodings, whichever is smallest for the message (on a tie the earlier one in this list):
//   0 raw      k little-endian uint32: 4k bytes.
//   1 bitpack  deltas d_0 = i_0, d_j = i_j - i_{j-1} - 1, each in `width` bits (width = bits of
//              the largest delta, 0..32), an LSB-first bit stream (bit_stream.h):
//              ceil(k * width / 8) bytes.
//   2 varint   the same deltas as LEB128 varints (7 bits a byte, low group first, high bit set
//              on every byte but the last): sum of VarintLength(d_j) bytes.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "bytecomp/compress/format/bit_stream.h"
#include "bytecomp/compress/format/format_error.h"
#include "bytecomp/compress/format/host_device.h"
#include "bytecomp/compress/format/little_endian.h"

namespace bytecomp::compress::sparse {

constexpr size_t kHeaderBytes = 16;
constexpr uint8_t kVersion = 1;

// The k of the ratio codecs (topk, randomk, dgc's sample): max(1, ceil(ratio * n)), at most n;
// 0 for n == 0.
BYTECOMP_HD size_t KeptCount(double ratio, size_t n) {
  if (n == 0) return 0;
  const size_t k = static_cast<size_t>(std::ceil(ratio * static_cast<double>(n)));
  return k < 1 ? 1 : (k > n ? n : k);
}

// The largest message that carries k values (its index section raw).
BYTECOMP_HD size_t MaxMessageBytes(size_t k) { return kHeaderBytes + 8 * k; }

// threshold's selection: every |x| > threshold (its parameter, rounded to float) is sent, i.e.
// every |x| bit pattern (which orders like the magnitude) from this one up.
BYTECOMP_HD uint32_t ThresholdKeptFromBits(double threshold) {
  return (FloatBits(static_cast<float>(threshold)) & 0x7fffffffu) + 1u;
}

// ---- index sections

enum IndexEncoding : uint8_t { kRaw = 0, kBitPack = 1, kVarint = 2 };

struct IndexPlan {
  IndexEncoding encoding = kRaw;
  uint8_t width = 0;  // kBitPack only
  size_t bytes = 0;   // size of the index section
};

// d_j: i_0 for j == 0, else i_j - i_{j-1} - 1.
BYTECOMP_HD uint32_t IndexDelta(const uint32_t* idx, size_t j) {
  return idx[j] - (j == 0 ? 0u : idx[j - 1] + 1u);
}

// Bytes of d as a varint: 1 up to 7 bits, 2 up to 14, ... 5 for 29..32 bits (comparisons, so
// that CPU loops over deltas vectorise).
BYTECOMP_HD uint32_t VarintLength(uint32_t d) {
  return 1u + (d >= (1u << 7) ? 1u : 0u) + (d >= (1u << 14) ? 1u : 0u) +
         (d >= (1u << 21) ? 1u : 0u) + (d >= (1u << 28) ? 1u : 0u);
}

// Writes d as a varint at p; returns the end (p + VarintLength(d)).
BYTECOMP_HD uint8_t* WriteVarint(uint8_t* p, uint32_t d) {
  while (d >= 0x80u) {
    *p++ = static_cast<uint8_t>(d | 0x80u);
    d >>= 7;
  }
  *p++ = static_cast<uint8_t>(d);
  return p;
}

// The smallest encoding for k indices whose largest delta is max_delta and whose deltas take
// varint_bytes as varints; ties go to the earlier encoding.
BYTECOMP_HD IndexPlan ChooseIndexPlan(size_t k, uint32_t max_delta, size_t varint_bytes) {
  IndexPlan plan;
  plan.bytes = 4 * k;
  if (k == 0) return plan;
  const int width = BitWidth(max_delta);
  const size_t packed = PackedBytes(k, width);
  if (packed < plan.bytes) {
    plan.encoding = kBitPack;
    plan.width = static_cast<uint8_t>(width);
    plan.bytes = packed;
  }
  if (varint_bytes < plan.bytes) {
    plan.encoding = kVarint;
    plan.width = 0;
    plan.bytes = varint_bytes;
  }
  return plan;
}

// Delta j of a bit-packed section starts at bit j * width: the bits to OR into the 32-bit
// little-endian word bit / 32 (low) and into the next one (high, non-zero when it straddles),
// so that threads can write their deltas independently.
BYTECOMP_HD void BitPackDeltaWords(size_t j, uint32_t width, uint32_t delta, size_t* word,
                                   uint32_t* low, uint32_t* high) {
  const uint64_t bit = static_cast<uint64_t>(j) * width;
  const uint64_t shifted = static_cast<uint64_t>(delta) << (bit % 32);
  *word = static_cast<size_t>(bit / 32);
  *low = static_cast<uint32_t>(shifted);
  *high = static_cast<uint32_t>(shifted >> 32);
}

// Decodes a section of `bytes` bytes that holds exactly k indices in the given encoding into
// idx[0, k). Checks: the section's size, every index < n, strictly increasing.
BYTECOMP_HD FormatError ReadIndexSection(const uint8_t* data, size_t bytes, size_t k, size_t n,
                                         uint8_t encoding, uint8_t width, uint32_t* idx) {
  switch (encoding) {
    case kRaw: {
      if (bytes != 4 * k) return MakeFormatError(FormatErrorCode::kRawSectionSize, bytes, k);
      if (k > 0) std::memcpy(idx, data, 4 * k);
      // Strictly increasing and < n, checked without branches in the loop.
      int64_t prev = -1;
      bool ok = true;
      for (size_t j = 0; j < k; ++j) {
        ok &= static_cast<int64_t>(idx[j]) > prev;
        prev = idx[j];
      }
      if (!ok || (k > 0 && idx[k - 1] >= n)) {
        return MakeFormatError(FormatErrorCode::kIndicesNotIncreasing, n);
      }
      return FormatError();
    }
    case kBitPack: {
      if (width > 32) return MakeFormatError(FormatErrorCode::kIndexWidth, width);
      if (bytes != PackedBytes(k, width)) {
        return MakeFormatError(FormatErrorCode::kBitPackSectionSize, bytes, k, width);
      }
      BitReader r(data, bytes);
      uint64_t next = 0;  // the smallest index the next one may take
      for (size_t j = 0; j < k; ++j) {
        const uint64_t i = next + r.Get(width);
        if (i >= n) return MakeFormatError(FormatErrorCode::kIndexOutOfRange, i, n);
        idx[j] = static_cast<uint32_t>(i);
        next = i + 1;
      }
      return FormatError();
    }
    case kVarint: {
      const uint8_t* p = data;
      const uint8_t* end = data + bytes;
      uint64_t next = 0;
      for (size_t j = 0; j < k; ++j) {
        uint64_t d = 0;
        int shift = 0;
        while (true) {
          if (p == end) return MakeFormatError(FormatErrorCode::kVarintEndsEarly);
          const uint8_t b = *p++;
          d |= static_cast<uint64_t>(b & 0x7fu) << shift;
          if ((b & 0x80u) == 0) break;
          shift += 7;
          if (shift > 28) return MakeFormatError(FormatErrorCode::kVarintTooLong);
        }
        const uint64_t i = next + d;
        if (i >= n) return MakeFormatError(FormatErrorCode::kIndexOutOfRange, i, n);
        idx[j] = static_cast<uint32_t>(i);
        next = i + 1;
      }
      if (p != end) {
        return MakeFormatError(FormatErrorCode::kVarintTrailingBytes,
                               static_cast<uint64_t>(end - p), k);
      }
      return FormatError();
    }
  }
  return MakeFormatError(FormatErrorCode::kUnknownIndexEncoding, encoding);
}

// ---- the parallel reader (the GPU's): a thread per delta, the indices the prefix sums of the
// steps d_j + 1, minus one. A valid section reads exactly as ReadIndexSection reads it; what
// these cannot vouch for (a size, a varint's end, an index out of range) the caller leaves to
// ReadIndexSection, whose checks and errors are the format's.

// Delta j of a bit-packed section of `bytes` bytes.
BYTECOMP_HD uint32_t BitPackedDelta(const uint8_t* data, size_t bytes, size_t j, int width) {
  return BitsAt(data, bytes, static_cast<uint64_t>(j) * static_cast<uint64_t>(width), width);
}

// Whether byte b of a varint section begins a varint: the first byte, or one after a last byte.
BYTECOMP_HD bool BeginsVarint(const uint8_t* data, size_t b) {
  return b == 0 || (data[b - 1] & 0x80u) == 0;
}

// The varint that begins at byte b of a section of `bytes` bytes into *d, as ReadIndexSection
// reads it; false where ReadIndexSection fails (it runs past the end, or past 5 bytes).
BYTECOMP_HD bool VarintAt(const uint8_t* data, size_t bytes, size_t b, uint64_t* d) {
  uint64_t v = 0;
  for (size_t t = 0; t < 5; ++t) {
    if (b + t >= bytes) return false;
    const uint8_t byte = data[b + t];
    v |= static_cast<uint64_t>(byte & 0x7fu) << (7 * t);
    if ((byte & 0x80u) == 0) {
      *d = v;
      return true;
    }
  }
  return false;
}

// ---- the message

// Writes the 16-byte header for n elements, k values and the planned index section.
BYTECOMP_HD void WriteHeader(uint8_t* out, uint32_t n, uint32_t k, const IndexPlan& plan) {
  out[0] = kVersion;
  out[1] = plan.encoding;
  out[2] = plan.width;
  out[3] = 0;
  PutU32(out + 4, n);
  PutU32(out + 8, k);
  PutU32(out + 12, static_cast<uint32_t>(plan.bytes));
}

struct Header {
  uint8_t encoding = 0;
  uint8_t width = 0;
  uint32_t n = 0;
  uint32_t k = 0;
  uint32_t index_bytes = 0;
};

BYTECOMP_HD Header ReadHeader(const uint8_t* p) {
  Header h;
  h.encoding = p[1];
  h.width = p[2];
  h.n = GetU32(p + 4);
  h.k = GetU32(p + 8);
  h.index_bytes = GetU32(p + 12);
  return h;
}

// Checks a message of `bytes` bytes whose first min(bytes, 16) bytes are at p against the
// decode length n: version, n, k <= n (k == required_k unless required_k < 0), and the size the
// header adds up to. The values and the index section are checked by their readers.
BYTECOMP_HD FormatError CheckHeader(const uint8_t* p, size_t bytes, size_t n, int64_t required_k) {
  if (bytes < kHeaderBytes) return MakeFormatError(FormatErrorCode::kShorterThanHeader, bytes);
  if (p[0] != kVersion) return MakeFormatError(FormatErrorCode::kUnknownVersion, p[0]);
  const Header h = ReadHeader(p);
  if (h.n != n) return MakeFormatError(FormatErrorCode::kMessageElementCount, h.n, n);
  if (h.k > n) return MakeFormatError(FormatErrorCode::kKAboveN, h.k, n);
  if (required_k >= 0 && h.k != static_cast<uint64_t>(required_k)) {
    return MakeFormatError(FormatErrorCode::kWrongK, h.k, static_cast<uint64_t>(required_k));
  }
  const uint64_t expected = kHeaderBytes + 4ull * h.k + h.index_bytes;
  if (bytes != expected) return MakeFormatError(FormatErrorCode::kSizeVsHeader, bytes, expected);
  return FormatError();
}

// Whether the k fp32 values at p are all finite (a NaN or Inf would poison every sum).
BYTECOMP_HD bool ValuesFinite(const uint8_t* values, size_t k) {
  uint32_t max_bits = 0;
  for (size_t j = 0; j < k; ++j) {
    const uint32_t bits = GetU32(values + 4 * j) & 0x7fffffffu;
    max_bits = bits > max_bits ? bits : max_bits;
  }
  return max_bits < 0x7f800000u;
}

}  // namespace bytecomp::compress::sparse
