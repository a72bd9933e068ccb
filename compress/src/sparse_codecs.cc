// Sparsification codecs: topk, randomk, threshold, dgc, adaq (names and defaults as GRACE).
//
// Sparse wire format (topk, threshold, dgc), little-endian:
//   offset 0   u8   version, 1
//   offset 1   u8   index encoding (sparse_format.h: 0 raw, 1 bit-packed deltas, 2 varint deltas)
//   offset 2   u8   bit width of the deltas (bit-packed only, else 0)
//   offset 3   u8   0
//   offset 4   u32  n, the element count (must equal the decode length)
//   offset 8   u32  k, the number of elements sent (topk: exactly max(1, ceil(ratio * n)))
//   offset 12  u32  index_bytes, the size of the index section
//   offset 16  k fp32 values, in increasing index order
//   offset 16 + 4k  the index section (sparse_format.h), strictly increasing indices < n
//   size = 16 + 4k + index_bytes, index_bytes = min(4k, ceil(k * width / 8), varint bytes)
//
// randomk format: u32 n, u32 k = max(1, ceil(ratio * n)), then k fp32 values; size 8 + 4k.
//   The indices are not sent: every node derives them from (seed, key, round) (codec_util.h
//   SharedSeed), so the value arrays of all workers add element-wise (summable_encoded).
//   Index j is drawn uniformly from the j-th of k strata that tile [0, n) (stratum sizes
//   floor(n/k) or ceil(n/k), spread evenly), which gives k distinct, increasing indices in one
//   pass; with scale=true each value is multiplied by its stratum size, the inverse of its
//   inclusion probability, which makes the codec unbiased.
//
// adaq format: u8 version 1, u8 positive index encoding, u8 its width, u8 negative index
//   encoding, u8 its width, 3 zero bytes; u32 n, u32 k_pos, u32 k_neg, u32 pos_index_bytes,
//   u32 neg_index_bytes; f32 mean_pos, f32 mean_neg (36-byte header); then the positive and the
//   negative index sections. Decode: mean_pos at the positive indices, mean_neg at the
//   negative ones (the two sets must be disjoint), 0 elsewhere.
//
// Every n == 0 message is a header alone (k = 0).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/params.h"
#include "bytecomp/compress/registry.h"
#include "sparse_format.h"

namespace bytecomp::compress {
namespace {

using sparse::IndexPlan;

constexpr size_t kSparseHeader = 16;
constexpr size_t kRandomkHeader = 8;
constexpr size_t kAdaqHeader = 36;
constexpr uint64_t kRandomkSalt = 0x72616e646f6d6bull;  // "randomk"
constexpr uint64_t kDgcSalt = 0x646763ull;
constexpr uint64_t kAdaqSalt = 0x61646171ull;

size_t KeptCount(double ratio, size_t n) {
  if (n == 0) return 0;
  return std::clamp<size_t>(static_cast<size_t>(std::ceil(ratio * static_cast<double>(n))), 1, n);
}

inline uint32_t AbsBits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b & 0x7fffffffu;
}

absl::Status CheckOut(absl::string_view codec, size_t have, size_t need) {
  if (have >= need) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("codec '", codec, "': output buffer has ", have,
                                                 " bytes, encoding needs up to ", need));
}

absl::Status CheckLength(size_t n) {
  if (n <= 0xffffffffull) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("sparse codecs take at most 2^32-1 elements, got ", n));
}

// Elements sampled for a threshold estimate: 1% of n, at least min(n, 1000); one uniform pick
// in each of s equal strata (cheaper than scattered reads, same expectation).
void SampleAbs(const float* x, size_t n, uint64_t seed, std::vector<uint32_t>& sample) {
  const size_t s = std::min(n, std::max<size_t>(1000, n / 100));
  sample.resize(s);
  if (s == n) {
    for (size_t i = 0; i < n; ++i) sample[i] = AbsBits(x[i]);
    return;
  }
  Rng rng(seed);
  const size_t stride = n / s;
  for (size_t j = 0; j < s; ++j) sample[j] = AbsBits(x[j * stride + rng.Below(stride)]);
}

// The m-th largest (1-based) of values; reorders values.
uint32_t NthLargest(std::vector<uint32_t>& values, size_t m) {
  std::nth_element(values.begin(), values.begin() + (m - 1), values.end(), std::greater<>());
  return values[m - 1];
}

// ---- the common sparse message ----

// Writes header and index section behind values already at out + 16 (k of them).
size_t FinishSparseMessage(uint8_t* out, size_t n, size_t k, const uint32_t* indices) {
  const IndexPlan plan = sparse::PlanIndices(indices, k);
  out[0] = 1;
  out[1] = plan.encoding;
  out[2] = plan.width;
  out[3] = 0;
  PutU32(out + 4, static_cast<uint32_t>(n));
  PutU32(out + 8, static_cast<uint32_t>(k));
  PutU32(out + 12, static_cast<uint32_t>(plan.bytes));
  const size_t written = sparse::WriteIndices(indices, k, plan, out + kSparseHeader + 4 * k);
  return kSparseHeader + 4 * k + written;
}

