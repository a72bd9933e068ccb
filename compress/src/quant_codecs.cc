// The scalar quantisation codecs: qsgd, terngrad, natural, u8bit, dithering.
//
// Wire formats (little-endian; the element count n travels in the data-plane header; packed
// codes are an LSB-first bit stream, code i in bits [i*b, (i+1)*b), padding bits 0):
// qsgd, terngrad and dithering start with u32 n, the element count, which Decode checks
// against the output length (a padded code stream alone cannot tell n from n - 1).
//   qsgd       u32 n, ceil(n/bucket) f32 bucket L2 norms, then n codes of b = L + 1 bits,
//              L = ceil(log2(quantum_num + 1)) level bits below a sign bit (1 = negative).
//              Decoded: sign * (level / quantum_num) * norm. Size: 4 + 4*ceil(n/bucket) +
//              ceil(n*b/8); with the defaults (127, 128): 4 + 4*ceil(n/128) + n.
//   terngrad   u32 n, f32 scale, then n 2-bit codes, 4 per byte (0 = 0, 1 = +scale,
//              2 = -scale, 3 invalid). Size: 8 + ceil(n/4).
//   natural    u8 exponent_low (1..254), then n bytes: bit 7 sign, bits 0-6 code c, 0 = zero,
//              c >= 1: 2^(exponent_low + c - 1 - 127) (elementwise.h). Size: 1 + n.
//   u8bit      f32 max |x|, then n bytes of Dettmers' dynamic tree code (elementwise.h);
//              decoded: max * table value. Size: 4 + n.
//   dithering  u32 n, f32 norm (max |x| or L2 norm), then n codes of b = ceil(log2(k + 1)) + 1
//              bits, level below a sign bit; level j stands for j/k (linear) or 2^(j-k)
//              (natural; 0 for j = 0) of the norm; the level of |x| * (1/norm) is drawn
//              (elementwise.h DitherCode). Size: 8 + ceil(n*b/8).
// Decode rejects a wrong size, non-finite or negative header values, out-of-range codes and
// non-zero padding bits.
//
// Stochastic rounding (qsgd, terngrad, natural, dithering; all unbiased, terngrad for the
// clipped input) draws element i's uniform from CounterRandom(seed, key, round, node) at
// index i, so the bytes are a function of (input, context) alone.
// elementwise.h needs fp-contract off for identical rounding in every variant; -O2 keeps
// GCC 12 to its "very cheap" vectoriser cost model, which refuses the codec loops; and
// no-trapping-math (results unchanged) lets it if-convert selects around divisions.
#pragma GCC optimize("fp-contract=off", "vect-cost-model=dynamic", "no-trapping-math")
#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/params.h"
#include "bytecomp/compress/registry.h"
#include "quant_kernels.h"
#include "quant_pack.h"
#include "quant_register.h"
#include "quant_util.h"

