#include "quant_pack.h"
#include "exact_float_math.h"  // first: see there

#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "bytecomp/compress/codec_util.h"
#include "simd_kernel.h"

namespace bytecomp::compress {
namespace {

// 8 codes of kBits <= 8 bits -> kBits bytes through one 64-bit word; constant shifts. Groups
// whose 8-byte word ends inside the groups' bytes store (and load) the whole word: the bytes
// past the group are zeros that the next groups overwrite (packing), or bits that are masked
// off (unpacking); the last groups move exactly kBits bytes.
template <uint32_t kBits>
__attribute__((always_inline)) inline void PackGroups8Body(const uint16_t* __restrict codes,
                                                           size_t groups, uint8_t* __restrict out) {
  for (size_t g = 0; g < groups; ++g) {
    const uint16_t* c = codes + 8 * g;
    uint64_t word = 0;
    for (uint32_t j = 0; j < 8; ++j) word |= static_cast<uint64_t>(c[j]) << (j * kBits);
    if ((g + 1) * kBits + (8 - kBits) <= groups * kBits) {  // 8 bytes inside the groups
      std::memcpy(out + g * kBits, &word, 8);
    } else {
      std::memcpy(out + g * kBits, &word, kBits);
    }
  }
}

template <uint32_t kBits>
__attribute__((always_inline)) inline void UnpackGroups8Body(const uint8_t* __restrict in,
                                                             size_t groups,
                                                             uint16_t* __restrict codes) {
  constexpr uint64_t kMask = (uint64_t{1} << kBits) - 1;
  for (size_t g = 0; g < groups; ++g) {
    uint64_t word = 0;
    if ((g + 1) * kBits + (8 - kBits) <= groups * kBits) {  // 8 bytes inside the groups
      std::memcpy(&word, in + g * kBits, 8);
    } else {
      std::memcpy(&word, in + g * kBits, kBits);
    }
    uint16_t* c = codes + 8 * g;
    for (uint32_t j = 0; j < 8; ++j) c[j] = static_cast<uint16_t>((word >> (j * kBits)) & kMask);
  }
}

BYTECOMP_SIMD_KERNEL(void, PackGroups8,
                     (const uint16_t* codes, size_t groups, uint32_t bits, uint8_t* out),
                     (codes, groups, bits, out)) {
  switch (bits) {
    case 1:
      PackGroups8Body<1>(codes, groups, out);
      return;
    case 2:
      PackGroups8Body<2>(codes, groups, out);
      return;
    case 3:
      PackGroups8Body<3>(codes, groups, out);
      return;
    case 4:
      PackGroups8Body<4>(codes, groups, out);
      return;
    case 5:
      PackGroups8Body<5>(codes, groups, out);
      return;
    case 6:
      PackGroups8Body<6>(codes, groups, out);
      return;
    default:
      PackGroups8Body<7>(codes, groups, out);
      return;
  }
}

BYTECOMP_SIMD_KERNEL(void, UnpackGroups8,
                     (const uint8_t* in, size_t groups, uint32_t bits, uint16_t* codes),
                     (in, groups, bits, codes)) {
  switch (bits) {
    case 1:
      UnpackGroups8Body<1>(in, groups, codes);
      return;
    case 2:
      UnpackGroups8Body<2>(in, groups, codes);
      return;
    case 3:
      UnpackGroups8Body<3>(in, groups, codes);
      return;
    case 4:
      UnpackGroups8Body<4>(in, groups, codes);
      return;
    case 5:
      UnpackGroups8Body<5>(in, groups, codes);
      return;
    case 6:
      UnpackGroups8Body<6>(in, groups, codes);
      return;
    default:
      UnpackGroups8Body<7>(in, groups, codes);
      return;
  }
}

BYTECOMP_SIMD_KERNEL(void, NarrowBytes, (const uint16_t* codes, size_t n, uint8_t* out),
                     (codes, n, out)) {
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(codes[i]);
}

BYTECOMP_SIMD_KERNEL(void, WidenBytes, (const uint8_t* in, size_t n, uint16_t* codes),
                     (in, n, codes)) {
  for (size_t i = 0; i < n; ++i) codes[i] = in[i];
}

// AVX-512 VBMI: 64 codes (8 groups) a step, in registers. The codes' low bytes into one
// register (a two-register byte permute); then pairs of fields merged in ever wider lanes, each
// field's upper neighbour shifted down onto its end (16-bit lanes: c0 | c1 << b, 32-bit:
// w0 | w1 << 2b, 64-bit: d0 | d1 << 4b: each 64-bit lane is one group's word, as
// PackGroups8Body's); a byte permute then moves each lane's b bytes together, and a masked
// store writes the 8b bytes. Unpacking runs the same steps backwards.
// (GCC 12 warns that the immediate shifts' undefined pass-through operand "may be used
// uninitialized", a false positive of its intrinsic headers.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
struct VbmiTables {
  alignas(64) uint8_t low_bytes[64];   // byte p: the low byte of code p (of two registers)
  alignas(64) uint8_t gather[8][64];   // [b]: byte p = byte p % b of lane p / b
  alignas(64) uint8_t scatter[8][64];  // [b]: byte 8q + r = byte qb + r (r < b; else 0)
  VbmiTables() {
    for (uint32_t p = 0; p < 64; ++p) low_bytes[p] = static_cast<uint8_t>(2 * p);
    for (uint32_t b = 1; b < 8; ++b) {
      for (uint32_t p = 0; p < 64; ++p) {
        gather[b][p] = static_cast<uint8_t>(p < 8 * b ? 8 * (p / b) + p % b : 0);
        scatter[b][p] = static_cast<uint8_t>(p % 8 < b ? (p / 8) * b + p % 8 : 0);
      }
    }
  }
};

const VbmiTables& Vbmi() {
  static const VbmiTables tables;
  return tables;
}

template <uint32_t kBits>
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) size_t PackGroups8Vbmi(
    const uint16_t* __restrict codes, size_t groups, uint8_t* __restrict out) {
  const VbmiTables& t = Vbmi();
  const __m512i low_bytes = _mm512_load_si512(t.low_bytes);
  const __m512i gather = _mm512_load_si512(t.gather[kBits]);
  const __m512i m16 = _mm512_set1_epi16(static_cast<int16_t>(0xff00));
  const __m512i m32 = _mm512_set1_epi32(static_cast<int32_t>(0xffff0000u));
  const __m512i m64 = _mm512_set1_epi64(static_cast<int64_t>(0xffffffff00000000ull));
  const __mmask64 store = (uint64_t{1} << (8 * kBits)) - 1;
  size_t g = 0;
  for (; g + 8 <= groups; g += 8) {
    const __m512i a = _mm512_loadu_si512(codes + 8 * g);
    const __m512i b = _mm512_loadu_si512(codes + 8 * g + 32);
    __m512i v = _mm512_permutex2var_epi8(a, low_bytes, b);
    v = _mm512_or_si512(_mm512_andnot_si512(m16, v),
                        _mm512_srli_epi16(_mm512_and_si512(v, m16), 8 - kBits));
    v = _mm512_or_si512(_mm512_andnot_si512(m32, v),
                        _mm512_srli_epi32(_mm512_and_si512(v, m32), 16 - 2 * kBits));
    v = _mm512_or_si512(_mm512_andnot_si512(m64, v),
                        _mm512_srli_epi64(_mm512_and_si512(v, m64), 32 - 4 * kBits));
    _mm512_mask_storeu_epi8(out + g * kBits, store, _mm512_permutexvar_epi8(gather, v));
  }
  return g;
}

template <uint32_t kBits>
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) size_t UnpackGroups8Vbmi(
    const uint8_t* __restrict in, size_t groups, uint16_t* __restrict codes) {
  const VbmiTables& t = Vbmi();
  const __m512i scatter = _mm512_load_si512(t.scatter[kBits]);
  const __m512i f64 = _mm512_set1_epi64(static_cast<int64_t>((uint64_t{1} << (4 * kBits)) - 1));
  const __m512i f32 = _mm512_set1_epi32(static_cast<int32_t>((1u << (2 * kBits)) - 1));
  const __m512i f16 = _mm512_set1_epi16(static_cast<int16_t>((1u << kBits) - 1));
  const __mmask64 load = (uint64_t{1} << (8 * kBits)) - 1;
  size_t g = 0;
  for (; g + 8 <= groups; g += 8) {
    __m512i v = _mm512_permutexvar_epi8(scatter, _mm512_maskz_loadu_epi8(load, in + g * kBits));
    v = _mm512_or_si512(
        _mm512_and_si512(v, f64),
        _mm512_slli_epi64(_mm512_and_si512(_mm512_srli_epi64(v, 4 * kBits), f64), 32));
    v = _mm512_or_si512(
        _mm512_and_si512(v, f32),
        _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(v, 2 * kBits), f32), 16));
    v = _mm512_or_si512(_mm512_and_si512(v, f16),
                        _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(v, kBits), f16), 8));
    _mm512_storeu_si512(codes + 8 * g, _mm512_cvtepu8_epi16(_mm512_castsi512_si256(v)));
    _mm512_storeu_si512(codes + 8 * g + 32, _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(v, 1)));
  }
  return g;
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// f(std::integral_constant<uint32_t, bits>) for bits in [1, 8) (7 for any other).
template <typename F>
size_t WithBits(uint32_t bits, F&& f) {
  switch (bits) {
    case 1:
      return f(std::integral_constant<uint32_t, 1>{});
    case 2:
      return f(std::integral_constant<uint32_t, 2>{});
    case 3:
      return f(std::integral_constant<uint32_t, 3>{});
    case 4:
      return f(std::integral_constant<uint32_t, 4>{});
    case 5:
      return f(std::integral_constant<uint32_t, 5>{});
    case 6:
      return f(std::integral_constant<uint32_t, 6>{});
    default:
      return f(std::integral_constant<uint32_t, 7>{});
  }
}

