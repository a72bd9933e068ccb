// u8bit: Dettmers' 8-bit dynamic tree code of x / max |x| (elementwise.h). Payload:
// format/u8bit_format.h, shared with the CUDA codec, which codes by elementwise.h's definition
// (U8bitCode); this one counts the same midpoints with a table (below).
#include <immintrin.h>
#include "exact_float_math.h"  // first: see there

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/u8bit_format.h"
#include "bytecomp/compress/params.h"
#include "bytecomp/compress/registry.h"
#include "codec_checks.h"
#include "param_specs.h"
#include "quant_codecs.h"
#include "quant_kernels.h"
#include "simd_kernel.h"

namespace bytecomp::compress {
namespace {

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
__attribute__((target("avx2"))) size_t U8bitEncodeAvx2(const float* x, size_t n, float inverse_max,
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
    if (i % 16 == 0) PrefetchLineAhead(x + i);
    const __m256 xv = _mm256_loadu_ps(x + i);
    const __m256 v = _mm256_mul_ps(_mm256_and_ps(xv, abs_mask), inv);
    // NaN bits (> 0x7f800000) stay above the floor and clamp to the last block; code 0 below.
    const __m256i bits = _mm256_max_epu32(_mm256_castps_si256(v), floor_bits);
    const __m256i block =
        _mm256_min_epu32(_mm256_sub_epi32(_mm256_srli_epi32(bits, 16), first_block), last_block);
    const __m256i entry = _mm256_i32gather_epi32(tables.block_entry, block, 4);
    // (bits & 0xffff) >= (entry >> 8), both < 2^17: a signed compare is exact.
    const __m256i passed = _mm256_cmpgt_epi32(_mm256_srli_epi32(entry, 8),
                                              _mm256_and_si256(bits, low16));  // not passed
    __m256i c = _mm256_add_epi32(_mm256_and_si256(entry, low8), _mm256_andnot_si256(passed, c1));
    c = _mm256_or_si256(
        c, _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(v, one, _CMP_GE_OQ)), c127));
    c = _mm256_and_si256(c, _mm256_castps_si256(_mm256_cmp_ps(v, zero, _CMP_GT_OQ)));
    const __m256i negative =
        _mm256_andnot_si256(_mm256_cmpeq_epi32(c, _mm256_setzero_si256()),
                            _mm256_castps_si256(_mm256_cmp_ps(xv, zero, _CMP_LT_OQ)));
    c = _mm256_or_si256(c, _mm256_and_si256(negative, _mm256_set1_epi32(0x80)));
    // 8 x int32 (each < 256) -> 8 bytes.
    const __m128i words =
        _mm_packus_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + i), _mm_packus_epi16(words, words));
  }
  return i;
}

// The same per element, 16 at a time: the compiler's AVX-512 vectorisation of the scalar code,
// which reads the table element by element into the vector (on AMD Zen 4 faster than the AVX2
// loop's hardware gather: 5.6 against 4.3 GB/s on 64 MiB).
[[gnu::target("arch=x86-64-v4")]] void U8bitEncodeAvx512(const float* __restrict x, size_t n,
                                                         float inverse_max,
                                                         const U8bitTables& tables,
                                                         uint8_t* __restrict out) {
  for (size_t i = 0; i < n; ++i) out[i] = U8bitCodeByTables(x[i], inverse_max, tables);
}

// With AVX-512 VBMI: the code computed 16 lanes at a time, with no per-element memory read.
// elementwise.h's guess, from v's bits: the decade e (the number of thresholds 10^-k at or
// above v) is the octave's count of thresholds above it plus one compare with the threshold
// inside it (a 32-entry table by the exponent's low 5 bits); g = floor(v * slope(e) -
// offset(e)) (an FMA: only the guess rounds it) is then the count of midpoints at or below v,
// or one less (offset has a margin of a quarter code each way; checked over every float in
// [0, 1] when written, the unit test checks a stride of them and the midpoints'
// neighbourhoods). One exact compare with U8bitMidpoint(g) settles it: the
// midpoints' bit patterns as four 128-entry byte tables (vpermi2b, 64 codes a step).
// v is clamped to [2^-22, 1] first (no code changes: see U8bitTables), so g is in [0, 127];
// entry 127 of the midpoints is +inf. Needs a finite 1 / max |x|.
// (GCC 12 warns that intrinsics' undefined pass-through operands "may be used uninitialized",
// a false positive of its headers, as in quant_pack.cc.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
struct U8bitRegisterTables {
  static constexpr uint32_t kFloorBits = U8bitTables::kFloorBits;
  alignas(64) float threshold[32] = {};  // by the exponent's low 5 bits; 0: none inside
  alignas(64) int32_t decades_above[32] = {};
  alignas(64) float slope[16] = {};  // by e (0..6)
  alignas(64) float offset[16] = {};
  alignas(64) uint8_t midpoint_byte[4][128];  // byte b of U8bitMidpoint(c)'s bits