// Base of topk, threshold and dgc: shared decode, sparse add and size bound.
class SparseCodec : public Codec {
 public:
  CodecProperties properties() const override {
    CodecProperties p;
    p.sparse = true;
    return p;
  }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                      absl::Span<float> output) override {
    if (auto s = Parse(encoded, output.size()); !s.ok()) return s;
    std::fill(output.begin(), output.end(), 0.0f);
    const uint8_t* values = encoded.data() + kSparseHeader;
    for (size_t j = 0; j < indices_.size(); ++j) output[indices_[j]] = GetF32(values + 4 * j);
    return absl::OkStatus();
  }

  // The sparse add: validated fully before the first write.
  absl::Status DecodeAdd(absl::Span<const uint8_t> encoded, const CodecContext&,
                         absl::Span<float> accumulator) override {
    if (auto s = Parse(encoded, accumulator.size()); !s.ok()) return s;
    const uint8_t* values = encoded.data() + kSparseHeader;
    for (size_t j = 0; j < indices_.size(); ++j) accumulator[indices_[j]] += GetF32(values + 4 * j);
    return absl::OkStatus();
  }

 protected:
  // k that the message must carry for n elements, or -1 when any k <= n is valid.
  virtual int64_t RequiredK(size_t n) const { return -1; }

  // Checks the header, sizes, values and indices; leaves the indices in indices_.
  absl::Status Parse(absl::Span<const uint8_t> encoded, size_t n) {
    if (encoded.size() < kSparseHeader) {
      return MalformedError(name(), absl::StrCat(encoded.size(), " bytes, shorter than the header"));
    }
    const uint8_t* p = encoded.data();
    if (p[0] != 1) return MalformedError(name(), absl::StrCat("unknown version ", static_cast<int>(p[0])));
    const uint32_t msg_n = GetU32(p + 4), k = GetU32(p + 8), index_bytes = GetU32(p + 12);
    if (msg_n != n) {
      return MalformedError(name(), absl::StrCat("message holds ", msg_n, " elements, expected ", n));
    }
    if (k > n) return MalformedError(name(), absl::StrCat("k = ", k, " > n = ", n));
    const int64_t required = RequiredK(n);
    if (required >= 0 && k != static_cast<uint64_t>(required)) {
      return MalformedError(name(), absl::StrCat("k = ", k, ", expected ", required));
    }
    if (encoded.size() != kSparseHeader + 4ull * k + index_bytes) {
      return MalformedError(name(), absl::StrCat(encoded.size(), " bytes, header says ",
                                                 kSparseHeader + 4ull * k + index_bytes));
    }
    uint32_t max_bits = 0;
    for (size_t j = 0; j < k; ++j) max_bits = std::max(max_bits, GetU32(p + kSparseHeader + 4 * j) & 0x7fffffffu);
    if (!IsFiniteBits(max_bits)) return MalformedError(name(), "values hold NaN or Inf");
    return sparse::ReadIndices(name(), p + kSparseHeader + 4ull * k, index_bytes, k, n, p[1], p[2],
                               indices_);
  }

  std::vector<uint32_t> indices_;  // decode scratch, and encode's selected indices
};

constexpr size_t kCompactSlack = 16;

// kAbs: compare |x|'s bit pattern (sign cleared); otherwise the raw bit pattern (positive
// values in [0, 0x7f800000), negative ones from 0x80000000 up, ordered by magnitude).
// values may be null (indices only).
template <bool kAbs>
size_t CompactRangeScalar(const float* x, size_t begin, size_t end, uint32_t lo, uint32_t hi,
                          uint8_t* values, uint32_t* indices, uint32_t base = 0) {
  size_t j = 0;
  for (size_t i = begin; i < end; ++i) {
    uint32_t a;
    std::memcpy(&a, x + i, 4);
    if constexpr (kAbs) a &= 0x7fffffffu;
    if (values != nullptr) std::memcpy(values + 4 * j, x + i, 4);
    if (indices != nullptr) indices[j] = base + static_cast<uint32_t>(i);
    j += (a >= lo && a <= hi) ? 1 : 0;
  }
  return j;
}

template <bool kAbs>
__attribute__((target("avx512f"))) size_t CompactRangeAvx512(const float* x, size_t n,
                                                             uint32_t lo, uint32_t hi,
                                                             uint8_t* values, uint32_t* indices,
                                                             uint32_t base) {
  const __m512i abs_mask = _mm512_set1_epi32(kAbs ? 0x7fffffff : -1);
  const __m512i vlo = _mm512_set1_epi32(static_cast<int>(lo));
  const __m512i vhi = _mm512_set1_epi32(static_cast<int>(hi));
  __m512i iota = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(base)),
                                  _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  const __m512i sixteen = _mm512_set1_epi32(16);
  size_t j = 0, i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512i a = _mm512_and_si512(_mm512_castps_si512(v), abs_mask);
    const __mmask16 keep = _mm512_cmpge_epu32_mask(a, vlo) & _mm512_cmple_epu32_mask(a, vhi);
    if (values != nullptr) _mm512_storeu_ps(values + 4 * j, _mm512_maskz_compress_ps(keep, v));
    if (indices != nullptr) _mm512_storeu_si512(indices + j, _mm512_maskz_compress_epi32(keep, iota));
    iota = _mm512_add_epi32(iota, sixteen);
    j += static_cast<size_t>(__builtin_popcount(keep));
  }
  return j + CompactRangeScalar<kAbs>(x, i, n, lo, hi, values != nullptr ? values + 4 * j : nullptr,
                                      indices != nullptr ? indices + j : nullptr, base);
}

// AVX2 has no compress instruction: a table gives, for each 8-lane mask, the kept lanes
// positions packed to the front, and a lane permute applies it.
struct CompressTable {
  alignas(32) uint32_t perm[256][8];
};

