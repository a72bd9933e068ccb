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
    if (p[0] != 1) return MalformedError(name(), absl::StrCat("unknown version ", p[0]));
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

// Writes x[i] for every i with keep(|x[i]| bits) into out values (at out + 16) and indices_,
// branch-free; returns the count. out must have room for n + 1 values past the header.
template <typename Keep>
size_t Compact(const float* x, size_t n, Keep keep, uint8_t* values, uint32_t* indices) {
  size_t j = 0;
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(values + 4 * j, x + i, 4);
    indices[j] = static_cast<uint32_t>(i);
    j += keep(AbsBits(x[i])) ? 1 : 0;
  }
  return j;
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
    uint32_t max_bits = 0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {  // four histograms: repeated bins do not serialise
      const uint32_t a0 = AbsBits(x[i]), a1 = AbsBits(x[i + 1]), a2 = AbsBits(x[i + 2]),
                     a3 = AbsBits(x[i + 3]);
      ++hist[0][a0 >> kShift];
      ++hist[1][a1 >> kShift];
      ++hist[2][a2 >> kShift];
      ++hist[3][a3 >> kShift];
      max_bits = std::max({max_bits, a0, a1, a2, a3});
    }
    for (; i < n; ++i) {
      const uint32_t a = AbsBits(x[i]);
      ++hist[0][a >> kShift];
      max_bits = std::max(max_bits, a);
    }
    if (!IsFiniteBits(max_bits)) return NonFiniteError(input, "codec 'topk' input");

    uint32_t threshold = 0;
    size_t ties = 0;
    if (k > 0) {
      size_t above = 0;
      int bin = kBins - 1;
      for (; bin > 0; --bin) {
        const size_t count = hist[0][bin] + hist[1][bin] + hist[2][bin] + hist[3][bin];
        if (above + count >= k) break;
        above += count;
      }
      const size_t bin_count = hist[0][bin] + hist[1][bin] + hist[2][bin] + hist[3][bin];
      candidates_.resize(bin_count + 1);
      size_t c = 0;
      for (size_t e = 0; e < n; ++e) {
        const uint32_t a = AbsBits(x[e]);
        candidates_[c] = a;
        c += (a >> kShift) == static_cast<uint32_t>(bin) ? 1 : 0;
      }
      candidates_.resize(c);
      const size_t need = k - above;  // 1 <= need <= c
      threshold = NthLargest(candidates_, need);
      size_t greater = 0;
      for (uint32_t a : candidates_) greater += a > threshold ? 1 : 0;
      ties = need - greater;
    }

    indices_.resize(k + 1);
    uint8_t* values = out.data() + kSparseHeader;
    uint32_t* idx = indices_.data();
    size_t j = 0;
    for (size_t e = 0; e < n && k > 0; ++e) {
      const uint32_t a = AbsBits(x[e]);
      const bool tie = a == threshold && ties > 0;
      const bool keep = a > threshold || tie;
      std::memcpy(values + 4 * j, x + e, 4);
      idx[j] = static_cast<uint32_t>(e);
      j += keep ? 1 : 0;
      ties -= tie ? 1 : 0;
    }
    if (j != k) return absl::InternalError(absl::StrCat("topk selected ", j, " of ", k));
    return FinishSparseMessage(out.data(), n, k, idx);
  }

 protected:
  int64_t RequiredK(size_t n) const override { return static_cast<int64_t>(KeptCount(ratio_, n)); }

 private:
  double ratio_;
  std::vector<uint32_t> candidates_;
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
    indices_.resize(n + 1);
    // |x| > threshold, compared as bit patterns (monotonic for non-negative floats).
    const uint32_t t = threshold_bits_;
    const size_t k = Compact(input.data(), n, [t](uint32_t a) { return a > t; },
                             out.data() + kSparseHeader, indices_.data());
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