namespace bytecomp::compress {
namespace {

using codec_checks::HeaderFloatOk;
using codec_checks::InputWhat;
using codec_checks::OutputFits;
using codec_checks::CheckCount;
using codec_checks::PayloadSizeIs;

absl::Status CheckEncode(absl::string_view codec, absl::Span<const float> input,
                         absl::Span<uint8_t> out, size_t need, uint32_t* max_abs_bits) {
  if (auto s = OutputFits(codec, out.size(), need); !s.ok()) return s;
  if (auto s = codec_checks::InputSizeSupported(codec, input.size()); !s.ok()) return s;
  *max_abs_bits = MaxAbsBits(input.data(), input.size());
  if (!IsFiniteBits(*max_abs_bits)) return NonFiniteError(input, InputWhat(codec));
  return absl::OkStatus();
}

// Asks for the next block's input ahead of use: the hardware prefetcher alone falls behind
// these compute-heavy loops on large tensors (measured: up to 2x at 64M floats).
// Prefetches x[begin, begin + count) clipped to n.
void PrefetchAhead(const float* x, size_t n, size_t begin, size_t count) {
  if (begin >= n) return;
  const size_t end = std::min(n, begin + count);
  const char* p = reinterpret_cast<const char*>(x + begin);
  for (size_t offset = 0; offset < 4 * (end - begin); offset += 64) __builtin_prefetch(p + offset);
}

CounterRandom StreamOf(const CodecContext& ctx) {
  return MakeCounterRandom(ctx.seed, ctx.key, ctx.round, ctx.node);
}

// A norm as a float; a norm beyond the float range (values near FLT_MAX) is clamped, which
// keeps |x| / norm <= 1 and the decoded values finite.
float NormToFloat(double sum_of_squares) {
  return static_cast<float>(std::min(std::sqrt(sum_of_squares), static_cast<double>(FLT_MAX)));
}

__attribute__((target_clones("avx2", "default"))) uint32_t MaxCodeLevel(const uint16_t* codes,
                                                                        size_t n,
                                                                        uint32_t level_mask) {
  uint32_t m = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t level = codes[i] & level_mask;
    m = level > m ? level : m;
  }
  return m;
}

// ------------------------------------------------------------------------------------------
// qsgd

template <typename Code>
__attribute__((always_inline)) inline void QsgdEncodeBucketBody(
    const float* __restrict x, size_t len, float norm, uint32_t quantum_num, uint32_t level_bits,
    CounterRandom random, uint32_t first_index, Code* __restrict codes) {
  // 32-bit counters (n < 2^32 is checked): a 64-bit induction variable narrowed per element
  // costs the vector loop a third of its instructions.
  const uint32_t count = static_cast<uint32_t>(len);
  for (uint32_t i = 0; i < count; ++i) {
    const float u = UniformFloat(random, first_index + i);
    codes[i] = static_cast<Code>(QsgdCode(x[i], norm, quantum_num, level_bits, u));
  }
}

// All buckets in one call: norm (the bucket's sum of squares, which doubles as the finite
// check: NaN or Inf exactly when an element is, as finite floats squared cannot overflow a
// double sum), then the codes while the bucket is in L1. Returns false on a non-finite input.
template <typename Code>
__attribute__((always_inline)) inline bool QsgdEncodeAll(const float* __restrict x, size_t n,
                                                         size_t bucket, uint32_t quantum_num,
                                                         uint32_t level_bits,
                                                         CounterRandom random,
                                                         uint8_t* __restrict norms,
                                                         Code* __restrict codes) {
  for (size_t begin = 0, b = 0; begin < n; begin += bucket, ++b) {
    const size_t len = n - begin < bucket ? n - begin : bucket;
    const double sum_of_squares = SumOfSquaresInline(x + begin, len);
    if (!std::isfinite(sum_of_squares)) return false;
    const float norm = NormToFloat(sum_of_squares);
    PutF32(norms + 4 * b, norm);
    QsgdEncodeBucketBody(x + begin, len, norm, quantum_num, level_bits, random,
                         static_cast<uint32_t>(begin), codes + begin);
  }
  return true;
}

// 8-bit codes (quantum_num 64..127, the default) go straight to the payload.
__attribute__((target_clones("avx2", "default"))) bool QsgdEncode8(
    const float* __restrict x, size_t n, size_t bucket, uint32_t quantum_num, uint32_t level_bits,
    CounterRandom random, uint8_t* __restrict norms, uint8_t* __restrict codes) {
  return QsgdEncodeAll(x, n, bucket, quantum_num, level_bits, random, norms, codes);
}

__attribute__((target_clones("avx2", "default"))) bool QsgdEncode16(
    const float* __restrict x, size_t n, size_t bucket, uint32_t quantum_num, uint32_t level_bits,
    CounterRandom random, uint8_t* __restrict norms, uint16_t* __restrict codes) {
  return QsgdEncodeAll(x, n, bucket, quantum_num, level_bits, random, norms, codes);
}

__attribute__((target_clones("avx2", "default"))) void QsgdDecodeBucket(
    const uint16_t* __restrict codes, size_t len, uint32_t level_bits, uint32_t quantum_num,
    float norm, float* __restrict out) {
  for (size_t i = 0; i < len; ++i) out[i] = QsgdValue(codes[i], level_bits, quantum_num, norm);
}

class QsgdCodec final : public Codec {
 public:
  QsgdCodec(uint32_t quantum_num, size_t bucket)
      : quantum_num_(quantum_num), bucket_(bucket), level_bits_(BitsFor(quantum_num)) {}
  absl::string_view name() const override { return "qsgd"; }
  CodecProperties properties() const override {
    CodecProperties p;
    p.unbiased = true;
    return p;
  }
  size_t Buckets(size_t n) const { return (n + bucket_ - 1) / bucket_; }
  size_t MaxEncodedBytes(size_t n) const override {
    return 4 + 4 * Buckets(n) + PackedCodeBytes(n, level_bits_ + 1);
  }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext& ctx,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    const size_t bytes = MaxEncodedBytes(n);
    if (auto s = OutputFits(name(), out.size(), bytes); !s.ok()) return s;
    if (auto s = codec_checks::InputSizeSupported(name(), n); !s.ok()) return s;
    const CounterRandom random = StreamOf(ctx);
    const size_t buckets = Buckets(n);
    PutU32(out.data(), static_cast<uint32_t>(n));
    uint8_t* const norms = out.data() + 4;
    uint8_t* const packed = norms + 4 * buckets;
    const bool byte_codes = level_bits_ + 1 == 8;
    bool finite;
    if (byte_codes) {
      finite = QsgdEncode8(input.data(), n, bucket_, quantum_num_, level_bits_, random, norms,
                           packed);
    } else {
      codes_.resize(n);
      finite = QsgdEncode16(input.data(), n, bucket_, quantum_num_, level_bits_, random, norms,
                            codes_.data());
    }
    if (!finite) return NonFiniteError(input, InputWhat(name()));
    if (!byte_codes) PackCodes(codes_.data(), n, level_bits_ + 1, packed);
    return bytes;
  }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                      absl::Span<float> output) override {
    const size_t n = output.size();
    if (auto s = PayloadSizeIs(name(), encoded.size(), MaxEncodedBytes(n), n); !s.ok()) return s;
    if (auto s = CheckCount(name(), encoded, n); !s.ok()) return s;
    const size_t buckets = Buckets(n);
    const uint8_t* const norms = encoded.data() + 4;
    for (size_t b = 0; b < buckets; ++b) {
      const float norm = GetF32(norms + 4 * b);
      if (auto s = HeaderFloatOk(name(), norm, absl::StrCat("norm of bucket ", b), true); !s.ok()) {
        return s;
      }
    }
    codes_.resize(n);
    if (!UnpackCodes(norms + 4 * buckets, n, level_bits_ + 1, codes_.data())) {
      return MalformedError(name(), "padding bits after the last code are not zero");
    }
    const uint32_t max_level = MaxCodeLevel(codes_.data(), n, (1u << level_bits_) - 1u);
    if (max_level > quantum_num_) {
      return MalformedError(name(), absl::StrCat("level ", max_level, " exceeds quantum_num ",
                                                 quantum_num_));
    }
    for (size_t b = 0; b < buckets; ++b) {
      const size_t begin = b * bucket_;
      const size_t len = std::min(bucket_, n - begin);
      QsgdDecodeBucket(codes_.data() + begin, len, level_bits_, quantum_num_,
                       GetF32(norms + 4 * b), output.data() + begin);
    }
    return absl::OkStatus();
  }

 private:
  uint32_t quantum_num_;
  size_t bucket_;
  uint32_t level_bits_;
  std::vector<uint16_t> codes_;
};