  U8bitRegisterTables() {
    for (uint32_t exponent = kFloorBits >> 23; exponent <= 127; ++exponent) {
      const float low = BitsToFloat(exponent << 23), high = BitsToFloat((exponent + 1) << 23);
      for (uint32_t k = 1; k <= 6; ++k) {
        const float scale = U8bitDecadeScale(k);
        if (scale >= high) ++decades_above[exponent & 31];
        if (scale >= low && scale < high) threshold[exponent & 31] = scale;
      }
    }
    for (uint32_t e = 0; e <= 6; ++e) {
      // c = 2^f + floor(t - 1/2) for t = (v 10^e - 0.1) 2^f / 0.9 (elementwise.h), less a
      // quarter code.
      const double grid = static_cast<double>(1u << (6 - e));
      slope[e] = static_cast<float>(std::pow(10.0, e) * grid / 0.9);
      offset[e] = static_cast<float>(0.1 * grid / 0.9 - grid + 0.75);
    }
    for (uint32_t c = 0; c < 128; ++c) {
      const uint32_t bits = c < 127 ? FloatBits(U8bitMidpoint(c)) : 0x7f800000u;
      for (uint32_t b = 0; b < 4; ++b) midpoint_byte[b][c] = static_cast<uint8_t>(bits >> (8 * b));
    }
  }
};

const U8bitRegisterTables& GetU8bitRegisterTables() {
  static const U8bitRegisterTables* const tables = new U8bitRegisterTables();
  return *tables;
}

