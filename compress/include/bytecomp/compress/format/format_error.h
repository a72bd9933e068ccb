// What is wrong with a payload, as the format headers' checks report it: a code and the numbers
// its message needs. The checks are __host__ __device__ functions, so a CPU decoder, the CUDA
// host code and a CUDA kernel report the same codes; FormatErrorStatus (host only) turns one
// into the InvalidArgument "codec 'x': malformed payload: <text>" that every decoder returns.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "bytecomp/compress/format/host_device.h"
#include "bytecomp/compress/format/little_endian.h"

namespace bytecomp::compress {

// The numbers a, b, c, d that each message uses are named after it.
enum class FormatErrorCode : uint32_t {
  kNone = 0,
  // Payload size and element count (every format).
  kPayloadSize,          // a bytes for b elements (expected c)
  kPayloadTooShort,      // a bytes for b elements (at least c expected)
  kShorterThanHeader,    // a bytes, shorter than the header
  kSizeVsHeader,         // a bytes, header says b
  kSizeVsExpected,       // a bytes, expected b
  kElementCount,         // payload for a elements decoded into b
  kMessageElementCount,  // message holds a elements, expected b
  kUnknownVersion,       // unknown version a
  // Values.
  kPayloadNotFinite,      // payload holds NaN or Inf
  kValuesNotFinite,       // values hold NaN or Inf
  kHeaderValueNotFinite,  // <value a> is not finite
  kHeaderValueNegative,   // <value a> is negative (float with bits b)
  kBucketNormNotFinite,   // norm of bucket a is not finite
  kBucketNormNegative,    // norm of bucket a is negative (float with bits b)
  // Codes.
  kSignPaddingNotZero,   // padding bits after element a are not zero
  kCodePaddingNotZero,   // padding bits after the last code are not zero
  kLevelAboveQuantum,    // level a exceeds quantum_num b
  kTernaryCode3,         // ternary code 3
  kExponentLowRange,     // exponent_low a outside 1..254
  kNaturalCodeRange,     // code a with exponent_low b exceeds the float range
  kNaturalNegativeZero,  // byte 0x80 (negative zero) is not a code
  kLevelAboveK,          // level a exceeds k b (dithering)
  kU8bitNegativeZero,    // byte 0x80 (negative zero) at element a
  kTagPaddingNotZero,    // padding bits after the last tag are not zero (inceptionn)
  kFp32ValueNotFinite,   // fp32 value a is not finite (inceptionn: the a-th of tag 3)
  kMultipleOverflows,    // a stored multiple overflows the float range (inceptionn)
  kBucketMeanNotFinite,  // mean a is not finite (sketch)
  kIdPaddingNotZero,     // padding bits after the last id are not zero (sketch)
  kBucketIdRange,        // bucket id a at element b (quantiles c) (sketch)
  // Sparse messages and their index sections.
  kKAboveN,               // k = a > n = b
  kWrongK,                // k = a, expected b
  kRandomkHeader,         // header says n = a, k = b; expected n = c, k = d
  kUnknownIndexEncoding,  // unknown index encoding a
  kRawSectionSize,        // raw index section of a bytes for b indices
  kIndicesNotIncreasing,  // indices not strictly increasing below a
  kIndexWidth,            // index width a > 32
  kBitPackSectionSize,    // bit-packed index section of a bytes for b indices of c bits
  kIndexOutOfRange,       // index a >= b
  kVarintEndsEarly,       // varint index section ends early
  kVarintTooLong,         // varint index longer than 5 bytes
  kVarintTrailingBytes,   // a bytes left after b varint indices
  // adaq's messages (adaq_format.h).
  kSignedKAboveN,   // k_pos + k_neg = a > n = b
  kMeansNotFinite,  // means are NaN or Inf
  kIndexBothSigns,  // index a is both positive and negative
  // Block-sparse messages (blocksparse_format.h).
  kBlockSize,                 // block size a, expected b
  kBlocksCarried,             // a blocks carried, the tensor has b
  kBlockPositions,            // positions a (0 index list or 1 bitmap)
  kBlockPositionsNotSmaller,  // positions a for b of c blocks: the other section is smaller
  kBlockSparseSize,           // a bytes for b blocks (expected c, or d with the short last block)
  kBitmapPadding,             // bitmap bits from block a on are not zero
  kBitmapCount,               // bitmap marks a blocks, the header says b
  // Two-round stages (artopk_format.h).
  kWrongStage,       // stage a payload, expected stage b
  kCandidateFields,  // candidate flag a, index encoding b, width c, index_bytes d: not a
                     // candidate's nor an empty push's
  // PowerSGD's single payload (powersgd_format.h).
  kSinglePayloadStage,     // stage a in a single payload
  kFactorsNotFinite,       // non-finite factor values
  kFactorProductOverflow,  // the factors' product overflows the float range
};

// The header values that kHeaderValueNotFinite / kHeaderValueNegative name (their a).
enum HeaderValue : uint32_t {
  kScaleValue = 0,            // "scale" (efsignsgd, terngrad)
  kNonNegativePartValue,      // "value of non-negative elements" (onebit)
  kNegativePartValueNegated,  // "value of negative elements (negated)" (onebit)
  kNormValue,                 // "norm" (dithering)
  kMaxAbsValue,               // "max |x|" (u8bit)
};

struct FormatError {
  FormatErrorCode code = FormatErrorCode::kNone;
  uint64_t a = 0, b = 0, c = 0, d = 0;