// ------------------------------------------------------------------------------------------
// terngrad

// Four elements per output byte (PackTernary4's layout).
__attribute__((target_clones("avx2", "default"))) void TernEncode(const float* __restrict x,
                                                                  size_t n, float clip,
                                                                  float scale,
                                                                  CounterRandom random,
                                                                  uint8_t* __restrict out) {
  const uint32_t groups = static_cast<uint32_t>(n / 4);  // 32-bit counters: see qsgd
  for (uint32_t g = 0; g < groups; ++g) {
    const uint32_t i = 4 * g;
    out[g] = PackTernary4(TernaryCode(x[i], clip, scale, UniformFloat(random, i)),
                          TernaryCode(x[i + 1], clip, scale, UniformFloat(random, i + 1)),
                          TernaryCode(x[i + 2], clip, scale, UniformFloat(random, i + 2)),
                          TernaryCode(x[i + 3], clip, scale, UniformFloat(random, i + 3)));
  }
  if (n % 4 != 0) {
    uint32_t c[4] = {0, 0, 0, 0};
    for (size_t i = groups * 4; i < n; ++i) {
      c[i % 4] = TernaryCode(x[i], clip, scale, UniformFloat(random, static_cast<uint32_t>(i)));
    }
    out[groups] = PackTernary4(c[0], c[1], c[2], c[3]);
  }
}

// Whether any 2-bit code in the bytes is 3 (invalid).
__attribute__((target_clones("avx2", "default"))) bool HasTernaryCode3(const uint8_t* in,
                                                                       size_t bytes) {
  uint8_t any = 0;
  for (size_t i = 0; i < bytes; ++i) any |= in[i] & (in[i] >> 1) & 0x55u;
  return any != 0;
}

__attribute__((target_clones("avx2", "default"))) void TernDecode(const uint16_t* __restrict codes,
                                                                  size_t n, float scale,
                                                                  float* __restrict out) {
  for (size_t i = 0; i < n; ++i) out[i] = TernaryValue(codes[i], scale);
}

class TernGradCodec final : public Codec {
 public:
  absl::string_view name() const override { return "terngrad"; }
  CodecProperties properties() const override {
    CodecProperties p;
    p.unbiased = true;  // for the clipped input
    return p;
  }
  size_t MaxEncodedBytes(size_t n) const override { return 8 + (n + 3) / 4; }