// 64 elements a step (whole steps only; returns how many it coded). kStream: out + i must be
// 64-byte aligned at i = 0, the codes bypass the caches.
template <bool kStream>
[[gnu::target("arch=x86-64-v4,avx512vbmi")]] size_t U8bitEncodeVbmi(const float* x, size_t n,
                                                                    float inverse_max,
                                                                    const U8bitRegisterTables& t,
                                                                    uint8_t* out) {
  const __m512 inv = _mm512_set1_ps(inverse_max);
  const __m512 floor_v = _mm512_castsi512_ps(_mm512_set1_epi32(U8bitRegisterTables::kFloorBits));
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512i one_i = _mm512_set1_epi32(1);
  const __m512 threshold_lo = _mm512_load_ps(t.threshold);
  const __m512 threshold_hi = _mm512_load_ps(t.threshold + 16);
  const __m512i above_lo = _mm512_load_si512(t.decades_above);
  const __m512i above_hi = _mm512_load_si512(t.decades_above + 16);
  const __m512 slope = _mm512_load_ps(t.slope);
  const __m512 offset = _mm512_load_ps(t.offset);
  __m512i mid_lo[4], mid_hi[4];
  for (int b = 0; b < 4; ++b) {
    mid_lo[b] = _mm512_load_si512(t.midpoint_byte[b]);
    mid_hi[b] = _mm512_load_si512(t.midpoint_byte[b] + 64);
  }
  // Four vectors' codes packed with vpackus (per 128-bit lane): byte 16L + 4k + j is lane
  // 4L + j of vector k. `order` puts them back: byte 16k + 4L + j from 16L + 4k + j.
  alignas(64) uint8_t order_bytes[64];
  for (int k = 0; k < 4; ++k) {
    for (int l = 0; l < 4; ++l) {
      for (int j = 0; j < 4; ++j) order_bytes[16 * k + 4 * l + j] = 16 * l + 4 * k + j;
    }
  }
  const __m512i order = _mm512_load_si512(order_bytes);
  const __m512i sign_bit = _mm512_set1_epi8(-128);
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m512i guess[4], v_bits[4], x_bits[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      PrefetchLineAhead(x + i + 16 * k);
      const __m512 xv = _mm512_loadu_ps(x + i + 16 * k);
      x_bits[k] = _mm512_castps_si512(xv);
      // max(|x * inv|, 2^-22) (vrangeps: the larger magnitude, sign cleared), then min 1.
      const __m512 v = _mm512_min_ps(_mm512_range_ps(_mm512_mul_ps(xv, inv), floor_v, 0x0b), one);
      v_bits[k] = _mm512_castps_si512(v);
      const __m512i exponent = _mm512_srli_epi32(v_bits[k], 23);
      const __m512 threshold = _mm512_permutex2var_ps(threshold_lo, exponent, threshold_hi);
      __m512i e = _mm512_permutex2var_epi32(above_lo, exponent, above_hi);
      e = _mm512_mask_add_epi32(e, _mm512_cmp_ps_mask(v, threshold, _CMP_LE_OQ), e, one_i);
      const __m512 position =
          _mm512_fmsub_ps(v, _mm512_permutexvar_ps(e, slope), _mm512_permutexvar_ps(e, offset));
      guess[k] = _mm512_cvt_roundps_epi32(position, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    }
    const __m512i g = _mm512_packus_epi16(_mm512_packus_epi32(guess[0], guess[1]),
                                          _mm512_packus_epi32(guess[2], guess[3]));
    const __m512i m0 = _mm512_permutex2var_epi8(mid_lo[0], g, mid_hi[0]);
    const __m512i m1 = _mm512_permutex2var_epi8(mid_lo[1], g, mid_hi[1]);
    const __m512i m2 = _mm512_permutex2var_epi8(mid_lo[2], g, mid_hi[2]);
    const __m512i m3 = _mm512_permutex2var_epi8(mid_lo[3], g, mid_hi[3]);
    // The byte planes back to 32-bit midpoints, vector k's from bytes 4k..4k+3 of each lane.
    const __m512i lo01 = _mm512_unpacklo_epi8(m0, m1), hi01 = _mm512_unpackhi_epi8(m0, m1);
    const __m512i lo23 = _mm512_unpacklo_epi8(m2, m3), hi23 = _mm512_unpackhi_epi8(m2, m3);
    const __m512i midpoint[4] = {
        _mm512_unpacklo_epi16(lo01, lo23), _mm512_unpackhi_epi16(lo01, lo23),
        _mm512_unpacklo_epi16(hi01, hi23), _mm512_unpackhi_epi16(hi01, hi23)};
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __mmask16 passed = _mm512_cmp_epu32_mask(v_bits[k], midpoint[k], _MM_CMPINT_NLT);
      guess[k] = _mm512_mask_add_epi32(guess[k], passed, guess[k], one_i);
    }
    __m512i c = _mm512_packus_epi16(_mm512_packus_epi32(guess[0], guess[1]),
                                    _mm512_packus_epi32(guess[2], guess[3]));
    // The sign: x's bits packed alike with signed saturation keep their sign (-0 codes 0).
    const __m512i sign = _mm512_packs_epi16(_mm512_packs_epi32(x_bits[0], x_bits[1]),
                                            _mm512_packs_epi32(x_bits[2], x_bits[3]));
    const __mmask64 negative = _mm512_mask_test_epi8_mask(_mm512_movepi8_mask(sign), c, c);
    c = _mm512_mask_add_epi8(c, negative, c, sign_bit);  // c <= 127: + 0x80 sets bit 7
    c = _mm512_permutexvar_epi8(order, c);
    if constexpr (kStream) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(out + i), c);
    } else {
      _mm512_storeu_si512(out + i, c);
    }
  }
  return i;
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// Inputs from this size up (larger than the last-level cache: the max pass before has read
// them from memory) have their codes written with non-temporal stores.
constexpr size_t kStreamInputBytes = size_t{32} << 20;

