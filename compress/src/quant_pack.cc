#include "quant_pack.h"
#include "exact_float_math.h"  // first: see there

#include <cstring>

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
    PackGroups8(codes, n / 8, bits, out);
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
    UnpackGroups8(in, n / 8, bits, codes);
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