  // GRACE clips at 2.5 standard deviations about zero; we use the root mean square (the
  // standard deviation about zero, equal to GRACE's for zero-mean gradients) so that a
  // constant tensor is not clipped to 0.
  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext& ctx,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    const size_t bytes = MaxEncodedBytes(n);
    if (auto s = OutputFits(name(), out.size(), bytes); !s.ok()) return s;
    if (auto s = codec_checks::InputSizeSupported(name(), n); !s.ok()) return s;
    const SquaresAndMax stats = SumOfSquaresAndMaxAbs(input.data(), n);
    if (!IsFiniteBits(stats.max_abs_bits)) return NonFiniteError(input, InputWhat(name()));
    const double rms = n == 0 ? 0.0 : std::sqrt(stats.sum_of_squares / n);
    const float clip = static_cast<float>(std::min(2.5 * rms, static_cast<double>(FLT_MAX)));
    const float scale = std::min(BitsToFloat(stats.max_abs_bits), clip);
    PutU32(out.data(), static_cast<uint32_t>(n));
    PutF32(out.data() + 4, scale);
    TernEncode(input.data(), n, clip, scale, StreamOf(ctx), out.data() + 8);
    return bytes;
  }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                      absl::Span<float> output) override {
    const size_t n = output.size();
    if (auto s = PayloadSizeIs(name(), encoded.size(), MaxEncodedBytes(n), n); !s.ok()) return s;
    if (auto s = CheckCount(name(), encoded, n); !s.ok()) return s;
    const float scale = GetF32(encoded.data() + 4);
    if (auto s = HeaderFloatOk(name(), scale, "scale", true); !s.ok()) return s;
    const uint8_t* codes = encoded.data() + 8;
    const size_t code_bytes = (n + 3) / 4;
    if (HasTernaryCode3(codes, code_bytes)) return MalformedError(name(), "ternary code 3");
    if (n % 4 != 0 && (codes[code_bytes - 1] >> (2 * (n % 4))) != 0) {
      return MalformedError(name(), "padding bits after the last code are not zero");
    }
    codes_.resize(n);
    UnpackCodes(codes, n, 2, codes_.data());
    TernDecode(codes_.data(), n, scale, output.data());
    return absl::OkStatus();
  }

 private:
  std::vector<uint16_t> codes_;
};

// ------------------------------------------------------------------------------------------
// natural

__attribute__((target_clones("avx2", "default"))) void NaturalEncode(const float* __restrict x,
                                                                     size_t n,
                                                                     uint32_t exponent_low,
                                                                     CounterRandom random,
                                                                     uint8_t* __restrict out) {
  const uint32_t count = static_cast<uint32_t>(n);  // 32-bit counters: see qsgd
  for (uint32_t i = 0; i < count; ++i) {
    out[i] = NaturalCode(x[i], exponent_low, RandomBits(random, i));
  }
}

// Largest 7-bit code, and whether a "negative zero" byte (0x80, never written) is present.
__attribute__((target_clones("avx2", "default"))) uint32_t NaturalMaxCode(const uint8_t* in,
                                                                          size_t n,
                                                                          bool* negative_zero) {
  uint8_t m = 0;
  uint8_t nz = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t c = in[i] & 0x7fu;
    m = c > m ? c : m;
    nz |= in[i] == 0x80u ? 1u : 0u;
  }
  *negative_zero = nz != 0;
  return m;
}

__attribute__((target_clones("avx2", "default"))) void NaturalDecode(const uint8_t* __restrict in,
                                                                     size_t n,
                                                                     uint32_t exponent_low,
                                                                     float* __restrict out) {
  for (size_t i = 0; i < n; ++i) out[i] = NaturalValue(in[i], exponent_low);
}

class NaturalCodec final : public Codec {
 public:
  absl::string_view name() const override { return "natural"; }
  CodecProperties properties() const override {
    CodecProperties p;
    p.unbiased = true;
    return p;
  }
  size_t MaxEncodedBytes(size_t n) const override { return 1 + n; }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext& ctx,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    uint32_t max_bits = 0;
    if (auto s = CheckEncode(name(), input, out, 1 + n, &max_bits); !s.ok()) return s;
    const uint32_t exponent_low = NaturalExponentLow(max_bits >> 23);
    out[0] = static_cast<uint8_t>(exponent_low);
    NaturalEncode(input.data(), n, exponent_low, StreamOf(ctx), out.data() + 1);
    return 1 + n;
  }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                      absl::Span<float> output) override {
    const size_t n = output.size();
    if (auto s = PayloadSizeIs(name(), encoded.size(), 1 + n, n); !s.ok()) return s;
    const uint32_t exponent_low = encoded[0];
    if (exponent_low < 1 || exponent_low > 254) {
      return MalformedError(name(), absl::StrCat("exponent_low ", exponent_low,
                                                 " outside 1..254"));
    }
    bool negative_zero = false;
    const uint32_t max_code = NaturalMaxCode(encoded.data() + 1, n, &negative_zero);
    if (max_code > 0 && exponent_low + max_code - 1 > 254) {
      return MalformedError(name(), absl::StrCat("code ", max_code, " with exponent_low ",
                                                 exponent_low, " exceeds the float range"));
    }
    if (negative_zero) return MalformedError(name(), "byte 0x80 (negative zero) is not a code");
    NaturalDecode(encoded.data() + 1, n, exponent_low, output.data());
    return absl::OkStatus();
  }
};