const CompressTable& CompressLanes() {
  static const CompressTable table = [] {
    CompressTable t{};
    for (int m = 0; m < 256; ++m) {
      int c = 0;
      for (int b = 0; b < 8; ++b) {
        if ((m >> b) & 1) t.perm[m][c++] = static_cast<uint32_t>(b);
      }
    }
    return t;
  }();
  return table;
}

template <bool kAbs>
__attribute__((target("avx2"))) size_t CompactRangeAvx2(const float* x, size_t n, uint32_t lo,
                                                        uint32_t hi, uint8_t* values,
                                                        uint32_t* indices, uint32_t base) {
  const CompressTable& table = CompressLanes();
  const __m256i abs_mask = _mm256_set1_epi32(kAbs ? 0x7fffffff : -1);
  // lo <= a <= hi (unsigned) is (a - lo) <= (hi - lo) unsigned, a signed compare after
  // flipping the top bit of both sides.
  const __m256i bias = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256i vlo = _mm256_set1_epi32(static_cast<int>(lo));
  const __m256i span = _mm256_set1_epi32(static_cast<int>((hi - lo) ^ 0x80000000u));
  __m256i iota = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(base)),
                                  _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256i eight = _mm256_set1_epi32(8);
  size_t j = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256i a = _mm256_and_si256(_mm256_castps_si256(v), abs_mask);
    const __m256i outside = _mm256_cmpgt_epi32(_mm256_xor_si256(_mm256_sub_epi32(a, vlo), bias), span);
    const int keep = ~_mm256_movemask_ps(_mm256_castsi256_ps(outside)) & 0xff;
    const __m256i perm = _mm256_load_si256(reinterpret_cast<const __m256i*>(table.perm[keep]));
    if (values != nullptr) _mm256_storeu_ps(reinterpret_cast<float*>(values + 4 * j), _mm256_permutevar8x32_ps(v, perm));
    if (indices != nullptr) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(indices + j), _mm256_permutevar8x32_epi32(iota, perm));
    }
    iota = _mm256_add_epi32(iota, eight);
    j += static_cast<size_t>(__builtin_popcount(static_cast<unsigned>(keep)));
  }
  return j + CompactRangeScalar<kAbs>(x, i, n, lo, hi, values != nullptr ? values + 4 * j : nullptr,
                                      indices != nullptr ? indices + j : nullptr, base);
}

// Compaction: for every i with lo <= bits(x[i]) <= hi appends x[i] to values and i (+ base:
// x[0..n) are elements base..base+n of the tensor) to indices; either output may be null.
// With AVX-512 it stores 16 lanes at a time, so both outputs need room for the count plus
// kCompactSlack elements. Returns the count.
template <bool kAbs = true>
size_t CompactRange(const float* x, size_t n, uint32_t lo, uint32_t hi, uint8_t* values,
                    uint32_t* indices, uint32_t base = 0) {
  if (lo > hi) return 0;
  switch (CpuSimdLevel()) {
    case SimdLevel::kAvx512: return CompactRangeAvx512<kAbs>(x, n, lo, hi, values, indices, base);
    case SimdLevel::kAvx2: return CompactRangeAvx2<kAbs>(x, n, lo, hi, values, indices, base);
    case SimdLevel::kScalar: break;
  }
  return CompactRangeScalar<kAbs>(x, 0, n, lo, hi, values, indices, base);
}

// Every |x| >= lo into the message's value area (out + 16) and indices. The value area of a
// 16 + 8n byte buffer holds 2n values, enough for the vector kernel's slack from n >= 16.
size_t Compact(const float* x, size_t n, uint32_t lo, uint8_t* out, uint32_t* indices) {
  uint8_t* values = out + kSparseHeader;
  if (n < kCompactSlack) return CompactRangeScalar<true>(x, 0, n, lo, kNonFiniteAbsBits - 1, values, indices);
  return CompactRange(x, n, lo, kNonFiniteAbsBits - 1, values, indices);
}

// ---- topk ----

// The k largest magnitudes in linear time: a histogram of the top 11 bits of |x| finds the
// bin that holds the k-th largest; nth_element over that bin alone finds the exact threshold;
// one compaction pass keeps every element above it and the first ties at it.
class TopkCodec final : public SparseCodec {
 public:
  explicit TopkCodec(double ratio) : ratio_(ratio) {}
  absl::string_view name() const override { return "topk"; }
  size_t MaxEncodedBytes(size_t n) const override { return kSparseHeader + 8 * KeptCount(ratio_, n); }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext&,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    if (auto s = CheckLength(n); !s.ok()) return s;
    if (auto s = CheckOut(name(), out.size(), MaxEncodedBytes(n)); !s.ok()) return s;
    const size_t k = KeptCount(ratio_, n);
    const float* x = input.data();

    constexpr int kBins = 2048, kShift = 20;
    uint32_t hist[4][kBins] = {};
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {  // four histograms: repeated bins do not serialise
      ++hist[0][AbsBits(x[i]) >> kShift];
      ++hist[1][AbsBits(x[i + 1]) >> kShift];
      ++hist[2][AbsBits(x[i + 2]) >> kShift];
      ++hist[3][AbsBits(x[i + 3]) >> kShift];
    }
    for (; i < n; ++i) ++hist[0][AbsBits(x[i]) >> kShift];
    // NaN and Inf land in the bins from kNonFiniteAbsBits up: the finite check for free.
    for (uint32_t b = kNonFiniteAbsBits >> kShift; b < kBins; ++b) {
      if (hist[0][b] + hist[1][b] + hist[2][b] + hist[3][b] != 0) {
        return NonFiniteError(input, "codec 'topk' input");
      }
    }

