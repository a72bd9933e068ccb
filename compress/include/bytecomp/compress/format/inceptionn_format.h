// inceptionn's payload, written and read by the CPU codec (compress/src/quant_inceptionn.cc)
// and the CUDA one (compress/cuda/src/quant_more_kernels.cu). Little-endian:
//   u32 n (checked against the decode length), TagBytes(n) = ceil(n/4) bytes of 2-bit tags
//   (element i in bits 2(i%4)..2(i%4)+1 of byte i/4, padding bits 0), then the int8 values of
//   the tag-1 elements, the int16 values of the tag-2 elements and the f32 values of the tag-3
//   elements, each section in element order. Tags and values: elementwise.h InceptionnTag,
//   InceptionnSteps, InceptionnStepsValue (0 dropped, 1 an int8 multiple of 2 eb, 2 an int16
//   one, 3 the fp32 value). Size: 4 + ceil(n/4) + c1 + 2 c2 + 4 c3 (c_t: elements with tag t);
//   at most 4 + ceil(n/4) + 4n.
// Decoders reject a payload shorter than the tags, a wrong count, non-zero padding bits, a size
// other than the tags say, a non-finite fp32 value and a multiple that overflows the float range
// (never written: only a huge error bound and a forged multiple reach it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/bit_stream.h"
#include "bytecomp/compress/format/format_error.h"
#include "bytecomp/compress/format/host_device.h"
#include "bytecomp/compress/format/little_endian.h"

namespace bytecomp::compress::inceptionn {

// The error bound beyond its own range (host only; both codecs' factories): [1e-37, 1e37], so
// that 2 eb and the multiples stay normal floats.
inline absl::Status CheckParams(double error_bound) {
  if (error_bound >= 1e-37 && error_bound <= 1e37) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("codec 'inceptionn': error_bound ", error_bound, " is outside [1e-37, 1e37]"));
}

BYTECOMP_HD size_t TagBytes(size_t n) { return (n + 3) / 4; }
// Where the values start: after the count and the tags.
BYTECOMP_HD size_t ValuesStart(size_t n) { return 4 + TagBytes(n); }
BYTECOMP_HD size_t MaxPayloadBytes(size_t n) { return ValuesStart(n) + 4 * n; }

// How many elements carry tags 1, 2 and 3 (of a group, before it, or of the whole tensor).
struct TagCounts {
  uint32_t int8 = 0;
  uint32_t int16 = 0;
  uint32_t fp32 = 0;
};
BYTECOMP_HD TagCounts operator+(TagCounts a, TagCounts b) {
  return TagCounts{a.int8 + b.int8, a.int16 + b.int16, a.fp32 + b.fp32};
}
BYTECOMP_HD void CountTag(uint32_t tag, TagCounts* counts) {
  counts->int8 += tag == 1u ? 1u : 0u;
  counts->int16 += tag == 2u ? 1u : 0u;
  counts->fp32 += tag == 3u ? 1u : 0u;
}

BYTECOMP_HD size_t PayloadBytes(size_t n, TagCounts totals) {
  return ValuesStart(n) + totals.int8 + 2 * size_t{totals.int16} + 4 * size_t{totals.fp32};
}

// Element i's tag as bits of its tag byte, and read back from the tags.
BYTECOMP_HD uint8_t TagBits(uint32_t tag, size_t i) {
  return static_cast<uint8_t>(tag << (2 * (i % 4)));
}
BYTECOMP_HD uint32_t TagInByte(uint8_t byte, size_t i) { return (byte >> (2 * (i % 4))) & 3u; }
BYTECOMP_HD uint32_t TagOf(const uint8_t* tags, size_t i) { return TagInByte(tags[i / 4], i); }

// Where the next value of each width goes (or is read), as offsets in the payload: after the
// values of the elements counted in `before`.
struct Cursors {
  size_t int8 = 0;
  size_t int16 = 0;
  size_t fp32 = 0;
};
BYTECOMP_HD Cursors CursorsAfter(size_t n, TagCounts totals, TagCounts before) {
  Cursors c;
  c.int8 = ValuesStart(n) + before.int8;
  c.int16 = ValuesStart(n) + totals.int8 + 2 * size_t{before.int16};
  c.fp32 = ValuesStart(n) + totals.int8 + 2 * size_t{totals.int16} + 4 * size_t{before.fp32};
  return c;
}

// Writes element x, whose tag is `tag`, at the cursors (advancing the one used); returns what
// it decodes to.
BYTECOMP_HD float PutValue(float x, uint32_t tag, float error_bound, uint8_t* payload,
                           Cursors* at) {
  if (tag == 1u) {
    const int32_t steps = InceptionnSteps(x, error_bound);
    payload[at->int8++] = static_cast<uint8_t>(static_cast<int8_t>(steps));
    return InceptionnStepsValue(steps, error_bound);
  }
  if (tag == 2u) {
    const int32_t steps = InceptionnSteps(x, error_bound);
    const int16_t v = static_cast<int16_t>(steps);
    std::memcpy(payload + at->int16, &v, 2);
    at->int16 += 2;
    return InceptionnStepsValue(steps, error_bound);
  }
  if (tag == 3u) {
    PutF32(payload + at->fp32, x);
    at->fp32 += 4;
    return x;
  }
  return 0.0f;
}

