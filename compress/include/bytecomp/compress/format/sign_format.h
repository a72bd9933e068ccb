// The payloads of the sign codecs, written and read by the CPU codecs
// (compress/src/sign_codecs.cc) and the CUDA ones (compress/cuda/src/sign_kernels.cu).
// Little-endian; each starts with u32 n, the element count, which the decoder checks against
// the output length (the padded bit stream alone cannot tell n from n - 1):
//   signsgd, signum  u32 n, then SignBytes(n) bytes of sign bits. Size 4 + ceil(n/8).
//   efsignsgd        u32 n, f32 scale = mean |x| (sum in double), then the sign bits.
//   onebit           u32 n, f32 value of bit 0, f32 value of bit 1, then the sign bits;
//                    OnebitValues says which values for each scaling.
// Sign bits (elementwise.h SignBit): bit 1 = x < 0, bit 0 = x >= 0 (zeros and -0.0 included);
// element i is bit i % 8 of byte i / 8; the padding bits of the last byte are 0. Decoded: the
// value of the element's bit (signsgd, signum: +1 and -1; efsignsgd: +scale and -scale).
// Decoders reject a wrong size or count, non-finite or wrongly signed header values and
// non-zero padding bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/format_error.h"
#include "bytecomp/compress/format/host_device.h"
#include "bytecomp/compress/format/little_endian.h"

namespace bytecomp::compress::sign {

BYTECOMP_HD size_t SignBytes(size_t n) { return (n + 7) / 8; }

// The header: u32 n, then `values` f32 (0 signsgd/signum, 1 efsignsgd, 2 onebit).
BYTECOMP_HD size_t HeaderBytes(int values) { return 4 + 4 * static_cast<size_t>(values); }
BYTECOMP_HD size_t PayloadBytes(int values, size_t n) { return HeaderBytes(values) + SignBytes(n); }

// What bits 0 and 1 decode to.
struct SignValues {
  float clear = 1.0f;  // bit 0: x >= 0
  float set = -1.0f;   // bit 1: x < 0
};

// Sums of the non-negative and of the negative elements (in double; the GPU sums in another
// order, see elementwise.h) and the negative count: what the scaled codecs' values come from.
struct SignSums {
  double non_negative = 0.0;  // sum of x >= 0
  double negative = 0.0;      // sum of x < 0 (<= 0)
  size_t negative_count = 0;
};

// efsignsgd: scale = mean |x| (0 for n == 0); decoded +-scale.
BYTECOMP_HD float EfSignScale(const SignSums& sums, size_t n) {
  return n == 0 ? 0.0f : static_cast<float>((sums.non_negative - sums.negative) / n);
}

// onebit's scaling parameter: means (GRACE: the mean of each sign's part, 0 for an empty
// part), l1 (BytePS with scaling: +-mean |x|), none (BytePS without scaling: +-1).
enum class OnebitScaling { kMeans, kL1, kNone };

// The parameter's value ("means", "l1", "none"; the registry admits no other) as the enum.
inline OnebitScaling OnebitScalingNamed(absl::string_view scaling) {
  return scaling == "l1" ? OnebitScaling::kL1
                         : (scaling == "none" ? OnebitScaling::kNone : OnebitScaling::kMeans);
}

BYTECOMP_HD SignValues OnebitValues(OnebitScaling scaling, const SignSums& sums, size_t n) {
  SignValues v;
  if (scaling == OnebitScaling::kMeans) {
    const size_t non_negative_count = n - sums.negative_count;
    v.clear =
        non_negative_count == 0 ? 0.0f : static_cast<float>(sums.non_negative / non_negative_count);
    v.set =
        sums.negative_count == 0 ? 0.0f : static_cast<float>(sums.negative / sums.negative_count);
  } else if (scaling == OnebitScaling::kL1) {
    v.clear = EfSignScale(sums, n);
    v.set = -v.clear;
  }
  return v;
}

// Writes the header: n and the values the codec carries (`values` of them, as HeaderBytes).
BYTECOMP_HD void WriteHeader(uint8_t* out, uint32_t n, int values, SignValues decoded) {
  PutU32(out, n);
  if (values >= 1) PutF32(out + 4, decoded.clear);
  if (values >= 2) PutF32(out + 8, decoded.set);
}

// The decoded values a header carries: +-1 without values, +-scale with one, both with two.
BYTECOMP_HD SignValues ReadValues(const uint8_t* header, int values) {
  SignValues v;
  if (values >= 1) {
    v.clear = GetF32(header + 4);
    v.set = values >= 2 ? GetF32(header + 8) : -v.clear;
  }
  return v;
}

// Checks a payload of `bytes` bytes whose HeaderBytes(values) first bytes are at header against
// the decode length n: size, count, and that the values are finite with the signs of their
// bits. The padding bits are checked apart (PaddingIsZero), at the payload's end.
BYTECOMP_HD FormatError CheckHeader(const uint8_t* header, size_t bytes, size_t n, int values) {
  FormatError e = CheckSizeAndCount(header, bytes, PayloadBytes(values, n), n);
  if (!e.ok() || values == 0) return e;
  const SignValues v = ReadValues(header, values);
  if (values == 1) return CheckHeaderValue(v.clear, kScaleValue, true);
  e = CheckHeaderValue(v.clear, kNonNegativePartValue, true);
  if (e.ok()) e = CheckHeaderValue(-v.set, kNegativePartValueNegated, true);
  return e;
}

// Whether the padding bits after element n in the last byte of the bits are all 0.
BYTECOMP_HD bool PaddingIsZero(const uint8_t* bits, size_t n) {
  return n % 8 == 0 || (bits[n / 8] >> (n % 8)) == 0;
}
BYTECOMP_HD FormatError CheckPadding(const uint8_t* bits, size_t n) {
  if (PaddingIsZero(bits, n)) return FormatError();
  return MakeFormatError(FormatErrorCode::kSignPaddingNotZero, n);
}

// ---- the GPU's decomposition: a warp packs 32 elements into one little-endian 32-bit word
// (a ballot); the host tests build the same word with WordBit.

// The bit of element `lane` in its 32-element word.
BYTECOMP_HD uint32_t WordBit(float x, uint32_t lane) { return SignBit(x) << lane; }

// Stores the word of elements base..base+31 (base a multiple of 32) into the SignBytes(n)
// bytes at bits; the last word stores only the bytes that exist.
BYTECOMP_HD void StoreWord(uint8_t* bits, size_t n, size_t base, uint32_t word) {
  const size_t sign_bytes = SignBytes(n);
  const size_t byte = base / 8;
  if (byte + 4 <= sign_bytes) {
    for (int k = 0; k < 4; ++k) bits[byte + k] = static_cast<uint8_t>(word >> (8 * k));
  } else {
    for (size_t b = byte; b < sign_bytes; ++b) {
      bits[b] = static_cast<uint8_t>(word >> (8 * (b - byte)));
    }
  }
}

// What element x decodes to (the fused memories' `decoded`).
BYTECOMP_HD float Decoded(float x, SignValues values) {
  return SignBit(x) ? values.set : values.clear;
}

}  // namespace bytecomp::compress::sign
