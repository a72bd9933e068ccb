// sketch's payload, written and read by the CPU codec (compress/src/quant_sketch.cc) and the CUDA
// one (compress/cuda/src/quant_more_kernels.cu). Little-endian:
//   u32 n (checked against the decode length), q f32 bucket means (bucket b: the elements with
//   boundary[b-1] <= x < boundary[b]; 0 for an empty bucket), then n bucket ids of
//   b = IdBits(q) = BitsFor(q - 1) bits (LSB-first stream, bit_stream.h, padding bits 0).
//   Size: 4 + 4q + ceil(n * b / 8); with q = 64: 4 + 256 + ceil(6n/8).
// Boundaries: the j/q quantiles (j = 1..q-1) of a sample of SampleSize(n) elements at evenly
// spaced indices (SampleIndex), sorted; a bucket's mean is its sum in double over its count,
// rounded once to float (BucketMean). Decoding preserves each bucket's sum (hence the tensor's
// sum) and the order of elements. Decoders reject a wrong size or count, a non-finite mean,
// non-zero padding bits and an id >= q.
#pragma once

#include <cstddef>
#include <cstdint>

#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/bit_stream.h"
#include "bytecomp/compress/format/format_error.h"
#include "bytecomp/compress/format/host_device.h"
#include "bytecomp/compress/format/little_endian.h"

namespace bytecomp::compress::sketch {

constexpr size_t kMaxSample = 8192;

BYTECOMP_HD uint32_t IdBits(uint32_t quantiles) { return BitsFor(quantiles - 1); }
// Where the ids start: after the count and the means.
BYTECOMP_HD size_t IdsStart(uint32_t quantiles) { return 4 + 4 * size_t{quantiles}; }
BYTECOMP_HD size_t PayloadBytes(size_t n, uint32_t quantiles) {
  return IdsStart(quantiles) + PackedBytes(n, static_cast<int>(IdBits(quantiles)));
}

// ---- boundaries

// The sample: m = SampleSize(n) elements, element SampleIndex(s, n, m) for s < m.
BYTECOMP_HD size_t SampleSize(size_t n) { return n < kMaxSample ? n : kMaxSample; }
BYTECOMP_HD size_t SampleIndex(size_t s, size_t n, size_t m) { return s * n / m; }

// The search table: the q - 1 boundaries, then +inf up to SearchSize(q), the power of two at
// or above q, so that BucketId halves it without bounds checks.
BYTECOMP_HD size_t SearchSize(uint32_t quantiles) {
  size_t padded = 1;
  while (padded < quantiles) padded *= 2;
  return padded;
}

// Entry `slot` of the search table from the sorted sample of m elements: boundary j = slot + 1
// is the sample's element min(m - 1, j * m / q) (0 for an empty sample).
BYTECOMP_HD float SearchEntry(const float* sorted, size_t m, uint32_t quantiles, size_t slot) {
  if (slot + 1 >= quantiles) return BitsToFloat(0x7f800000u);  // +inf
  if (m == 0) return 0.0f;
  const size_t rank = (slot + 1) * m / quantiles;
  return sorted[rank < m - 1 ? rank : m - 1];
}

// The bucket of x: the number of boundaries <= x (as std::upper_bound), by one comparison per
// halving step. A mask, not a select: GCC turns the select into a branch, mispredicted half the
// time.
BYTECOMP_HD uint32_t BucketId(float x, const float* table, size_t padded) {
  uint32_t id = 0;
  for (uint32_t step = static_cast<uint32_t>(padded / 2); step > 0; step /= 2) {
    id += step & (0u - static_cast<uint32_t>(x >= table[id + step - 1]));
  }
  return id;
}

// A bucket's mean from its sum (double) and count; 0 for an empty bucket.
BYTECOMP_HD float BucketMean(double sum, uint64_t count) {
  return count == 0 ? 0.0f : static_cast<float>(sum / static_cast<double>(count));
}

// ---- checks, in the order the CPU decoder makes them (after the size and count)

BYTECOMP_HD FormatError CheckMean(float mean, size_t bucket) {
  if (IsFiniteFloat(mean)) return FormatError();
  return MakeFormatError(FormatErrorCode::kBucketMeanNotFinite, bucket);
}

BYTECOMP_HD bool IdValid(uint32_t id, uint32_t quantiles) { return id < quantiles; }
BYTECOMP_HD FormatError CheckId(uint32_t id, size_t i, uint32_t quantiles) {
  if (IdValid(id, quantiles)) return FormatError();
  return MakeFormatError(FormatErrorCode::kBucketIdRange, id, i, quantiles);
}

// ---- the GPU's decomposition: one thread a group of 8 ids (bit_stream.h PutCodeGroup). The
// host tests replay them against the CPU codec.

// Writes group g's ids into the ids at packed; add(i, x_i, id) receives each element's bucket
// (for the sums).
BYTECOMP_HD_TEMPLATE
template <typename Add>
BYTECOMP_HD void EncodeGroup(const float* x, size_t n, size_t g, const float* table, size_t padded,
                             uint32_t quantiles, uint8_t* packed, Add add) {
  PutCodeGroup(n, g, IdBits(quantiles), packed, [&](size_t i) {
    const float v = x[i];
    const uint32_t id = BucketId(v, table, padded);
    add(i, v, id);
    return id;
  });
}

// Decodes group g of the payload: emit(i, value) for each of its elements, the mean of its
// bucket as the payload holds it (checked apart: CheckMean); checks the group's ids and padding
// bits (an element with a bad id gets 0).
BYTECOMP_HD_TEMPLATE
template <typename Emit>
BYTECOMP_HD FormatError DecodeGroup(const uint8_t* payload, size_t n, size_t g, uint32_t quantiles,
                                    Emit emit) {
  uint32_t ids[8];
  GetCodeGroup(payload + IdsStart(quantiles), n, g, IdBits(quantiles), ids);
  FormatError error;
  for (uint32_t j = 0; j < 8; ++j) {
    const size_t i = 8 * g + j;
    if (i >= n) {
      if (ids[j] != 0 && error.ok()) error = MakeFormatError(FormatErrorCode::kIdPaddingNotZero);
      continue;
    }
    const FormatError e = CheckId(ids[j], i, quantiles);
    if (error.ok()) error = e;
    emit(i, e.ok() ? GetF32(payload + 4 + 4 * size_t{ids[j]}) : 0.0f);
  }
  return error;
}

}  // namespace bytecomp::compress::sketch
