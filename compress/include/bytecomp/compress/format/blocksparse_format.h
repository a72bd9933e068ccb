// The block-sparse message of blocksparse (OmniReduce): the tensor is cut into blocks of `block`
// elements and only the blocks holding some |x| > threshold travel, with their positions.
// Written by the CPU codec (compress/src/sparse_blocksparse.cc) and the CUDA one
// (compress/cuda/src/sparse_more_kernels.cu) for a push and by the server aggregator
// (compress/src/blocksparse_aggregator.cc) for the summed pull; read by all three.
// Little-endian:
//   offset 0   u32  n, the element count (must equal the decode length)
//   offset 4   u32  block, elements per block (must equal the codec's block parameter)
//   offset 8   u32  m, the number of blocks carried, at most B = ceil(n / block)
//   offset 12  u32  positions: 0 an index list, 1 a bitmap, whichever section is smaller for
//                   this m (on a tie the index list); the other is refused
//   offset 16  the positions section:
//                index list  m u32 block indices, strictly increasing, each < B: 4m bytes
//                bitmap      bit b % 8 of byte b / 8 set iff block b is carried: exactly m bits
//                            set, zero from bit B on, padded to whole u32 words:
//                            BitmapBytes(B) = 4 * ceil(B / 32) bytes
//   then       the carried blocks' values, fp32, in increasing block order. Block b holds
//              elements [b * block, min(n, (b + 1) * block)): when block does not divide n the
//              last block is shorter, L = n - (B - 1) * block elements.
//   size = 16 + min(4m, BitmapBytes(B)) + 4 * (m * block - (last block carried ? block - L : 0))
//   (PayloadBytes). An n == 0 message is the header alone (m = 0).
//
// The summed pull is the same message for the sum of the W pushes: the union of their blocks
// (each element summed in worker-rank order), less the blocks that summed to zero.
//
// Size model (the planner's): a partition of n elements whose blocks are non-zero with density
// d (m = d * B blocks) takes about 16 + min(4 d B, B / 8) + 4 d n bytes, i.e. the density
// times the raw 4n bytes, plus the header and at most one bit per block for positions
// (B / 8 = n / (8 * block) bytes: 0.05% of the raw size at block 256): PayloadBytesAtDensity.
// The pull carries the union of the W pushes' blocks: density at most min(1, W d), and
// 1 - (1 - d)^W for workers whose blocks are independent.
#pragma once

#include <cstddef>
#include <cstdint>

#include "bytecomp/compress/format/format_error.h"
#include "bytecomp/compress/format/host_device.h"
#include "bytecomp/compress/format/little_endian.h"
#include "bytecomp/compress/format/sparse_format.h"