    uint32_t threshold = 0;
    size_t ties = 0;
    bool all_ties = false;
    if (k > 0) {
      size_t above = 0;
      int bin = kBins - 1;
      for (; bin > 0; --bin) {
        const size_t count = hist[0][bin] + hist[1][bin] + hist[2][bin] + hist[3][bin];
        if (above + count >= k) break;
        above += count;
      }
      const size_t bin_count = hist[0][bin] + hist[1][bin] + hist[2][bin] + hist[3][bin];
      candidates_.resize(bin_count + kCompactSlack);
      const uint32_t bin_lo = static_cast<uint32_t>(bin) << kShift;
      const size_t c = CompactRange(x, n, bin_lo, bin_lo + ((1u << kShift) - 1),
                                    reinterpret_cast<uint8_t*>(candidates_.data()), nullptr);
      candidates_.resize(c);
      for (auto& a : candidates_) a &= 0x7fffffffu;  // stored as the values' bits
      const size_t need = k - above;  // 1 <= need <= c
      threshold = NthLargest(candidates_, need);
      size_t greater = 0, equal = 0;
      for (uint32_t a : candidates_) {
        greater += a > threshold ? 1 : 0;
        equal += a == threshold ? 1 : 0;
      }
      ties = need - greater;
      all_ties = ties == equal;
    }

    uint8_t* values = out.data() + kSparseHeader;
    size_t j = 0;
    if (all_ties && k >= kCompactSlack) {
      // Every element at the threshold is kept: exactly k elements have |x| >= threshold, and
      // the value area (room for 2k values before the index section) takes the slack.
      indices_.resize(k + kCompactSlack);
      j = CompactRange(x, n, threshold, kNonFiniteAbsBits - 1, values, indices_.data());
    } else if (k >= kCompactSlack) {
      // Some elements equal to the threshold are dropped: keep the first `ties` of them. The
      // elements above it are compacted in one pass; the ties are found block by block until
      // enough are seen; a backward merge puts both in index order in place.
      indices_.resize(k + kCompactSlack);
      const size_t greater = CompactRange(x, n, threshold + 1, kNonFiniteAbsBits - 1, values,
                                          indices_.data());
      constexpr size_t kBlock = 4096;
      ties_.resize(ties + kBlock + kCompactSlack);
      tie_values_.resize(kBlock + kCompactSlack);
      size_t t = 0;
      for (size_t start = 0; start < n && t < ties; start += kBlock) {
        t += CompactRange(x + start, std::min(kBlock, n - start), threshold, threshold,
                          reinterpret_cast<uint8_t*>(tie_values_.data()), ties_.data() + t,
                          static_cast<uint32_t>(start));
      }
      if (greater + ties != k || t < ties) {
        return absl::InternalError(absl::StrCat("topk: ", greater, " above the threshold, ", t,
                                                " ties seen, ", ties, " needed, k = ", k));
      }
      int64_t g = static_cast<int64_t>(greater) - 1, tt = static_cast<int64_t>(ties) - 1;
      for (int64_t w = static_cast<int64_t>(k) - 1; tt >= 0; --w) {
        if (g >= 0 && indices_[g] > ties_[tt]) {
          indices_[w] = indices_[g];
          std::memcpy(values + 4 * w, values + 4 * g, 4);
          --g;
        } else {
          indices_[w] = ties_[tt];
          std::memcpy(values + 4 * w, x + ties_[tt], 4);
          --tt;
        }
      }
      j = k;
    } else {
      // k below the vector kernel's slack: one scalar pass keeping the first ties.
      indices_.resize(k + 1);
      uint32_t* idx = indices_.data();
      for (size_t e = 0; e < n && k > 0; ++e) {
        const uint32_t a = AbsBits(x[e]);
        const bool tie = a == threshold && ties > 0;
        const bool keep = a > threshold || tie;
        std::memcpy(values + 4 * j, x + e, 4);
        idx[j] = static_cast<uint32_t>(e);
        j += keep ? 1 : 0;
        ties -= tie ? 1 : 0;
      }
    }
    if (j != k) return absl::InternalError(absl::StrCat("topk selected ", j, " of ", k));
    const uint32_t* idx = indices_.data();
    return FinishSparseMessage(out.data(), n, k, idx);
  }

 protected:
  int64_t RequiredK(size_t n) const override { return static_cast<int64_t>(KeptCount(ratio_, n)); }

 private:
  double ratio_;
  std::vector<uint32_t> candidates_, ties_;
  std::vector<float> tie_values_;
};

// ---- threshold ----

class ThresholdCodec final : public SparseCodec {
 public:
  explicit ThresholdCodec(double threshold) : threshold_bits_(AbsBits(static_cast<float>(threshold))) {}
  absl::string_view name() const override { return "threshold"; }
  size_t MaxEncodedBytes(size_t n) const override { return kSparseHeader + 8 * n; }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext&,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    if (auto s = CheckLength(n); !s.ok()) return s;
    if (auto s = CheckOut(name(), out.size(), MaxEncodedBytes(n)); !s.ok()) return s;
    if (auto s = CheckFinite(input, "codec 'threshold' input"); !s.ok()) return s;
    // |x| > threshold, compared as bit patterns (monotonic for non-negative floats).
    if (threshold_bits_ >= kNonFiniteAbsBits - 1) return FinishSparseMessage(out.data(), n, 0, nullptr);
    indices_.resize(n + kCompactSlack);
    const size_t k = Compact(input.data(), n, threshold_bits_ + 1, out.data(), indices_.data());
    return FinishSparseMessage(out.data(), n, k, indices_.data());
  }

 private:
  uint32_t threshold_bits_;
};