// The value of an element whose tag is `tag`, read at the cursors (advancing the one used).
BYTECOMP_HD float GetValue(uint32_t tag, float error_bound, const uint8_t* payload, Cursors* at) {
  if (tag == 1u) {
    return InceptionnStepsValue(static_cast<int8_t>(payload[at->int8++]), error_bound);
  }
  if (tag == 2u) {
    int16_t steps;
    std::memcpy(&steps, payload + at->int16, 2);
    at->int16 += 2;
    return InceptionnStepsValue(steps, error_bound);
  }
  if (tag == 3u) {
    const float v = GetF32(payload + at->fp32);
    at->fp32 += 4;
    return v;
  }
  return 0.0f;
}

// ---- checks, in the order the CPU decoder makes them

// The payload holds the count and the tags, and the count is n.
BYTECOMP_HD FormatError CheckHeader(const uint8_t* payload, size_t bytes, size_t n) {
  if (bytes < ValuesStart(n)) {
    return MakeFormatError(FormatErrorCode::kPayloadTooShort, bytes, n, ValuesStart(n));
  }
  return CheckElementCount(GetU32(payload), n);
}

BYTECOMP_HD FormatError CheckPadding(const uint8_t* tags, size_t n) {
  if (PaddingBitsZero(tags, n, 2)) return FormatError();
  return MakeFormatError(FormatErrorCode::kTagPaddingNotZero);
}

// The fp32 value that is the ordinal-th of the tag-3 elements.
BYTECOMP_HD FormatError CheckFp32(float value, size_t ordinal) {
  if (IsFiniteFloat(value)) return FormatError();
  return MakeFormatError(FormatErrorCode::kFp32ValueNotFinite, ordinal);
}

// A decoded multiple (tags 1 and 2).
BYTECOMP_HD FormatError CheckDecodedMultiple(float value) {
  if (IsFiniteFloat(value)) return FormatError();
  return MakeFormatError(FormatErrorCode::kMultipleOverflows);
}

// ---- the GPU's decomposition: one thread a tag byte (4 elements). The encode writes the tags
// and counts them, a scan of the counts gives each byte the counts before it, and then each
// byte's values go to their cursors. The host tests replay them against the CPU codec.

// Tag byte g of x; adds its elements' tags to *counts.
BYTECOMP_HD uint8_t EncodeTagByte(const float* x, size_t n, size_t g, float error_bound,
                                  TagCounts* counts) {
  uint8_t byte = 0;
  for (size_t i = 4 * g; i < 4 * g + 4 && i < n; ++i) {
    const uint32_t tag = InceptionnTag(x[i], error_bound);
    CountTag(tag, counts);
    byte |= TagBits(tag, i);
  }
  return byte;
}

// The counts of tag byte g (its elements below n).
BYTECOMP_HD TagCounts CountTagByte(uint8_t byte, size_t n, size_t g) {
  TagCounts counts;
  for (size_t i = 4 * g; i < 4 * g + 4 && i < n; ++i) CountTag(TagInByte(byte, i), &counts);
  return counts;
}

// Writes the values of tag byte g's elements; update(i, x_i, decoded_i) as qsgd::EncodeGroup.
BYTECOMP_HD_TEMPLATE
template <typename Update>
BYTECOMP_HD void EncodeValues(const float* x, size_t n, size_t g, float error_bound,
                              TagCounts totals, TagCounts before, uint8_t* payload, Update update) {
  Cursors at = CursorsAfter(n, totals, before);
  const uint8_t* tags = payload + 4;
  for (size_t i = 4 * g; i < 4 * g + 4 && i < n; ++i) {
    const float v = x[i];
    update(i, v, PutValue(v, TagOf(tags, i), error_bound, payload, &at));
  }
}

// Decodes tag byte g's elements into out; checks their fp32 values and multiples.
BYTECOMP_HD FormatError DecodeValues(const uint8_t* payload, size_t n, size_t g, float error_bound,
                                     TagCounts totals, TagCounts before, float* out) {
  Cursors at = CursorsAfter(n, totals, before);
  const uint8_t* tags = payload + 4;
  FormatError error;
  uint32_t fp32_ordinal = before.fp32;
  for (size_t i = 4 * g; i < 4 * g + 4 && i < n; ++i) {
    const uint32_t tag = TagOf(tags, i);
    const float v = GetValue(tag, error_bound, payload, &at);
    if (error.ok()) error = tag == 3u ? CheckFp32(v, fp32_ordinal) : CheckDecodedMultiple(v);
    fp32_ordinal += tag == 3u ? 1u : 0u;
    out[i] = v;
  }
  return error;
}

}  // namespace bytecomp::compress::inceptionn
