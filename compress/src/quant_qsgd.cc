// qsgd (Alistarh et al.): each bucket's L2 norm and, per element, a stochastic level of |x| /
// norm with its sign. Payload: format/qsgd_format.h, shared with the CUDA codec.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>
#include "exact_float_math.h"  // first: see there

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/qsgd_format.h"
#include "bytecomp/compress/params.h"
#include "bytecomp/compress/registry.h"
#include "codec_checks.h"
#include "param_specs.h"
#include "quant_codecs.h"
#include "quant_kernels.h"
#include "quant_pack.h"
#include "simd_kernel.h"

namespace bytecomp::compress {
namespace {

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

// The norms of the buckets from `first` on, at most `group` of them (*count), into the payload
// (`norms`) and `group_norms`; false where a sum of squares is not finite.
__attribute__((always_inline)) inline bool GroupNorms(const float* __restrict x, size_t n,
                                                      size_t first, size_t bucket, size_t group,
                                                      uint8_t* __restrict norms, float* group_norms,
                                                      size_t* count) {
  *count = 0;
  for (size_t begin = first; begin < n && *count < group; begin += bucket, ++*count) {
    const size_t len = n - begin < bucket ? n - begin : bucket;
    const double sum_of_squares = SumOfSquaresInline(x + begin, len);
    if (!std::isfinite(sum_of_squares)) return false;
    group_norms[*count] = qsgd::NormFromSumOfSquares(sum_of_squares);
    PutF32(norms + 4 * *count, group_norms[*count]);
  }
  return true;
}

// All buckets in one call: norm (the bucket's sum of squares, which doubles as the finite
// check: NaN or Inf exactly when an element is, as finite floats squared cannot overflow a
// double sum), then the codes while the bucket is in L1. Returns false on a non-finite input.
template <typename Code>
__attribute__((always_inline)) inline bool QsgdEncodeAll(const float* __restrict x, size_t n,
                                                         size_t bucket, uint32_t quantum_num,
                                                         uint32_t level_bits, CounterRandom random,
                                                         uint8_t* __restrict norms,
                                                         Code* __restrict codes) {
  // Buckets in groups that stay in L1: the group's norms first, then its codes, so that one
  // bucket's norm (a reduction, a square root: a chain of latencies) does not hold up the
  // coding of the next bucket.
  constexpr size_t kGroup = 16;
  float group_norms[kGroup];
  for (size_t first = 0, b0 = 0; first < n; first += kGroup * bucket, b0 += kGroup) {
    size_t count = 0;
    if (!GroupNorms(x, n, first, bucket, kGroup, norms + 4 * b0, group_norms, &count)) {
      return false;
    }
    for (size_t g = 0; g < count; ++g) {
      const size_t begin = first + g * bucket;
      const size_t len = n - begin < bucket ? n - begin : bucket;
      QsgdEncodeBucketBody(x + begin, len, group_norms[g], quantum_num, level_bits, random,
                           static_cast<uint32_t>(begin), codes + begin);
    }
  }
  return true;
}

// 8-bit codes (quantum_num 64..127, the default) go straight to the payload.
BYTECOMP_SIMD_KERNEL(bool, QsgdEncode8,
                     (const float* __restrict x, size_t n, size_t bucket, uint32_t quantum_num,
                      uint32_t level_bits, CounterRandom random, uint8_t* __restrict norms,
                      uint8_t* __restrict codes),
                     (x, n, bucket, quantum_num, level_bits, random, norms, codes)) {
  return QsgdEncodeAll(x, n, bucket, quantum_num, level_bits, random, norms, codes);
}

// QsgdEncode8 with AVX-512 by hand, for buckets of a multiple of 16 elements: the norms of a
// group of buckets as QsgdEncodeAll, then the codes 16 at a time with the random bits advanced
// by an addition (RandomBits16, continuing across buckets), StochasticLevel's selects as vmaxps
// and vminps (the same results, NaN included), the sign bit by a masked or. The same IEEE
// operations as QsgdCode, so the same bytes.
[[gnu::target("arch=x86-64-v4")]] bool QsgdEncode8Avx512Steps(
    const float* __restrict x, size_t n, size_t bucket, uint32_t quantum_num, uint32_t level_bits,
    CounterRandom random, uint8_t* __restrict norms, uint8_t* __restrict codes) {
  constexpr size_t kGroup = 16;
  float group_norms[kGroup];
  RandomBits16 bits16(random, 0);
  const __m512 levels = _mm512_set1_ps(static_cast<float>(static_cast<int32_t>(quantum_num)));
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(1u << level_bits));
  for (size_t first = 0, b0 = 0; first < n; first += kGroup * bucket, b0 += kGroup) {
    size_t count = 0;
    if (!GroupNorms(x, n, first, bucket, kGroup, norms + 4 * b0, group_norms, &count)) {
      return false;
    }
    for (size_t g = 0; g < count; ++g) {
      const size_t begin = first + g * bucket;
      const size_t len = n - begin < bucket ? n - begin : bucket;
      const float* const xb = x + begin;
      uint8_t* const cb = codes + begin;
      const __m512 norm = _mm512_set1_ps(group_norms[g]);
      size_t i = 0;
      for (; i + 16 <= len; i += 16) {
        PrefetchLineAhead(xb + i);
        const __m512 uniform = UniformFromBits16(bits16.Next());
        const __m512 v = _mm512_loadu_ps(xb + i);
        const __m512 scaled = _mm512_mul_ps(_mm512_div_ps(_mm512_abs_ps(v), norm), levels);
        const __m512i code = StochasticCode16(scaled, levels, uniform, v, sign);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(cb + i), _mm512_cvtepi32_epi8(code));
      }
      for (; i < len; ++i) {  // the last bucket's last elements
        const uint32_t index = static_cast<uint32_t>(begin + i);
        cb[i] = static_cast<uint8_t>(
            QsgdCode(xb[i], group_norms[g], quantum_num, level_bits, UniformFloat(random, index)));
      }
    }
  }
  return true;
}