// ---- dgc ----

__attribute__((target_clones("avx2", "default"))) size_t CountAtLeast(const float* x, size_t n,
                                                                       int32_t threshold_bits) {
  size_t count = 0;
  for (size_t i = 0; i < n; ++i) {
    int32_t b;
    std::memcpy(&b, x + i, 4);
    count += (b & 0x7fffffff) >= threshold_bits ? 1 : 0;
  }
  return count;
}

// GRACE's DGC (its momentum correction is the dgc_momentum memory): the threshold is the (ratio * sample)-th largest magnitude of a 1% sample;
// while the kept count is above 1.3 k or below 0.7 k (k = ratio * n) the threshold is scaled
// by 1.3 or 0.7, at most 10 times; then every |x| >= threshold is sent.
class DgcCodec final : public SparseCodec {
 public:
  explicit DgcCodec(double ratio) : ratio_(ratio) {}
  absl::string_view name() const override { return "dgc"; }
  size_t MaxEncodedBytes(size_t n) const override { return kSparseHeader + 8 * n; }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext& ctx,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    if (auto s = CheckLength(n); !s.ok()) return s;
    if (auto s = CheckOut(name(), out.size(), MaxEncodedBytes(n)); !s.ok()) return s;
    if (auto s = CheckFinite(input, "codec 'dgc' input"); !s.ok()) return s;
    if (n == 0) return FinishSparseMessage(out.data(), 0, 0, nullptr);
    const float* x = input.data();
    SampleAbs(x, n, NodeSeed(ctx, kDgcSalt), sample_);
    float threshold = BitsToFloatValue(NthLargest(sample_, KeptCount(ratio_, sample_.size())));
    // Zeros are never worth sending: the threshold is at least the smallest positive float.
    const float kMinPositive = std::numeric_limits<float>::denorm_min();
    threshold = std::max(threshold, kMinPositive);
    const double target = ratio_ * static_cast<double>(n);
    size_t count = CountAtLeast(x, n, static_cast<int32_t>(AbsBits(threshold)));
    for (int step = 0; step < 10; ++step) {
      if (count > 1.3 * target) {
        threshold *= 1.3f;
      } else if (count < 0.7 * target) {
        threshold = std::max(threshold * 0.7f, kMinPositive);
      } else {
        break;
      }
      count = CountAtLeast(x, n, static_cast<int32_t>(AbsBits(threshold)));
    }
    indices_.resize(count + kCompactSlack);
    const size_t k = Compact(x, n, AbsBits(threshold), out.data(), indices_.data());
    return FinishSparseMessage(out.data(), n, k, indices_.data());
  }

 private:
  static float BitsToFloatValue(uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  }
  double ratio_;
  std::vector<uint32_t> sample_;
};

// ---- adaq ----