void U8bitEncode(const float* x, size_t n, float max_abs, const U8bitTables& tables, uint8_t* out) {
  const SimdLevel level = CpuSimdLevel();  // honours BYTECOMP_SIMD
  const float inverse_max = 1.0f / max_abs;
  if (CpuHasAvx512Vbmi() && std::isfinite(inverse_max)) {
    const U8bitRegisterTables& registers = GetU8bitRegisterTables();
    size_t done = 0;
    if (n * sizeof(float) >= kStreamInputBytes) {
      // Up to the first 64-byte boundary of the codes by table, then streamed.
      const size_t head = std::min(n, (64 - reinterpret_cast<uintptr_t>(out) % 64) % 64);
      U8bitEncodeAvx512(x, head, inverse_max, tables, out);
      done = head + U8bitEncodeVbmi<true>(x + head, n - head, inverse_max, registers, out + head);
      _mm_sfence();
    } else {
      done = U8bitEncodeVbmi<false>(x, n, inverse_max, registers, out);
    }
    return U8bitEncodeAvx512(x + done, n - done, inverse_max, tables, out + done);
  }
  if (level == SimdLevel::kAvx512) return U8bitEncodeAvx512(x, n, inverse_max, tables, out);
  const size_t done =
      level == SimdLevel::kAvx2 ? U8bitEncodeAvx2(x, n, inverse_max, tables, out) : 0;
  for (size_t i = done; i < n; ++i) out[i] = U8bitCodeByTables(x[i], inverse_max, tables);
}

BYTECOMP_SIMD_KERNEL(bool, HasNegativeZero, (const uint8_t* codes, size_t n), (codes, n)) {
  uint8_t any = 0;
  for (size_t i = 0; i < n; ++i) any |= codes[i] == u8bit::kNegativeZero ? 1u : 0u;
  return any != 0;
}

class U8bitCodec final : public Codec {
 public:
  absl::string_view name() const override { return "u8bit"; }
  CodecProperties properties() const override { return {}; }
  size_t MaxEncodedBytes(size_t n) const override { return u8bit::PayloadBytes(n); }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext&,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    uint32_t max_bits = 0;
    if (auto s = codec_checks::CheckEncodeCallAndFinite(*this, input, out.size(), &max_bits);
        !s.ok()) {
      return s;
    }
    const float max_abs = BitsToFloat(max_bits);
    PutF32(out.data(), max_abs);
    U8bitEncode(input.data(), n, max_abs, GetU8bitTables(), out.data() + u8bit::kHeaderBytes);
    return u8bit::PayloadBytes(n);
  }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                      absl::Span<float> output) override {
    const size_t n = output.size();
    if (auto s = FormatErrorStatus(name(), u8bit::CheckHeader(encoded.data(), encoded.size(), n));
        !s.ok()) {
      return s;
    }
    const float max_abs = GetF32(encoded.data());
    const uint8_t* codes = encoded.data() + u8bit::kHeaderBytes;
    float table[256];
    for (uint32_t c = 0; c < 256; ++c) table[c] = U8bitValue(static_cast<uint8_t>(c), max_abs);
    // Blocks checked (a vectorised test for 0x80) and decoded while in L1: one pass.
    constexpr size_t kBlock = 4096;
    const bool stream = StreamOutput(output.data(), n);
    for (size_t begin = 0; begin < n; begin += kBlock) {
      const size_t len = std::min(kBlock, n - begin);
      if (HasNegativeZero(codes + begin, len)) {
        const size_t i = static_cast<size_t>(
            std::find(codes + begin, codes + begin + len, u8bit::kNegativeZero) - codes);
        return FormatErrorStatus(name(), u8bit::CheckCode(codes[i], i));
      }
      float* out = output.data() + begin;
      const uint8_t* c = codes + begin;
      size_t i = 0;
      if (stream) {  // kBlock is a multiple of 4: every block starts 16-byte aligned
        for (; i + 4 <= len; i += 4) {
          _mm_stream_ps(
              out + i, _mm_setr_ps(table[c[i]], table[c[i + 1]], table[c[i + 2]], table[c[i + 3]]));
        }
      }
      for (; i < len; ++i) out[i] = table[c[i]];
    }
    if (stream) StreamDone();
    return absl::OkStatus();
  }
};

}  // namespace

void RegisterU8bitCodec(CodecRegistry& registry) {
  CodecSpec spec = ParameterlessSpec<U8bitCodec>(
      "u8bit", "8-bit dynamic tree quantisation (Dettmers) of x / max |x|");
  spec.facts = {.gpu_kernel = true,
                .gpu_memories = {MemoryKind::kResidual},
                .encode_target = EncodeSpeedTarget::kElementwise};
  MustRegister(registry, std::move(spec));
}

}  // namespace bytecomp::compress