  BYTECOMP_HD bool ok() const { return code == FormatErrorCode::kNone; }
};

BYTECOMP_HD FormatError MakeFormatError(FormatErrorCode code, uint64_t a = 0, uint64_t b = 0,
                                        uint64_t c = 0, uint64_t d = 0) {
  FormatError e;
  e.code = code;
  e.a = a;
  e.b = b;
  e.c = c;
  e.d = d;
  return e;
}

// A header value that must be finite and, when must_be_non_negative, not negative.
BYTECOMP_HD FormatError CheckHeaderValue(float value, HeaderValue what, bool must_be_non_negative) {
  if ((FloatBits(value) & 0x7fffffffu) >= 0x7f800000u) {
    return MakeFormatError(FormatErrorCode::kHeaderValueNotFinite, what);
  }
  if (must_be_non_negative && value < 0.0f) {
    return MakeFormatError(FormatErrorCode::kHeaderValueNegative, what, FloatBits(value));
  }
  return FormatError();
}

// The payload's size is exactly `expected` bytes for n elements.
BYTECOMP_HD FormatError CheckPayloadSize(uint64_t have, uint64_t expected, uint64_t n) {
  if (have == expected) return FormatError();
  return MakeFormatError(FormatErrorCode::kPayloadSize, have, n, expected);
}

// The u32 element count leading the bit-packed payloads (sign codecs, qsgd, terngrad,
// dithering, sketch): a padded bit stream alone cannot tell n from n - 1.
BYTECOMP_HD FormatError CheckElementCount(uint32_t count, uint64_t n) {
  if (count == n) return FormatError();
  return MakeFormatError(FormatErrorCode::kElementCount, count, n);
}

// Both, for the payloads that lead with u32 n: the size, then the count at header[0, 4)
// (read only when the size is right).
BYTECOMP_HD FormatError CheckSizeAndCount(const uint8_t* header, uint64_t bytes, uint64_t expected,
                                          uint64_t n) {
  FormatError e = CheckPayloadSize(bytes, expected, n);
  if (e.ok()) e = CheckElementCount(GetU32(header), n);
  return e;
}

// Host only: the message text, and the InvalidArgument status naming the codec.
std::string FormatErrorText(const FormatError& error);
absl::Status FormatErrorStatus(absl::string_view codec, const FormatError& error);

}  // namespace bytecomp::compress