BYTECOMP_SIMD_KERNEL(bool, QsgdEncode16,
                     (const float* __restrict x, size_t n, size_t bucket, uint32_t quantum_num,
                      uint32_t level_bits, CounterRandom random, uint8_t* __restrict norms,
                      uint16_t* __restrict codes),
                     (x, n, bucket, quantum_num, level_bits, random, norms, codes)) {
  return QsgdEncodeAll(x, n, bucket, quantum_num, level_bits, random, norms, codes);
}

// The largest level (code & level_mask) of a bucket's codes.
template <typename Code>
__attribute__((always_inline)) inline uint32_t MaxLevelBody(const Code* __restrict codes,
                                                            size_t len, uint32_t level_mask) {
  uint32_t m = 0;
  for (size_t i = 0; i < len; ++i) {
    const uint32_t level = codes[i] & level_mask;
    m = level > m ? level : m;
  }
  return m;
}

template <typename Code>
__attribute__((always_inline)) inline void DecodeBucketBody(const Code* __restrict codes,
                                                            size_t len, uint32_t level_bits,
                                                            uint32_t quantum_num, float norm,
                                                            float* __restrict out) {
  for (size_t i = 0; i < len; ++i) out[i] = QsgdValue(codes[i], level_bits, quantum_num, norm);
}

// Byte codes (the default): per bucket, its levels checked and its values written while the
// bucket's codes are in L1; one pass over the payload, no code array. Returns the first
// bucket whose largest level exceeds quantum_num (its values not written), or `buckets`.
BYTECOMP_SIMD_KERNEL(size_t, QsgdDecode8,
                     (const uint8_t* __restrict norms, const uint8_t* __restrict codes, size_t n,
                      size_t bucket, uint32_t level_bits, uint32_t quantum_num,
                      float* __restrict out),
                     (norms, codes, n, bucket, level_bits, quantum_num, out)) {
  const uint32_t level_mask = (1u << level_bits) - 1u;
  const bool check = quantum_num < level_mask;  // otherwise every level is valid
  size_t b = 0;
  for (size_t begin = 0; begin < n; begin += bucket, ++b) {
    const size_t len = n - begin < bucket ? n - begin : bucket;
    if (check && MaxLevelBody(codes + begin, len, level_mask) > quantum_num) return b;
    DecodeBucketBody(codes + begin, len, level_bits, quantum_num, GetF32(norms + 4 * b),
                     out + begin);
  }
  return b;
}