// ------------------------------------------------------------------------------------------
// u8bit

// U8bitNearestMagnitudeCode (elementwise.h) is defined as the number of midpoints at or below
// v. Here it is counted with one table over blocks of 2^16 float bit patterns in [0, 1]
// (relative width 2^-7, narrower than any gap between midpoints, so a block holds at most one
// midpoint; the unit test checks the codec against the definition). Entry: the count at the
// block's first value (bits 0-7) and the low 16 bits of the block's midpoint, if one lies
// strictly inside it, else 0x10000 (bits 8-24). Positive floats order like their bits, so
// v passes that midpoint iff its low 16 bits are at least the stored ones: one table read
// (one AVX2 gather) per element.
// The table starts at v = 2^-22: every smaller v lies below the first midpoint (5e-7), so
// clamping v's bits up to 2^-22 changes no code and keeps the table at 11 KiB, in L1 beside
// the streaming input.
struct U8bitTables {
  static constexpr uint32_t kFloorBits = 105u << 23;  // 2^-22
  static constexpr uint32_t kFirstBlock = kFloorBits >> 16;
  static constexpr uint32_t kBlocks = (0x3f800000u >> 16) + 1 - kFirstBlock;  // up to v = 1.0
  static constexpr uint32_t kNoMidpoint = 0x10000u;
  int32_t block_entry[kBlocks];

  U8bitTables() {
    float midpoint[127];
    for (uint32_t c = 0; c < 127; ++c) midpoint[c] = U8bitMidpoint(c);
    if (FloatBits(midpoint[0]) <= kFloorBits) std::abort();  // the floor above would be wrong
    uint32_t count = 0;
    for (uint32_t block = 0; block < kBlocks; ++block) {
      const uint32_t first_bits = (block + kFirstBlock) << 16;
      while (count < 127 && FloatBits(midpoint[count]) <= first_bits) ++count;
      uint32_t inside = kNoMidpoint;
      if (count < 127 && (FloatBits(midpoint[count]) >> 16) == block + kFirstBlock) {
        inside = FloatBits(midpoint[count]) & 0xffffu;  // > 0: the one at the start is counted
      }
      block_entry[block] = static_cast<int32_t>(count | (inside << 8));
    }
  }
};

const U8bitTables& GetU8bitTables() {
  static const U8bitTables* const tables = new U8bitTables();
  return *tables;
}

uint8_t U8bitCodeByTables(float x, float inverse_max, const U8bitTables& tables) {
  constexpr uint32_t kLastBlock = U8bitTables::kBlocks - 1;
  const float v = AbsFloat(x) * inverse_max;  // NaN or inf * 0 for max_abs == 0: code 0
  uint32_t bits = FloatBits(v);
  bits = bits > U8bitTables::kFloorBits ? bits : U8bitTables::kFloorBits;
  uint32_t block = (bits >> 16) - U8bitTables::kFirstBlock;
  block = block < kLastBlock ? block : kLastBlock;
  const uint32_t entry = static_cast<uint32_t>(tables.block_entry[block]);
  uint32_t c = (entry & 0xffu) + static_cast<uint32_t>((bits & 0xffffu) >= (entry >> 8));
  c |= 127u * static_cast<uint32_t>(v >= 1.0f);
  c *= static_cast<uint32_t>(v > 0.0f);
  const uint32_t negative = static_cast<uint32_t>(x < 0.0f) * static_cast<uint32_t>(c != 0u);
  return static_cast<uint8_t>((negative << 7) | c);
}