// The VBMI kernels for bits in [1, 8) over whole steps of 8 groups; they return the groups
// done (none without VBMI).
size_t PackGroups8Fast(const uint16_t* codes, size_t groups, uint32_t bits, uint8_t* out) {
  if (!CpuHasAvx512Vbmi()) return 0;
  return WithBits(bits,
                  [&](auto b) { return PackGroups8Vbmi<decltype(b)::value>(codes, groups, out); });
}

size_t UnpackGroups8Fast(const uint8_t* in, size_t groups, uint32_t bits, uint16_t* codes) {
  if (!CpuHasAvx512Vbmi()) return 0;
  return WithBits(bits,
                  [&](auto b) { return UnpackGroups8Vbmi<decltype(b)::value>(in, groups, codes); });
}

}  // namespace

void PackCodes(const uint16_t* codes, size_t n, uint32_t bits, uint8_t* out) {
  if (bits == 8) {
    NarrowBytes(codes, n, out);
    return;
  }
  if (bits == 16) {
    if (n != 0) std::memcpy(out, codes, 2 * n);
    return;
  }
  size_t done = 0;
  if (bits < 8) {
    const size_t fast = PackGroups8Fast(codes, n / 8, bits, out);
    PackGroups8(codes + 8 * fast, n / 8 - fast, bits, out + fast * bits);
    done = n / 8 * 8;
  }
  if (done == n) return;  // (an empty tail: out may be the null data() of an empty buffer)
  BitWriter writer(out + done * bits / 8);
  for (size_t i = done; i < n; ++i) writer.Put(codes[i], static_cast<int>(bits));
  writer.Finish();
}

bool UnpackCodes(const uint8_t* in, size_t n, uint32_t bits, uint16_t* codes) {
  const size_t bytes = PackedBytes(n, static_cast<int>(bits));
  if (bits == 8) {
    WidenBytes(in, n, codes);
    return true;
  }
  if (bits == 16) {
    if (n != 0) std::memcpy(codes, in, 2 * n);
    return true;
  }
  size_t done = 0;
  if (bits < 8) {
    const size_t fast = UnpackGroups8Fast(in, n / 8, bits, codes);
    UnpackGroups8(in + fast * bits, n / 8 - fast, bits, codes + 8 * fast);
    done = n / 8 * 8;
  }
  const size_t offset = done * bits / 8;
  BitReader reader(in + offset, bytes - offset);
  for (size_t i = done; i < n; ++i)
    codes[i] = static_cast<uint16_t>(reader.Get(static_cast<int>(bits)));
  const uint32_t used_bits = static_cast<uint32_t>((n * bits) % 8);
  if (used_bits == 0 || bytes == 0) return true;
  return (in[bytes - 1] >> used_bits) == 0;
}

}  // namespace bytecomp::compress