namespace bytecomp::compress::blocksparse {

constexpr size_t kHeaderBytes = 16;

enum Positions : uint32_t { kIndexList = 0, kBitmap = 1 };

// B, the blocks of an n-element tensor (the last one possibly short).
BYTECOMP_HD size_t BlockCount(size_t n, size_t block) { return (n + block - 1) / block; }

// Elements of block b (< BlockCount).
BYTECOMP_HD size_t BlockLength(size_t n, size_t block, size_t b) {
  const size_t left = n - b * block;
  return left < block ? left : block;
}

BYTECOMP_HD size_t BitmapBytes(size_t blocks) { return 4 * ((blocks + 31) / 32); }

// The smaller positions section for m of `blocks` blocks (on a tie the index list).
BYTECOMP_HD Positions PositionsFor(size_t blocks, size_t m) {
  return BitmapBytes(blocks) < 4 * m ? kBitmap : kIndexList;
}

BYTECOMP_HD size_t PositionBytes(size_t blocks, size_t m) {
  return PositionsFor(blocks, m) == kBitmap ? BitmapBytes(blocks) : 4 * m;
}

// fp32 values carried by m blocks, with or without the tensor's last block.
BYTECOMP_HD size_t CarriedElements(size_t n, size_t block, size_t m, bool last_carried) {
  if (m == 0) return 0;
  const size_t last = BlockLength(n, block, BlockCount(n, block) - 1);
  return m * block - (last_carried ? block - last : 0);
}

// The message's size: the formula at the top.
BYTECOMP_HD size_t PayloadBytes(size_t n, size_t block, size_t m, bool last_carried) {
  return kHeaderBytes + PositionBytes(BlockCount(n, block), m) +
         4 * CarriedElements(n, block, m, last_carried);
}

// The size model above: PayloadBytes for m = ceil(density * B) blocks (density in [0, 1]),
// counting the last block as carried (an upper bound by less than 4 * block bytes).
BYTECOMP_HD size_t PayloadBytesAtDensity(size_t n, size_t block, double density) {
  const size_t blocks = BlockCount(n, block);
  const double want =
      density <= 0 ? 0.0 : (density >= 1 ? 1.0 : density) * static_cast<double>(blocks);
  size_t m = static_cast<size_t>(want);
  if (static_cast<double>(m) < want) ++m;
  return PayloadBytes(n, block, m, true);
}

// Every block carried: the largest message (16 + BitmapBytes(B) + 4n for n > 0).
BYTECOMP_HD size_t MaxPayloadBytes(size_t n, size_t block) {
  return PayloadBytes(n, block, BlockCount(n, block), true);
}

// Offset of the values: the header and the positions section before them.
BYTECOMP_HD size_t ValuesOffset(size_t n, size_t block, size_t m) {
  return kHeaderBytes + PositionBytes(BlockCount(n, block), m);
}

// The push's selection: a block travels when some |x| bit pattern in it is at least kept_from
// (sparse::ThresholdKeptFromBits of the "threshold" parameter: |x| > threshold); asked of the
// block's largest |x| (the CPU) or of each element (the GPU: any one marks its block).
BYTECOMP_HD bool Carries(uint32_t abs_bits, uint32_t kept_from) { return abs_bits >= kept_from; }

// The header of m carried blocks (its positions field the smaller section's).
BYTECOMP_HD void WriteHeader(uint8_t* out, uint32_t n, uint32_t block, uint32_t m) {
  PutU32(out, n);
  PutU32(out + 4, block);
  PutU32(out + 8, m);
  PutU32(out + 12, PositionsFor(BlockCount(n, block), m));
}

// The positions section's entry of the j-th carried block, block b. An index list: a u32 each
// (WriteListedPosition). A bitmap, zeroed first: bit b % 8 of byte b / 8 is bit b % 32 of the
// little-endian u32 word b / 32, which a GPU thread ORs in (BitmapWord, BitmapBit).
BYTECOMP_HD void WriteListedPosition(uint8_t* section, uint32_t j, uint32_t b) {
  PutU32(section + 4 * size_t{j}, b);
}
BYTECOMP_HD size_t BitmapWord(uint32_t b) { return b / 32; }
BYTECOMP_HD uint32_t BitmapBit(uint32_t b) { return 1u << (b % 32); }

// Where element e of the j-th carried block lies among the values: every carried block but
// the tensor's last is whole, so j * block + e. Read back: value v is element v % block of the
// (v / block)-th carried block, the tensor's element carried[v / block] * block + v % block.
BYTECOMP_HD size_t CarriedValueIndex(size_t j, uint32_t block, size_t e) { return j * block + e; }
BYTECOMP_HD size_t ElementOfValue(size_t v, uint32_t block, const uint32_t* carried) {
  return size_t{carried[v / block]} * block + v % block;
}

// Writes the header and the positions section of the m carried blocks (increasing block
// indices); returns ValuesOffset, where the caller puts the values.
BYTECOMP_HD size_t WriteHeaderAndPositions(uint8_t* out, uint32_t n, uint32_t block,
                                           const uint32_t* carried, uint32_t m) {
  const size_t blocks = BlockCount(n, block);
  WriteHeader(out, n, block, m);
  uint8_t* section = out + kHeaderBytes;
  if (PositionsFor(blocks, m) == kIndexList) {
    for (uint32_t j = 0; j < m; ++j) WriteListedPosition(section, j, carried[j]);
    return kHeaderBytes + 4 * size_t{m};
  }
  const size_t bytes = BitmapBytes(blocks);
  for (size_t i = 0; i < bytes; ++i) section[i] = 0;
  for (uint32_t j = 0; j < m; ++j) {
    uint8_t* word = section + 4 * BitmapWord(carried[j]);
    PutU32(word, GetU32(word) | BitmapBit(carried[j]));
  }
  return kHeaderBytes + bytes;
}

struct Header {
  uint32_t n = 0, block = 0, m = 0, positions = 0;
};

// Checks the header of a payload of `bytes` bytes at p against the decode length n and the
// codec's block size, and its size against the two that m allows (with the short last block
// or without), so that the positions section and the values are all there to read. Fills *h.
BYTECOMP_HD FormatError CheckHeader(const uint8_t* p, size_t bytes, size_t n, size_t block,
                                    Header* h) {
  if (bytes < kHeaderBytes) return MakeFormatError(FormatErrorCode::kShorterThanHeader, bytes);
  h->n = GetU32(p);
  h->block = GetU32(p + 4);
  h->m = GetU32(p + 8);
  h->positions = GetU32(p + 12);
  if (h->n != n) return MakeFormatError(FormatErrorCode::kMessageElementCount, h->n, n);
  if (h->block != block) return MakeFormatError(FormatErrorCode::kBlockSize, h->block, block);
  const size_t blocks = BlockCount(n, block);
  if (h->m > blocks) return MakeFormatError(FormatErrorCode::kBlocksCarried, h->m, blocks);
  if (h->positions != kIndexList && h->positions != kBitmap) {
    return MakeFormatError(FormatErrorCode::kBlockPositions, h->positions);
  }
  if (h->positions != PositionsFor(blocks, h->m)) {
    return MakeFormatError(FormatErrorCode::kBlockPositionsNotSmaller, h->positions, h->m, blocks);
  }
  const size_t full = PayloadBytes(n, block, h->m, false);
  const size_t with_short_last = PayloadBytes(n, block, h->m, true);
  if (bytes != full && bytes != with_short_last) {
    return MakeFormatError(FormatErrorCode::kBlockSparseSize, bytes, h->m, full, with_short_last);
  }
  return FormatError();
}

// Index of the lowest set bit of a non-zero word; set bits of a word.
BYTECOMP_HD uint32_t LowestBit(uint32_t word) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint32_t>(__ffs(static_cast<int>(word)) - 1);
#else
  return static_cast<uint32_t>(__builtin_ctz(word));
#endif
}
BYTECOMP_HD uint32_t SetBits(uint32_t word) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint32_t>(__popc(word));
#else
  return static_cast<uint32_t>(__builtin_popcount(word));