// The same per element, 8 at a time with an AVX2 gather for the table read.
__attribute__((target("avx2"))) size_t U8bitEncodeAvx2(const float* x, size_t n,
                                                      float inverse_max,
                                                      const U8bitTables& tables, uint8_t* out) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 inv = _mm256_set1_ps(inverse_max);
  const __m256i last_block = _mm256_set1_epi32(static_cast<int>(U8bitTables::kBlocks - 1));
  const __m256i floor_bits = _mm256_set1_epi32(static_cast<int>(U8bitTables::kFloorBits));
  const __m256i first_block = _mm256_set1_epi32(static_cast<int>(U8bitTables::kFirstBlock));
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 zero = _mm256_setzero_ps();
  const __m256i c127 = _mm256_set1_epi32(127);
  const __m256i low8 = _mm256_set1_epi32(0xff);
  const __m256i low16 = _mm256_set1_epi32(0xffff);
  const __m256i c1 = _mm256_set1_epi32(1);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_prefetch(reinterpret_cast<const char*>(x + i) + 1024, _MM_HINT_T0);
    const __m256 xv = _mm256_loadu_ps(x + i);
    const __m256 v = _mm256_mul_ps(_mm256_and_ps(xv, abs_mask), inv);
    // NaN bits (> 0x7f800000) stay above the floor and clamp to the last block; code 0 below.
    const __m256i bits = _mm256_max_epu32(_mm256_castps_si256(v), floor_bits);
    const __m256i block = _mm256_min_epu32(
        _mm256_sub_epi32(_mm256_srli_epi32(bits, 16), first_block), last_block);
    const __m256i entry = _mm256_i32gather_epi32(tables.block_entry, block, 4);
    // (bits & 0xffff) >= (entry >> 8), both < 2^17: a signed compare is exact.
    const __m256i passed = _mm256_cmpgt_epi32(_mm256_srli_epi32(entry, 8),
                                              _mm256_and_si256(bits, low16));  // not passed
    __m256i c = _mm256_add_epi32(_mm256_and_si256(entry, low8), _mm256_andnot_si256(passed, c1));
    c = _mm256_or_si256(c, _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(v, one, _CMP_GE_OQ)), c127));
    c = _mm256_and_si256(c, _mm256_castps_si256(_mm256_cmp_ps(v, zero, _CMP_GT_OQ)));
    const __m256i negative = _mm256_andnot_si256(
        _mm256_cmpeq_epi32(c, _mm256_setzero_si256()),
        _mm256_castps_si256(_mm256_cmp_ps(xv, zero, _CMP_LT_OQ)));
    c = _mm256_or_si256(c, _mm256_and_si256(negative, _mm256_set1_epi32(0x80)));
    // 8 x int32 (each < 256) -> 8 bytes.
    const __m128i words = _mm_packus_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + i), _mm_packus_epi16(words, words));
  }
  return i;
}

void U8bitEncode(const float* x, size_t n, float max_abs, const U8bitTables& tables,
                 uint8_t* out) {
  const bool have_avx2 = CpuSimdLevel() >= SimdLevel::kAvx2;  // honours BYTECOMP_SIMD
  const float inverse_max = 1.0f / max_abs;
  const size_t done = have_avx2 ? U8bitEncodeAvx2(x, n, inverse_max, tables, out) : 0;
  for (size_t i = done; i < n; ++i) out[i] = U8bitCodeByTables(x[i], inverse_max, tables);
}

class U8bitCodec final : public Codec {
 public:
  absl::string_view name() const override { return "u8bit"; }
  CodecProperties properties() const override { return {}; }
  size_t MaxEncodedBytes(size_t n) const override { return 4 + n; }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext&,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    uint32_t max_bits = 0;
    if (auto s = CheckEncode(name(), input, out, 4 + n, &max_bits); !s.ok()) return s;
    const float max_abs = BitsToFloat(max_bits);
    PutF32(out.data(), max_abs);
    U8bitEncode(input.data(), n, max_abs, GetU8bitTables(), out.data() + 4);
    return 4 + n;
  }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                      absl::Span<float> output) override {
    const size_t n = output.size();
    if (auto s = PayloadSizeIs(name(), encoded.size(), 4 + n, n); !s.ok()) return s;
    const float max_abs = GetF32(encoded.data());
    if (auto s = HeaderFloatOk(name(), max_abs, "max |x|", true); !s.ok()) return s;
    const uint8_t* codes = encoded.data() + 4;
    for (size_t i = 0; i < n; ++i) {
      if (codes[i] == 0x80u) {
        return MalformedError(name(), absl::StrCat("byte 0x80 (negative zero) at element ", i));
      }
    }
    float table[256];
    for (uint32_t c = 0; c < 256; ++c) table[c] = U8bitValue(static_cast<uint8_t>(c), max_abs);
    for (size_t i = 0; i < n; ++i) output[i] = table[codes[i]];
    return absl::OkStatus();
  }
};

// ------------------------------------------------------------------------------------------
// dithering

template <bool kNatural>
__attribute__((always_inline)) inline void DitherEncodeBody(const float* __restrict x, size_t n,
                                                            float inverse_norm, uint32_t s,
                                                            uint32_t level_bits,
                                                            CounterRandom random,
                                                            uint32_t first_index,
                                                            uint16_t* __restrict codes) {
  const uint32_t count = static_cast<uint32_t>(n);  // 32-bit counters: see qsgd
  for (uint32_t i = 0; i < count; ++i) {
    codes[i] = static_cast<uint16_t>(DitherCode(x[i], inverse_norm, s, level_bits, kNatural,
                                                UniformFloat(random, first_index + i)));
  }
}