// AdaComp style: per sign, a threshold from a sample (the ratio-th top fraction of the sampled
// positive values, and of the negative ones); the message carries the indices of the kept
// positive and negative elements and one mean per sign.
class AdaqCodec final : public Codec {
 public:
  explicit AdaqCodec(double ratio) : ratio_(ratio) {}
  absl::string_view name() const override { return "adaq"; }
  CodecProperties properties() const override {
    CodecProperties p;
    p.sparse = true;
    return p;
  }
  size_t MaxEncodedBytes(size_t n) const override { return kAdaqHeader + 4 * n; }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext& ctx,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    if (auto s = CheckLength(n); !s.ok()) return s;
    if (auto s = CheckOut(name(), out.size(), MaxEncodedBytes(n)); !s.ok()) return s;
    if (auto s = CheckFinite(input, "codec 'adaq' input"); !s.ok()) return s;
    const float* x = input.data();
    // Thresholds per sign, as bit patterns of the magnitude; UINT32_MAX keeps nothing.
    uint32_t pos_t = 0xffffffffu, neg_t = 0xffffffffu;
    if (n > 0) {
      SampleSigned(x, n, NodeSeed(ctx, kAdaqSalt));
      if (!pos_sample_.empty()) pos_t = NthLargest(pos_sample_, KeptCount(ratio_, pos_sample_.size()));
      if (!neg_sample_.empty()) neg_t = NthLargest(neg_sample_, KeptCount(ratio_, neg_sample_.size()));
    }
    // Thresholds compared on the raw bit pattern: a positive x has bits in [pos_t, max finite];
    // a negative one has bits 0x80000000 | |x|, so |x| >= neg_t is bits >= 0x80000000 | neg_t.
    size_t kp = 0, kn = 0;
    pos_.resize(n + kCompactSlack);
    neg_.resize(n + kCompactSlack);
    if (pos_t != 0xffffffffu) kp = CompactRange<false>(x, n, pos_t, kNonFiniteAbsBits - 1, nullptr, pos_.data());
    if (neg_t != 0xffffffffu) {
      kn = CompactRange<false>(x, n, 0x80000000u | neg_t, 0x80000000u | (kNonFiniteAbsBits - 1),
                               nullptr, neg_.data());
    }
    const float mean_p = kp ? static_cast<float>(SumAt(x, pos_.data(), kp) / kp) : 0.0f;
    const float mean_n = kn ? static_cast<float>(SumAt(x, neg_.data(), kn) / kn) : 0.0f;
    const IndexPlan plan_p = sparse::PlanIndices(pos_.data(), kp);
    const IndexPlan plan_n = sparse::PlanIndices(neg_.data(), kn);
    uint8_t* p = out.data();
    std::memset(p, 0, kAdaqHeader);
    p[0] = 1;
    p[1] = plan_p.encoding;
    p[2] = plan_p.width;
    p[3] = plan_n.encoding;
    p[4] = plan_n.width;
    PutU32(p + 8, static_cast<uint32_t>(n));
    PutU32(p + 12, static_cast<uint32_t>(kp));
    PutU32(p + 16, static_cast<uint32_t>(kn));
    PutU32(p + 20, static_cast<uint32_t>(plan_p.bytes));
    PutU32(p + 24, static_cast<uint32_t>(plan_n.bytes));
    PutF32(p + 28, mean_p);
    PutF32(p + 32, mean_n);
    size_t size = kAdaqHeader;
    size += sparse::WriteIndices(pos_.data(), kp, plan_p, p + size);
    size += sparse::WriteIndices(neg_.data(), kn, plan_n, p + size);
    return size;
  }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                      absl::Span<float> output) override {
    float mean_p, mean_n;
    if (auto s = Parse(encoded, output.size(), &mean_p, &mean_n); !s.ok()) return s;
    std::fill(output.begin(), output.end(), 0.0f);
    for (uint32_t i : pos_) output[i] = mean_p;
    for (uint32_t i : neg_) output[i] = mean_n;
    return absl::OkStatus();
  }

  absl::Status DecodeAdd(absl::Span<const uint8_t> encoded, const CodecContext&,
                         absl::Span<float> accumulator) override {
    float mean_p, mean_n;
    if (auto s = Parse(encoded, accumulator.size(), &mean_p, &mean_n); !s.ok()) return s;
    for (uint32_t i : pos_) accumulator[i] += mean_p;
    for (uint32_t i : neg_) accumulator[i] += mean_n;
    return absl::OkStatus();
  }

 private:
  // Sum of x at the indices, in double with four accumulators (no long dependency chain).
  static double SumAt(const float* x, const uint32_t* idx, size_t k) {
    double s[4] = {0, 0, 0, 0};
    size_t j = 0;
    for (; j + 4 <= k; j += 4) {
      for (int l = 0; l < 4; ++l) s[l] += x[idx[j + l]];
    }
    for (; j < k; ++j) s[0] += x[idx[j]];
    return (s[0] + s[1]) + (s[2] + s[3]);
  }

  // The same sample as SampleAbs, split by sign.
  void SampleSigned(const float* x, size_t n, uint64_t seed) {
    pos_sample_.clear();
    neg_sample_.clear();
    const size_t s = std::min(n, std::max<size_t>(1000, n / 100));
    Rng rng(seed);
    const size_t stride = n / s;
    for (size_t j = 0; j < s; ++j) {
      const float v = s == n ? x[j] : x[j * stride + rng.Below(stride)];
      if (v > 0) pos_sample_.push_back(AbsBits(v));
      if (v < 0) neg_sample_.push_back(AbsBits(v));
    }
  }

  absl::Status Parse(absl::Span<const uint8_t> encoded, size_t n, float* mean_p, float* mean_n) {
    if (encoded.size() < kAdaqHeader) {
      return MalformedError(name(), absl::StrCat(encoded.size(), " bytes, shorter than the header"));
    }
    const uint8_t* p = encoded.data();
    if (p[0] != 1) return MalformedError(name(), absl::StrCat("unknown version ", static_cast<int>(p[0])));
    const uint32_t msg_n = GetU32(p + 8), kp = GetU32(p + 12), kn = GetU32(p + 16);
    const uint32_t bytes_p = GetU32(p + 20), bytes_n = GetU32(p + 24);
    if (msg_n != n) {
      return MalformedError(name(), absl::StrCat("message holds ", msg_n, " elements, expected ", n));
    }
    if (static_cast<uint64_t>(kp) + kn > n) {
      return MalformedError(name(), absl::StrCat("k_pos + k_neg = ", uint64_t{kp} + kn, " > n = ", n));
    }
    if (encoded.size() != kAdaqHeader + uint64_t{bytes_p} + bytes_n) {
      return MalformedError(name(), absl::StrCat(encoded.size(), " bytes, header says ",
                                                 kAdaqHeader + uint64_t{bytes_p} + bytes_n));
    }
    *mean_p = GetF32(p + 28);
    *mean_n = GetF32(p + 32);
    if (!std::isfinite(*mean_p) || !std::isfinite(*mean_n)) {
      return MalformedError(name(), "means are NaN or Inf");
    }
    if (auto s = sparse::ReadIndices(name(), p + kAdaqHeader, bytes_p, kp, n, p[1], p[2], pos_);
        !s.ok()) {
      return s;
    }
    if (auto s = sparse::ReadIndices(name(), p + kAdaqHeader + bytes_p, bytes_n, kn, n, p[3], p[4],
                                     neg_);
        !s.ok()) {
      return s;
    }
    // Disjoint sets, checked by a merge of the two sorted lists.
    size_t a = 0, b = 0;
    while (a < pos_.size() && b < neg_.size()) {
      if (pos_[a] == neg_[b]) {
        return MalformedError(name(), absl::StrCat("index ", pos_[a], " is both positive and negative"));
      }
      if (pos_[a] < neg_[b]) {
        ++a;
      } else {
        ++b;
      }
    }
    return absl::OkStatus();
  }

  double ratio_;
  std::vector<uint32_t> pos_sample_, neg_sample_;
  std::vector<uint32_t> pos_, neg_;
};

