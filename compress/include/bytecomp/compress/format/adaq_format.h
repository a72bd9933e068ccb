// The message of adaq (AdaComp style): per sign, a threshold from a sample; the indices of the
// kept positive and negative elements and one mean per sign. Written and read by the CPU codec
// (compress/src/sparse_adaq.cc) and the CUDA one (compress/cuda/src/sparse_more_kernels.cu)
// through these functions. Little-endian:
//   offset 0   u8   version, 1
//   offset 1   u8   the positive index section's encoding (sparse_format.h), offset 2 its width
//   offset 3   u8   the negative index section's encoding, offset 4 its width
//   offset 5   3 zero bytes
//   offset 8   u32  n, the element count (must equal the decode length)
//   offset 12  u32  k_pos, offset 16 u32 k_neg (k_pos + k_neg <= n)
//   offset 20  u32  pos_index_bytes, offset 24 u32 neg_index_bytes
//   offset 28  f32  mean_pos, offset 32 f32 mean_neg (finite)
//   offset 36  the positive index section, then the negative one (sparse_format.h's sections)
//   size = 36 + pos_index_bytes + neg_index_bytes.
// Decode: mean_pos at the positive indices, mean_neg at the negative ones (the two sets must be
// disjoint), 0 elsewhere.
//
// Encode, in steps that both sides take:
//   1. the sample of dgc (dgc_threshold.h: dgc::ForEachSamplePosition, seeded with
//      NodeSeed(ctx, kAdaqSalt)), the positive values' |x| bit patterns in one list and the
//      negative ones' in another (zeros in neither);
//   2. each sign's threshold: SignThreshold(its list, ratio);
//   3. kept: the elements whose raw bit pattern lies in PositiveRange(positive threshold) or
//      NegativeRange(negative threshold), in index order;
//   4. each sign's mean: Mean(the sum of its kept values in double, their count);
//   5. the header (WriteHeader) and the two sections, each the smallest for its indices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "bytecomp/compress/format/format_error.h"
#include "bytecomp/compress/format/host_device.h"
#include "bytecomp/compress/format/little_endian.h"
#include "bytecomp/compress/format/sparse_format.h"
#include "bytecomp/compress/format/topk_select.h"