__attribute__((target_clones("avx2", "default"))) void DitherEncodeLinear(
    const float* __restrict x, size_t n, float inverse_norm, uint32_t s, uint32_t level_bits,
    CounterRandom random, uint32_t first_index, uint16_t* __restrict codes) {
  DitherEncodeBody<false>(x, n, inverse_norm, s, level_bits, random, first_index, codes);
}

__attribute__((target_clones("avx2", "default"))) void DitherEncodeNatural(
    const float* __restrict x, size_t n, float inverse_norm, uint32_t s, uint32_t level_bits,
    CounterRandom random, uint32_t first_index, uint16_t* __restrict codes) {
  DitherEncodeBody<true>(x, n, inverse_norm, s, level_bits, random, first_index, codes);
}

// Decoded value of a code: sign * (level value * norm), level value j/k or 2^(j-k).
__attribute__((target_clones("avx2", "default"))) void DitherDecodeLinear(
    const uint16_t* __restrict codes, size_t n, uint32_t s, uint32_t level_bits, float norm,
    float* __restrict out) {
  const uint32_t mask = (1u << level_bits) - 1u;
  for (size_t i = 0; i < n; ++i) {
    const float magnitude = DitherLinearValue(codes[i] & mask, s) * norm;
    out[i] = (codes[i] >> level_bits) ? -magnitude : magnitude;
  }
}

__attribute__((target_clones("avx2", "default"))) void DitherDecodeNatural(
    const uint16_t* __restrict codes, size_t n, uint32_t s, uint32_t level_bits, float norm,
    float* __restrict out) {
  const uint32_t mask = (1u << level_bits) - 1u;
  for (size_t i = 0; i < n; ++i) {
    const float magnitude = DitherNaturalValue(codes[i] & mask, s) * norm;
    out[i] = (codes[i] >> level_bits) ? -magnitude : magnitude;
  }
}

class DitheringCodec final : public Codec {
 public:
  DitheringCodec(uint32_t levels, bool natural, bool l2)
      : levels_(levels), natural_(natural), l2_(l2), level_bits_(BitsFor(levels)) {}
  absl::string_view name() const override { return "dithering"; }
  CodecProperties properties() const override {
    CodecProperties p;
    p.unbiased = true;
    return p;
  }
  size_t MaxEncodedBytes(size_t n) const override {
    return 8 + PackedCodeBytes(n, level_bits_ + 1);
  }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext& ctx,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    const size_t bytes = MaxEncodedBytes(n);
    if (auto s = OutputFits(name(), out.size(), bytes); !s.ok()) return s;
    if (auto s = codec_checks::InputSizeSupported(name(), n); !s.ok()) return s;
    float norm = 0.0f;
    if (l2_) {
      const double sum_of_squares = SumOfSquares(input.data(), n);  // NaN/Inf iff x has one
      if (!std::isfinite(sum_of_squares)) return NonFiniteError(input, InputWhat(name()));
      norm = NormToFloat(sum_of_squares);
    } else {
      const uint32_t max_bits = MaxAbsBits(input.data(), n);
      if (!IsFiniteBits(max_bits)) return NonFiniteError(input, InputWhat(name()));
      norm = BitsToFloat(max_bits);
    }
    PutU32(out.data(), static_cast<uint32_t>(n));
    PutF32(out.data() + 4, norm);
    const float inverse_norm = 1.0f / norm;
    const CounterRandom random = StreamOf(ctx);
    // Blocks of codes that stay in L1 between computing and packing them; a multiple of 8
    // elements, so every block but the last starts on a byte.
    constexpr size_t kBlock = 2048;
    codes_.resize(std::min(n, kBlock));
    for (size_t begin = 0; begin < n; begin += kBlock) {
      const size_t len = std::min(kBlock, n - begin);
      const uint32_t first = static_cast<uint32_t>(begin);
      PrefetchAhead(input.data(), n, begin + kBlock, kBlock);
      if (natural_) {
        DitherEncodeNatural(input.data() + begin, len, inverse_norm, levels_, level_bits_,
                            random, first, codes_.data());
      } else {
        DitherEncodeLinear(input.data() + begin, len, inverse_norm, levels_, level_bits_,
                           random, first, codes_.data());
      }
      PackCodes(codes_.data(), len, level_bits_ + 1,
                out.data() + 8 + begin * (level_bits_ + 1) / 8);
    }
    return bytes;
  }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                      absl::Span<float> output) override {
    const size_t n = output.size();
    if (auto s = PayloadSizeIs(name(), encoded.size(), MaxEncodedBytes(n), n); !s.ok()) return s;
    if (auto s = CheckCount(name(), encoded, n); !s.ok()) return s;
    const float norm = GetF32(encoded.data() + 4);
    if (auto s = HeaderFloatOk(name(), norm, "norm", true); !s.ok()) return s;
    // In L1-sized blocks (a multiple of 8 codes: each block starts on a byte): unpack, check
    // the levels, then sign * (level value * norm) by arithmetic, which vectorises.
    constexpr size_t kBlock = 2048;
    const uint32_t bits = level_bits_ + 1;
    const uint32_t level_mask = (1u << level_bits_) - 1u;
    codes_.resize(std::min(n, kBlock));
    for (size_t begin = 0; begin < n; begin += kBlock) {
      const size_t len = std::min(kBlock, n - begin);
      if (!UnpackCodes(encoded.data() + 8 + begin * bits / 8, len, bits, codes_.data())) {
        return MalformedError(name(), "padding bits after the last code are not zero");
      }
      const uint32_t max_level = MaxCodeLevel(codes_.data(), len, level_mask);
      if (max_level > levels_) {
        return MalformedError(name(), absl::StrCat("level ", max_level, " exceeds k ", levels_));
      }
      if (natural_) {
        DitherDecodeNatural(codes_.data(), len, levels_, level_bits_, norm, output.data() + begin);
      } else {
        DitherDecodeLinear(codes_.data(), len, levels_, level_bits_, norm, output.data() + begin);
      }
    }
    return absl::OkStatus();
  }

 private:
  uint32_t levels_;
  bool natural_;
  bool l2_;
  uint32_t level_bits_;
  std::vector<uint16_t> codes_;
};

}  // namespace