// ---- randomk ----

// Calls f(j, index, stratum_start, stratum_size) for the k shared random indices, in
// increasing order. Strata tile [0, n) contiguously. One 64-bit draw serves two strata (32
// random bits each, Lemire's multiply-shift).
template <typename F>
inline void ForEachRandomIndex(size_t n, size_t k, uint64_t seed, F f) {
  if (k == 0) return;
  Rng rng(seed);
  const size_t q = n / k, r = n % k;
  size_t start = 0, err = 0;
  uint64_t bits = 0;
  for (size_t j = 0; j < k; ++j) {
    err += r;
    const bool longer = err >= k;  // Bresenham: the r longer strata spread evenly
    err -= longer ? k : 0;
    const uint32_t size = static_cast<uint32_t>(q + (longer ? 1 : 0));
    if ((j & 1) == 0) bits = rng.Next();
    const uint64_t draw = (j & 1) == 0 ? bits >> 32 : bits & 0xffffffffull;
    f(j, start + static_cast<size_t>((draw * size) >> 32), start, size);
    start += size;
  }
}

class RandomkCodec final : public Codec {
 public:
  RandomkCodec(double ratio, bool scale) : ratio_(ratio), scale_(scale) {}
  absl::string_view name() const override { return "randomk"; }
  CodecProperties properties() const override {
    CodecProperties p;
    p.summable_encoded = true;
    p.sparse = true;
    p.unbiased = scale_;
    return p;
  }
  size_t MaxEncodedBytes(size_t n) const override { return kRandomkHeader + 4 * KeptCount(ratio_, n); }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext& ctx,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    if (auto s = CheckLength(n); !s.ok()) return s;
    if (auto s = CheckOut(name(), out.size(), MaxEncodedBytes(n)); !s.ok()) return s;
    const size_t k = KeptCount(ratio_, n);
    PutU32(out.data(), static_cast<uint32_t>(n));
    PutU32(out.data() + 4, static_cast<uint32_t>(k));
    uint8_t* values = out.data() + kRandomkHeader;
    const float* x = input.data();
    // The finite check runs block by block just ahead of the gather, so the input is read from
    // memory once (the gather then hits the cache).
    constexpr size_t kBlock = 4096;
    uint32_t max_bits = 0, scaled_bits = 0;
    size_t checked = 0;
    auto check_through = [&](size_t end) {
      while (checked < end) {
        const size_t len = std::min(kBlock, n - checked);
        max_bits = std::max(max_bits, MaxAbsBits(x + checked, len));
        checked += len;
      }
    };
    if (scale_) {
      ForEachRandomIndex(n, k, SharedSeed(ctx, kRandomkSalt),
                         [&](size_t j, size_t i, size_t start, uint32_t size) {
                           if (start + size > checked) check_through(start + size);
                           const float v = x[i] * static_cast<float>(size);
                           scaled_bits = std::max(scaled_bits, AbsBits(v));
                           PutF32(values + 4 * j, v);
                         });
    } else {
      ForEachRandomIndex(n, k, SharedSeed(ctx, kRandomkSalt),
                         [&](size_t j, size_t i, size_t start, uint32_t size) {
                           if (start + size > checked) check_through(start + size);
                           PutF32(values + 4 * j, x[i]);
                         });
    }
    check_through(n);
    if (!IsFiniteBits(max_bits)) return NonFiniteError(input, "codec 'randomk' input");
    if (!IsFiniteBits(scaled_bits)) {
      return absl::InvalidArgumentError(
          "codec 'randomk': a value times its scale n/k overflows fp32 (|x| near 3.4e38)");
    }
    return kRandomkHeader + 4 * k;
  }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext& ctx,
                      absl::Span<float> output) override {
    if (auto s = Validate(encoded, output.size()); !s.ok()) return s;
    const uint8_t* values = encoded.data() + kRandomkHeader;
    Scatter(ctx, output, [values](size_t j) { return GetF32(values + 4 * j); });
    return absl::OkStatus();
  }

  absl::Status DecodeAdd(absl::Span<const uint8_t> encoded, const CodecContext& ctx,
                         absl::Span<float> accumulator) override {
    if (auto s = Validate(encoded, accumulator.size()); !s.ok()) return s;
    const uint8_t* values = encoded.data() + kRandomkHeader;
    ForEachRandomIndex(accumulator.size(), KeptCount(ratio_, accumulator.size()),
                       SharedSeed(ctx, kRandomkSalt),
                       [&](size_t j, size_t i, size_t, uint32_t) {
                         accumulator[i] += GetF32(values + 4 * j);
                       });
    return absl::OkStatus();
  }

  size_t SummedLength(size_t n, const CodecContext&) const override { return KeptCount(ratio_, n); }

  absl::Status AddEncodedValues(absl::Span<const uint8_t> encoded, const CodecContext&, size_t n,
                                absl::Span<float> sum) override {
    if (auto s = Validate(encoded, n); !s.ok()) return s;
    const size_t k = KeptCount(ratio_, n);
    if (sum.size() != k) {
      return absl::InvalidArgumentError(absl::StrCat("codec 'randomk': sum has ", sum.size(),
                                                     " values, expected ", k));
    }
    const uint8_t* values = encoded.data() + kRandomkHeader;
    for (size_t j = 0; j < k; ++j) sum[j] += GetF32(values + 4 * j);
    return absl::OkStatus();
  }

  absl::Status ExpandSum(absl::Span<const float> sum, const CodecContext& ctx,
                         absl::Span<float> output) override {
    const size_t n = output.size(), k = KeptCount(ratio_, n);
    if (sum.size() != k) {
      return absl::InvalidArgumentError(absl::StrCat("codec 'randomk': sum has ", sum.size(),
                                                     " values, expected ", k));
    }
    Scatter(ctx, output, [&sum](size_t j) { return sum[j]; });
    return absl::OkStatus();
  }

 private:
  // output = value(j) at the j-th shared index, zeros elsewhere. Zeroing runs a block ahead of
  // the scatter (every pick lies below its stratum's end), so the output is written in one
  // sweep that stays in the cache.
  template <typename Value>
  void Scatter(const CodecContext& ctx, absl::Span<float> output, Value value) {
    const size_t n = output.size();
    float* o = output.data();
    constexpr size_t kBlock = 4096;
    size_t zeroed = 0;
    ForEachRandomIndex(n, KeptCount(ratio_, n), SharedSeed(ctx, kRandomkSalt),
                       [&](size_t j, size_t i, size_t start, uint32_t size) {
                         while (zeroed < start + size) {
                           const size_t len = std::min(kBlock, n - zeroed);
                           std::memset(o + zeroed, 0, 4 * len);
                           zeroed += len;
                         }
                         o[i] = value(j);
                       });
    if (zeroed < n) std::memset(o + zeroed, 0, 4 * (n - zeroed));
  }

  absl::Status Validate(absl::Span<const uint8_t> encoded, size_t n) {
    if (encoded.size() < kRandomkHeader) {
      return MalformedError(name(), absl::StrCat(encoded.size(), " bytes, shorter than the header"));
    }
    const uint32_t msg_n = GetU32(encoded.data()), k = GetU32(encoded.data() + 4);
    const size_t expected_k = KeptCount(ratio_, n);
    if (msg_n != n || k != expected_k) {
      return MalformedError(name(), absl::StrCat("header says n = ", msg_n, ", k = ", k,
                                                 "; expected n = ", n, ", k = ", expected_k));
    }
    if (encoded.size() != kRandomkHeader + 4ull * k) {
      return MalformedError(name(), absl::StrCat(encoded.size(), " bytes, expected ",
                                                 kRandomkHeader + 4ull * k));
    }
    uint32_t max_bits = 0;
    for (size_t j = 0; j < k; ++j) {
      max_bits = std::max(max_bits, GetU32(encoded.data() + kRandomkHeader + 4 * j) & 0x7fffffffu);
    }
    if (!IsFiniteBits(max_bits)) return MalformedError(name(), "values hold NaN or Inf");
    return absl::OkStatus();
  }

  double ratio_;
  bool scale_;
};