namespace bytecomp::compress::adaq {

constexpr size_t kHeaderBytes = 36;
constexpr uint8_t kVersion = 1;
constexpr uint64_t kAdaqSalt = 0x61646171ull;  // "adaq", for NodeSeed
constexpr uint32_t kKeepNone = 0xffffffffu;    // the threshold of a sign that keeps nothing

// Step 1: a sampled value's |x| bit pattern onto its sign's list (a zero onto neither). Host
// code.
inline void AddSampled(float v, std::vector<uint32_t>& positive, std::vector<uint32_t>& negative) {
  if (v > 0.0f) positive.push_back(FloatBits(v) & 0x7fffffffu);
  if (v < 0.0f) negative.push_back(FloatBits(v) & 0x7fffffffu);
}

// Step 2: the KeptCount(ratio, size)-th largest of a sign's sampled |x| bit patterns
// (reordered), kKeepNone for an empty list. Host code.
inline uint32_t SignThreshold(std::vector<uint32_t>& abs_bits, double ratio) {
  if (abs_bits.empty()) return kKeepNone;
  return topk::NthLargest(abs_bits, sparse::KeptCount(ratio, abs_bits.size()));
}

// Step 3: kept elements' raw bit patterns lie in [lo, hi]: a positive x has bits from its
// threshold up to the largest finite float; a negative one has bits 0x80000000 | |x|. For
// kKeepNone, lo > hi (nothing kept). A threshold is at least 1 (the sampled values are not
// zero), so +0 and -0 are never kept.
struct BitRange {
  uint32_t lo;
  uint32_t hi;
};
BYTECOMP_HD BitRange PositiveRange(uint32_t threshold) { return BitRange{threshold, 0x7f7fffffu}; }
BYTECOMP_HD BitRange NegativeRange(uint32_t threshold) {
  return BitRange{0x80000000u | threshold, 0xff7fffffu};
}
BYTECOMP_HD bool InRange(uint32_t bits, BitRange r) { return bits >= r.lo && bits <= r.hi; }

// Step 4: a sign's mean from the double sum of its k kept values (0 for none).
BYTECOMP_HD float Mean(double sum, size_t k) {
  return k == 0 ? 0.0f : static_cast<float>(sum / static_cast<double>(k));
}

// ---- the header

struct Header {
  uint32_t n = 0;
  uint32_t k_pos = 0, k_neg = 0;
  sparse::IndexPlan pos, neg;  // the sections' encodings, widths and sizes
  float mean_pos = 0.0f, mean_neg = 0.0f;
};

BYTECOMP_HD void WriteHeader(uint8_t* out, const Header& h) {
  for (size_t i = 0; i < kHeaderBytes; ++i) out[i] = 0;
  out[0] = kVersion;
  out[1] = h.pos.encoding;
  out[2] = h.pos.width;
  out[3] = h.neg.encoding;
  out[4] = h.neg.width;
  PutU32(out + 8, h.n);
  PutU32(out + 12, h.k_pos);
  PutU32(out + 16, h.k_neg);
  PutU32(out + 20, static_cast<uint32_t>(h.pos.bytes));
  PutU32(out + 24, static_cast<uint32_t>(h.neg.bytes));
  PutF32(out + 28, h.mean_pos);
  PutF32(out + 32, h.mean_neg);
}

// The fields as they are on the wire (encodings and widths unchecked: the section readers
// check them).
BYTECOMP_HD Header ReadHeader(const uint8_t* p) {
  Header h;
  h.pos.encoding = static_cast<sparse::IndexEncoding>(p[1]);
  h.pos.width = p[2];
  h.neg.encoding = static_cast<sparse::IndexEncoding>(p[3]);
  h.neg.width = p[4];
  h.n = GetU32(p + 8);
  h.k_pos = GetU32(p + 12);
  h.k_neg = GetU32(p + 16);
  h.pos.bytes = GetU32(p + 20);
  h.neg.bytes = GetU32(p + 24);
  h.mean_pos = GetF32(p + 28);
  h.mean_neg = GetF32(p + 32);
  return h;
}

// Checks a message of `bytes` bytes whose first min(bytes, 36) bytes are at p against the
// decode length n: the size of the header, version, n, k_pos + k_neg <= n, the size the header
// adds up to, finite means. The sections are checked by their reader, then CheckDisjoint.
BYTECOMP_HD FormatError CheckHeader(const uint8_t* p, size_t bytes, size_t n) {
  if (bytes < kHeaderBytes) return MakeFormatError(FormatErrorCode::kShorterThanHeader, bytes);
  if (p[0] != kVersion) return MakeFormatError(FormatErrorCode::kUnknownVersion, p[0]);
  const Header h = ReadHeader(p);
  if (h.n != n) return MakeFormatError(FormatErrorCode::kMessageElementCount, h.n, n);
  const uint64_t k = static_cast<uint64_t>(h.k_pos) + h.k_neg;
  if (k > n) return MakeFormatError(FormatErrorCode::kSignedKAboveN, k, n);
  const uint64_t expected = kHeaderBytes + static_cast<uint64_t>(h.pos.bytes) + h.neg.bytes;
  if (bytes != expected) return MakeFormatError(FormatErrorCode::kSizeVsHeader, bytes, expected);
  if ((FloatBits(h.mean_pos) & 0x7fffffffu) >= 0x7f800000u ||
      (FloatBits(h.mean_neg) & 0x7fffffffu) >= 0x7f800000u) {
    return MakeFormatError(FormatErrorCode::kMeansNotFinite);
  }
  return FormatError();
}

// The two increasing index lists hold no index in common: a merge, reporting the first shared
// index.
BYTECOMP_HD FormatError CheckDisjoint(const uint32_t* pos, size_t k_pos, const uint32_t* neg,
                                      size_t k_neg) {
  size_t a = 0, b = 0;
  while (a < k_pos && b < k_neg) {
    if (pos[a] == neg[b]) return MakeFormatError(FormatErrorCode::kIndexBothSigns, pos[a]);
    if (pos[a] < neg[b]) {
      ++a;
    } else {
      ++b;
    }
  }
  return FormatError();
}

}  // namespace bytecomp::compress::adaq