#endif
}

// After CheckHeader: reads the positions section into carried[0, h.m) (room for h.m indices),
// checking it (indices in range and increasing; the bitmap's padding and count), and that the
// size matches whether the last block is carried. Work: O(m) for an index list, O(B / 32 + m)
// for a bitmap, which is chosen only when m > B / 32.
BYTECOMP_HD FormatError ReadPositions(const uint8_t* p, size_t bytes, const Header& h,
                                      uint32_t* carried) {
  const size_t blocks = BlockCount(h.n, h.block);
  const uint8_t* section = p + kHeaderBytes;
  if (h.positions == kIndexList) {
    for (uint32_t j = 0; j < h.m; ++j) {
      const uint32_t b = GetU32(section + 4 * j);
      if (b >= blocks) return MakeFormatError(FormatErrorCode::kIndexOutOfRange, b, blocks);
      if (j > 0 && b <= carried[j - 1]) {
        return MakeFormatError(FormatErrorCode::kIndicesNotIncreasing, b);
      }
      carried[j] = b;
    }
  } else {
    const size_t words = BitmapBytes(blocks) / 4;
    size_t count = 0;
    for (size_t w = 0; w < words; ++w) {
      const uint32_t bits = GetU32(section + 4 * w);
      // The last word's bits from block B on are padding (32 * w < B for every word).
      if (32 * w + 32 > blocks && (bits >> (blocks - 32 * w)) != 0) {
        return MakeFormatError(FormatErrorCode::kBitmapPadding, blocks);
      }
      count += SetBits(bits);
    }
    if (count != h.m) return MakeFormatError(FormatErrorCode::kBitmapCount, count, h.m);
    size_t j = 0;
    for (size_t w = 0; w < words; ++w) {
      for (uint32_t bits = GetU32(section + 4 * w); bits != 0; bits &= bits - 1) {
        carried[j++] = static_cast<uint32_t>(32 * w + LowestBit(bits));
      }
    }
  }
  const bool last_carried = h.m > 0 && carried[h.m - 1] == blocks - 1;
  const size_t expected = PayloadBytes(h.n, h.block, h.m, last_carried);
  if (bytes != expected) return MakeFormatError(FormatErrorCode::kSizeVsExpected, bytes, expected);
  return FormatError();
}

}  // namespace bytecomp::compress::blocksparse