// GRACE's DGC: the threshold is the (ratio * sample)-th largest magnitude of a 1% sample;
// while the kept count is above 1.3 k or below 0.7 k (k = ratio * n) the threshold is scaled
// by 1.3 or 0.7, at most 10 times; then every |x| >= threshold is sent.
class DgcCodec final : public SparseCodec {
 public:
  explicit DgcCodec(double ratio) : ratio_(ratio) {}
  absl::string_view name() const override { return "dgc"; }
  size_t MaxEncodedBytes(size_t n) const override { return kSparseHeader + 8 * n; }
  CodecProperties properties() const override {
    CodecProperties p = SparseCodec::properties();
    p.stateful = false;  // momentum correction lives in the dgc_momentum memory
    return p;
  }

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
    indices_.resize(count + 1);
    const uint32_t t = AbsBits(threshold);
    const size_t k = Compact(x, n, [t](uint32_t a) { return a >= t; }, out.data() + kSparseHeader,
                             indices_.data());
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
    pos_.resize(n + 1);
    neg_.resize(n + 1);
    size_t kp = 0, kn = 0;
    double sum_p = 0, sum_n = 0;
    for (size_t i = 0; i < n; ++i) {
      uint32_t b;
      std::memcpy(&b, x + i, 4);
      const uint32_t a = b & 0x7fffffffu;
      const bool negative = (b >> 31) != 0;
      const bool keep_p = !negative && a != 0 && a >= pos_t;
      const bool keep_n = negative && a != 0 && a >= neg_t;
      pos_[kp] = static_cast<uint32_t>(i);
      neg_[kn] = static_cast<uint32_t>(i);
      kp += keep_p ? 1 : 0;
      kn += keep_n ? 1 : 0;
      sum_p += keep_p ? x[i] : 0.0;
      sum_n += keep_n ? x[i] : 0.0;
    }
    const float mean_p = kp ? static_cast<float>(sum_p / kp) : 0.0f;
    const float mean_n = kn ? static_cast<float>(sum_n / kn) : 0.0f;
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
    if (p[0] != 1) return MalformedError(name(), absl::StrCat("unknown version ", p[0]));
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

// Calls f(j, index, stratum_size) for the k shared random indices, in increasing order.
template <typename F>
inline void ForEachRandomIndex(size_t n, size_t k, uint64_t seed, F f) {
  if (k == 0) return;
  Rng rng(seed);
  const size_t q = n / k, r = n % k;
  size_t start = 0, err = 0;
  for (size_t j = 0; j < k; ++j) {
    err += r;
    const bool longer = err >= k;  // Bresenham: the r longer strata spread evenly
    err -= longer ? k : 0;
    const uint32_t size = static_cast<uint32_t>(q + (longer ? 1 : 0));
    f(j, start + rng.Below(size), size);
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
    if (auto s = CheckFinite(input, "codec 'randomk' input"); !s.ok()) return s;
    const size_t k = KeptCount(ratio_, n);
    PutU32(out.data(), static_cast<uint32_t>(n));
    PutU32(out.data() + 4, static_cast<uint32_t>(k));
    uint8_t* values = out.data() + kRandomkHeader;
    const float* x = input.data();
    if (scale_) {
      uint32_t max_bits = 0;
      ForEachRandomIndex(n, k, SharedSeed(ctx, kRandomkSalt), [&](size_t j, size_t i, uint32_t size) {
        const float v = x[i] * static_cast<float>(size);
        max_bits = std::max(max_bits, AbsBits(v));
        PutF32(values + 4 * j, v);
      });
      if (!IsFiniteBits(max_bits)) {
        return absl::InvalidArgumentError(
            "codec 'randomk': a value times its scale n/k overflows fp32 (|x| near 3.4e38)");
      }
    } else {
      ForEachRandomIndex(n, k, SharedSeed(ctx, kRandomkSalt),
                         [&](size_t j, size_t i, uint32_t) { PutF32(values + 4 * j, x[i]); });
    }
    return kRandomkHeader + 4 * k;
  }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext& ctx,
                      absl::Span<float> output) override {
    if (auto s = Validate(encoded, output.size()); !s.ok()) return s;
    std::fill(output.begin(), output.end(), 0.0f);
    const uint8_t* values = encoded.data() + kRandomkHeader;
    ForEachRandomIndex(output.size(), KeptCount(ratio_, output.size()), SharedSeed(ctx, kRandomkSalt),
                       [&](size_t j, size_t i, uint32_t) { output[i] = GetF32(values + 4 * j); });
    return absl::OkStatus();
  }

  absl::Status DecodeAdd(absl::Span<const uint8_t> encoded, const CodecContext& ctx,
                         absl::Span<float> accumulator) override {
    if (auto s = Validate(encoded, accumulator.size()); !s.ok()) return s;
    const uint8_t* values = encoded.data() + kRandomkHeader;
    ForEachRandomIndex(accumulator.size(), KeptCount(ratio_, accumulator.size()),
                       SharedSeed(ctx, kRandomkSalt),
                       [&](size_t j, size_t i, uint32_t) { accumulator[i] += GetF32(values + 4 * j); });
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
    std::fill(output.begin(), output.end(), 0.0f);
    ForEachRandomIndex(n, k, SharedSeed(ctx, kRandomkSalt),
                       [&](size_t j, size_t i, uint32_t) { output[i] = sum[j]; });
    return absl::OkStatus();
  }

 private:
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