BYTECOMP_SIMD_KERNEL(void, QsgdDecodeBucket,
                     (const uint16_t* __restrict codes, size_t len, uint32_t level_bits,
                      uint32_t quantum_num, float norm, float* __restrict out),
                     (codes, len, level_bits, quantum_num, norm, out)) {
  DecodeBucketBody(codes, len, level_bits, quantum_num, norm, out);
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
  size_t Buckets(size_t n) const { return qsgd::Buckets(n, bucket_); }
  size_t MaxEncodedBytes(size_t n) const override {
    return qsgd::PayloadBytes(n, bucket_, level_bits_);
  }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext& ctx,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    const size_t bytes = MaxEncodedBytes(n);
    if (auto s = codec_checks::CheckEncodeCall(*this, n, out.size()); !s.ok()) return s;
    const CounterRandom random = StreamOf(ctx);
    const size_t buckets = Buckets(n);
    PutU32(out.data(), static_cast<uint32_t>(n));
    uint8_t* const norms = out.data() + 4;
    uint8_t* const packed = norms + 4 * buckets;
    const bool byte_codes = level_bits_ + 1 == 8;
    bool finite;
    if (byte_codes) {
      finite = CpuSimdLevel() == SimdLevel::kAvx512 && bucket_ % 16 == 0
                   ? QsgdEncode8Avx512Steps(input.data(), n, bucket_, quantum_num_, level_bits_,
                                            random, norms, packed)
                   : QsgdEncode8(input.data(), n, bucket_, quantum_num_, level_bits_, random, norms,
                                 packed);
    } else {
      codes_.resize(n);
      finite = QsgdEncode16(input.data(), n, bucket_, quantum_num_, level_bits_, random, norms,
                            codes_.data());
    }
    if (!finite) return NonFiniteError(input, codec_checks::InputWhat(name()));
    if (!byte_codes) PackCodes(codes_.data(), n, level_bits_ + 1, packed);
    return bytes;
  }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                      absl::Span<float> output) override {
    const size_t n = output.size();
    if (auto s = codec_checks::CheckSizeAndCount(*this, encoded, n); !s.ok()) return s;
    const size_t buckets = Buckets(n);
    const uint8_t* const norms = encoded.data() + 4;
    for (size_t b = 0; b < buckets; ++b) {
      if (auto s = FormatErrorStatus(name(), qsgd::CheckNorm(GetF32(norms + 4 * b), b)); !s.ok()) {
        return s;
      }
    }
    const uint8_t* const packed = norms + 4 * buckets;
    const uint32_t bits = level_bits_ + 1;
    if (!PaddingBitsZero(packed, n, static_cast<int>(bits))) {
      return FormatErrorStatus(name(), MakeFormatError(FormatErrorCode::kCodePaddingNotZero));
    }
    if (bits == 8) {
      if (QsgdDecode8(norms, packed, n, bucket_, level_bits_, quantum_num_, output.data()) !=
          buckets) {
        return LevelError(packed, n);
      }
      return absl::OkStatus();
    }
    // Other widths: blocks of whole buckets (at least kBlock codes, a multiple of 8 so that
    // each starts on a byte) unpacked into L1, checked, then decoded.
    constexpr size_t kBlock = 2048;
    const size_t per_block = std::max<size_t>(1, kBlock / bucket_);
    const size_t block =
        per_block * bucket_ % 8 == 0 ? per_block * bucket_ : 8 * per_block * bucket_;
    codes_.resize(std::min(n, block));
    const uint32_t level_mask = (1u << level_bits_) - 1u;
    for (size_t begin = 0; begin < n; begin += block) {
      const size_t len = std::min(block, n - begin);
      UnpackCodes(packed + begin * bits / 8, len, bits, codes_.data());
      if (MaxCodeLevel(codes_.data(), len, level_mask) > quantum_num_) return LevelError(packed, n);
      for (size_t offset = 0; offset < len; offset += bucket_) {
        const size_t b = (begin + offset) / bucket_;
        QsgdDecodeBucket(codes_.data() + offset, std::min(bucket_, len - offset), level_bits_,
                         quantum_num_, GetF32(norms + 4 * b), output.data() + begin + offset);
      }
    }
    return absl::OkStatus();
  }

 private:
  // The error for a level above quantum_num: the largest level of the whole payload.
  absl::Status LevelError(const uint8_t* packed, size_t n) {
    codes_.resize(n);
    UnpackCodes(packed, n, level_bits_ + 1, codes_.data());
    const uint32_t max_level = MaxCodeLevel(codes_.data(), n, (1u << level_bits_) - 1u);
    return FormatErrorStatus(name(), qsgd::CheckLevel(max_level, quantum_num_));
  }

  uint32_t quantum_num_;
  size_t bucket_;
  uint32_t level_bits_;
  std::vector<uint16_t> codes_;
};

}  // namespace

void RegisterQsgdCodec(CodecRegistry& registry) {
  CodecSpec spec;
  spec.name = "qsgd";
  spec.summary = "stochastic rounding to quantum_num levels of each bucket's L2 norm";
  spec.params = {
      param_specs::IntParam("quantum_num", 127, "levels per sign, in [1, 32767]", 1, 32767),
      param_specs::IntParam("bucket_size", 128, "elements per norm, in [1, 2^31)", 1,
                            2147483647.0)};
  spec.factory = [](const CodecParams& params) -> absl::StatusOr<std::unique_ptr<Codec>> {
    ParamReader r(params);
    const int64_t quantum_num = r.Int("quantum_num");
    const int64_t bucket = r.Int("bucket_size");
    if (!r.ok()) return r.status();
    return std::unique_ptr<Codec>(
        new QsgdCodec(static_cast<uint32_t>(quantum_num), static_cast<size_t>(bucket)));
  };
  spec.facts = {.gpu_kernel = true,
                .gpu_memories = {MemoryKind::kResidual},
                .encode_target = EncodeSpeedTarget::kElementwise};
  MustRegister(registry, std::move(spec));
}

}  // namespace bytecomp::compress
