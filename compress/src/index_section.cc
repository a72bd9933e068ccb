#include "index_section.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/format/format_error.h"
#include "quant_pack.h"
#include "simd_kernel.h"

namespace bytecomp::compress::sparse {

// Largest delta and total varint bytes of the deltas after the first; vectorises (no carried
// state but the reductions: delta j reads indices j and j - 1).
BYTECOMP_SIMD_KERNEL(void, DeltaStats,
                     (const uint32_t* indices, size_t k, uint32_t* max_delta,
                      uint64_t* varint_bytes),
                     (indices, k, max_delta, varint_bytes)) {
  uint32_t m = 0;
  uint64_t bytes = 0;
  for (size_t j = 1; j < k; ++j) {
    const uint32_t d = IndexDelta(indices, j);
    m = std::max(m, d);
    bytes += VarintLength(d);
  }
  *max_delta = m;
  *varint_bytes = bytes;
}

// Deltas of at most 8 bits, in L1-sized blocks: the deltas into 16-bit codes (a vector loop),
// then packed as fixed-width codes (quant_pack.h: the same LSB-first stream as BitWriter's; 64
// codes a step in registers with AVX-512 VBMI). Blocks of 2048 codes end on a byte.
BYTECOMP_SIMD_KERNEL(void, NarrowDeltas,
                     (const uint32_t* indices, size_t begin, size_t len, uint16_t* deltas),
                     (indices, begin, len, deltas)) {
  for (size_t j = 0; j < len; ++j) {
    deltas[j] = static_cast<uint16_t>(IndexDelta(indices, begin + j));
  }
}

size_t WriteNarrowDeltas(const uint32_t* indices, size_t k, uint32_t width, uint8_t* out) {
  constexpr size_t kBlock = 2048;
  uint16_t deltas[kBlock];
  for (size_t begin = 0; begin < k; begin += kBlock) {
    const size_t len = std::min(kBlock, k - begin);
    NarrowDeltas(indices, begin, len, deltas);
    PackCodes(deltas, len, width, out + begin / 8 * width);
  }
  return PackedBytes(k, static_cast<int>(width));
}

IndexPlan PlanIndices(const uint32_t* indices, size_t k) {
  if (k == 0) return IndexPlan();
  uint32_t max_delta = 0;
  uint64_t varint_bytes = 0;
  DeltaStats(indices, k, &max_delta, &varint_bytes);
  max_delta = std::max(max_delta, IndexDelta(indices, 0));
  varint_bytes += VarintLength(IndexDelta(indices, 0));
  return ChooseIndexPlan(k, max_delta, static_cast<size_t>(varint_bytes));
}

size_t WriteIndices(const uint32_t* indices, size_t k, const IndexPlan& plan, uint8_t* out) {
  switch (plan.encoding) {
    case kRaw:
      if (k > 0) std::memcpy(out, indices, 4 * k);
      return 4 * k;
    case kBitPack: {
      if (plan.width >= 1 && plan.width <= 8) return WriteNarrowDeltas(indices, k, plan.width, out);
      BitWriter w(out);
      for (size_t j = 0; j < k; ++j) w.Put(IndexDelta(indices, j), plan.width);
      return static_cast<size_t>(w.Finish() - out);
    }
    case kVarint: {
      uint8_t* p = out;
      for (size_t j = 0; j < k; ++j) p = WriteVarint(p, IndexDelta(indices, j));
      return static_cast<size_t>(p - out);
    }
  }
  return 0;
}

namespace {

uint64_t ByteLaneMask(uint32_t width) { return 0x0101010101010101ull * ((1ull << width) - 1); }

}  // namespace

__attribute__((target("bmi2"))) size_t WriteByteSteps(uint8_t* steps, size_t k, uint32_t width,
                                                      uint8_t* out) {
  const size_t bytes = PackedBytes(k, static_cast<int>(width));
  std::memset(steps + k, 1, 8);  // delta 0
  const uint64_t mask = ByteLaneMask(width);
  // Group g's width bytes at out + g * width; each step stores 8 bytes, the next overwriting
  // the excess, up to the last group whose 8 bytes would pass the section's end.
  auto deltas = [&](size_t g) {
    uint64_t s;
    std::memcpy(&s, steps + 8 * g, 8);
    // Each byte less 1, without borrows between them: the high bit set first, taken back after.
    const uint64_t high = 0x8080808080808080ull;
    return ((s | high) - 0x0101010101010101ull) ^ (~s & high);
  };
  size_t g = 0;
  const size_t groups = (k + 7) / 8;
  for (; g < groups && g * width + 8 <= bytes; ++g) {
    const uint64_t packed = _pext_u64(deltas(g), mask);
    std::memcpy(out + g * width, &packed, 8);
  }
  for (; g < groups; ++g) {
    const uint64_t packed = _pext_u64(deltas(g), mask);
    std::memcpy(out + g * width, &packed, bytes - g * width);
  }
  return bytes;
}

__attribute__((target("bmi2"))) void ReadByteDeltas(const uint8_t* section, size_t bytes,
                                                    size_t first, size_t count, uint32_t width,
                                                    uint8_t* deltas) {
  const uint64_t mask = ByteLaneMask(width);
  const size_t g0 = first / 8, groups = (count + 7) / 8;
  for (size_t g = 0; g < groups; ++g) {
    const size_t at = (g0 + g) * width;
    uint64_t packed = 0;
    if (at + 8 <= bytes) {
      std::memcpy(&packed, section + at, 8);
    } else if (at < bytes) {
      std::memcpy(&packed, section + at, bytes - at);
    }
    const uint64_t codes = _pdep_u64(packed, mask);
    std::memcpy(deltas + 8 * g, &codes, 8);
  }
}

void IndicesFromByteSteps(const uint8_t* steps, size_t k, uint32_t* indices) {
  uint32_t next = 0;
  for (size_t j = 0; j < k; ++j) {
    indices[j] = next + static_cast<uint8_t>(steps[j] - 1);
    next = indices[j] + 1;
  }
}

// Bit-packed deltas of 1-8 bits (the section's size checked), the way WriteNarrowDeltas wrote
// them: 2048 at a time unpacked as 16-bit codes (quant_pack.h), then summed into indices.
// Returns false where ReadIndexSection would find something to say (an index >= n), or the
// padding bits are not zero (which it accepts): the caller then runs it for its verdict.
bool ReadNarrowDeltas(const uint8_t* data, size_t k, size_t n, uint32_t width, uint32_t* idx) {
  constexpr size_t kBlock = 2048;
  uint16_t deltas[kBlock];
  uint64_t next = 0;  // the smallest index the next one may take
  for (size_t begin = 0; begin < k; begin += kBlock) {
    const size_t len = std::min(kBlock, k - begin);
    if (!UnpackCodes(data + begin / 8 * width, len, width, deltas)) return false;
    for (size_t j = 0; j < len; ++j) {
      const uint64_t i = next + deltas[j];
      idx[begin + j] = static_cast<uint32_t>(i);
      next = i + 1;
    }
  }
  return k == 0 || next <= n;  // increasing: the last index is the largest
}

absl::Status ReadIndices(absl::string_view codec, const uint8_t* data, size_t bytes, size_t k,
                         size_t n, uint8_t encoding, uint8_t width,
                         std::vector<uint32_t>& indices) {
  indices.resize(k);
  if (encoding == kBitPack && width >= 1 && width <= 8 && bytes == PackedBytes(k, width) &&
      ReadNarrowDeltas(data, k, n, width, indices.data())) {
    return absl::OkStatus();
  }
  return FormatErrorStatus(codec,
                           ReadIndexSection(data, bytes, k, n, encoding, width, indices.data()));
}

}  // namespace bytecomp::compress::sparse