CodecParamSpec RatioParam() {
  return {.name = "ratio", .type = CodecParamSpec::Type::kDouble, .default_value = "0.3",
          .help = "fraction of elements kept", .min_value = 0, .max_value = 1,
          .min_exclusive = true};
}

template <typename Make>
CodecSpec RatioSpec(const char* name, const char* summary, Make make) {
  return {.name = name,
          .summary = summary,
          .params = {RatioParam()},
          .factory = [make](const CodecParams& params) -> absl::StatusOr<std::unique_ptr<Codec>> {
            ParamReader r(params);
            const double ratio = r.Double("ratio");
            if (!r.ok()) return r.status();
            return make(ratio);
          }};
}

}  // namespace

void RegisterSparsificationCodecs(CodecRegistry& registry) {
  MustRegister(registry, RatioSpec("topk", "values and indices of the k = ceil(ratio * n) largest magnitudes",
                                   [](double r) -> std::unique_ptr<Codec> { return std::make_unique<TopkCodec>(r); }));
  MustRegister(
      registry,
      {.name = "randomk",
       .summary = "k = ceil(ratio * n) values at indices every worker derives from (seed, key, round)",
       .params = {RatioParam(),
                  {.name = "scale", .type = CodecParamSpec::Type::kBool, .default_value = "false",
                   .help = "multiply values by n/k (the stratum size), which makes randomk unbiased"}},
       .factory = [](const CodecParams& params) -> absl::StatusOr<std::unique_ptr<Codec>> {
         ParamReader r(params);
         const double ratio = r.Double("ratio");
         const bool scale = r.Bool("scale");
         if (!r.ok()) return r.status();
         return std::make_unique<RandomkCodec>(ratio, scale);
       }});
  MustRegister(
      registry,
      {.name = "threshold",
       .summary = "values and indices of every element with magnitude above the threshold",
       .params = {{.name = "threshold", .type = CodecParamSpec::Type::kDouble,
                   .default_value = "0.01", .help = "magnitudes strictly above it are sent",
                   .min_value = 0}},
       .factory = [](const CodecParams& params) -> absl::StatusOr<std::unique_ptr<Codec>> {
         ParamReader r(params);
         const double threshold = r.Double("threshold");
         if (!r.ok()) return r.status();
         return std::make_unique<ThresholdCodec>(threshold);
       }});
  MustRegister(registry, RatioSpec("dgc", "top-k by a threshold estimated from a 1% sample, count within 0.7-1.3 k",
                                   [](double r) -> std::unique_ptr<Codec> { return std::make_unique<DgcCodec>(r); }));
  MustRegister(registry, RatioSpec("adaq", "AdaComp style: per-sign sampled thresholds, indices and one mean per sign",
                                   [](double r) -> std::unique_ptr<Codec> { return std::make_unique<AdaqCodec>(r); }));
}

}  // namespace bytecomp::compress