void RegisterQuantizationCodecs(CodecRegistry& registry) {
  using codec_checks::ChoiceParam;
  using codec_checks::IntParam;
  {
    CodecSpec spec;
    spec.name = "qsgd";
    spec.summary = "stochastic rounding to quantum_num levels of each bucket's L2 norm";
    spec.params = {IntParam("quantum_num", 127, "levels per sign, in [1, 32767]", 1, 32767),
                   IntParam("bucket_size", 128, "elements per norm, in [1, 2^31)", 1,
                            2147483647.0)};
    spec.factory = [](const CodecParams& params) -> absl::StatusOr<std::unique_ptr<Codec>> {
      ParamReader r(params);
      const int64_t quantum_num = r.Int("quantum_num");
      const int64_t bucket = r.Int("bucket_size");
      if (!r.ok()) return r.status();
      return std::unique_ptr<Codec>(
          new QsgdCodec(static_cast<uint32_t>(quantum_num), static_cast<size_t>(bucket)));
    };
    MustRegister(registry, std::move(spec));
  }
  MustRegister(registry, ParameterlessSpec<TernGradCodec>(
      "terngrad", "{-1, 0, +1} times a scale, stochastic, after clipping at 2.5 sigma"));
  MustRegister(registry, ParameterlessSpec<NaturalCodec>(
      "natural", "stochastic rounding to a power of two: sign and exponent in a byte"));
  MustRegister(registry, ParameterlessSpec<U8bitCodec>(
      "u8bit", "8-bit dynamic tree quantisation (Dettmers) of x / max |x|"));
  {
    CodecSpec spec;
    spec.name = "dithering";
    spec.summary = "stochastic rounding of |x| / norm to k levels (BytePS dithering)";
    spec.params = {
        IntParam("k", 15, "number of non-zero levels, in [1, 32767]; natural: [1, 127]", 1,
                 32767),
        ChoiceParam("partition", "linear", "level spacing: linear (j/k) or natural (2^(j-k))",
                    {"linear", "natural"}),
        ChoiceParam("normalize", "max", "norm: max (max |x|) or l2", {"max", "l2"})};
    spec.factory = [](const CodecParams& params) -> absl::StatusOr<std::unique_ptr<Codec>> {
      ParamReader r(params);
      const int64_t k = r.Int("k");
      const std::string partition = r.String("partition");
      const std::string normalize = r.String("normalize");
      if (!r.ok()) return r.status();
      const bool natural = partition == "natural";
      if (natural && k > 127) {
        return absl::InvalidArgumentError(absl::StrCat(
            "codec 'dithering': k = ", k,
            " is out of range for partition=natural (levels 2^(j-k) need k in [1, 127])"));
      }
      return std::unique_ptr<Codec>(
          new DitheringCodec(static_cast<uint32_t>(k), natural, normalize == "l2"));
    };
    MustRegister(registry, std::move(spec));
  }
  RegisterSketchCodec(registry);
  RegisterInceptionnCodec(registry);
}

}  // namespace bytecomp::compress
