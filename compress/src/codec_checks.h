// The checks every CPU codec makes on an encode call (the output buffer, the input length) and
// on a payload (size, element count), with their error texts (private to compress/src). The
// payload checks are format/format_error.h's, shared with the CUDA codecs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/format/format_error.h"

namespace bytecomp::compress::codec_checks {

inline absl::Status OutputFits(absl::string_view codec, size_t have, size_t need) {
  if (have >= need) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("codec '", codec, "': output buffer has ", have,
                                                 " bytes, encoding needs ", need));
}

// Encoding supports up to 2^32 - 1 elements (the u32 counts of the formats, and the counter
// random generator indexes by uint32).
inline absl::Status InputSizeSupported(absl::string_view codec, size_t n) {
  if (n <= 0xffffffffull) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("codec '", codec, "': ", n, " elements exceed the 2^32-1 supported"));
}

// Both encode-call checks.
inline absl::Status CheckEncodeCall(absl::string_view codec, size_t n, size_t have, size_t need) {
  if (auto s = OutputFits(codec, have, need); !s.ok()) return s;
  return InputSizeSupported(codec, n);
}
// ... for an encode of n elements into `have` bytes (at least codec.MaxEncodedBytes(n)).
inline absl::Status CheckEncodeCall(const Codec& codec, size_t n, size_t have) {
  return CheckEncodeCall(codec.name(), n, have, codec.MaxEncodedBytes(n));
}

// "codec 'x' input", for CheckFinite and NonFiniteError.
inline std::string InputWhat(absl::string_view codec) {
  return absl::StrCat("codec '", codec, "' input");
}

// CheckEncodeCall, then the finite check by the input's largest |x| bit pattern, which the
// caller gets (natural and u8bit need it).
inline absl::Status CheckEncodeCallAndFinite(const Codec& codec, absl::Span<const float> input,
                                             size_t have, uint32_t* max_abs_bits) {
  if (auto s = CheckEncodeCall(codec, input.size(), have); !s.ok()) return s;
  *max_abs_bits = MaxAbsBits(input.data(), input.size());
  if (!IsFiniteBits(*max_abs_bits)) return NonFiniteError(input, InputWhat(codec.name()));
  return absl::OkStatus();
}

inline absl::Status PayloadSizeIs(absl::string_view codec, size_t have, size_t expected, size_t n) {
  return FormatErrorStatus(codec, CheckPayloadSize(have, expected, n));
}

inline absl::Status PayloadAtLeast(absl::string_view codec, size_t have, size_t minimum, size_t n) {
  if (have >= minimum) return absl::OkStatus();
  return FormatErrorStatus(codec,
                           MakeFormatError(FormatErrorCode::kPayloadTooShort, have, n, minimum));
}

// The payloads that lead with u32 n: the size (codec.MaxEncodedBytes(n)), then the count
// against the decode length.
inline absl::Status CheckSizeAndCount(const Codec& codec, absl::Span<const uint8_t> encoded,
                                      size_t n) {
  return FormatErrorStatus(codec.name(), compress::CheckSizeAndCount(encoded.data(), encoded.size(),
                                                                     codec.MaxEncodedBytes(n), n));
}

// ... and then a header value at offset 4 that must be finite and not negative.
inline absl::StatusOr<float> ReadHeaderValueAfterCount(const Codec& codec,
                                                       absl::Span<const uint8_t> encoded, size_t n,
                                                       HeaderValue what) {
  if (auto s = CheckSizeAndCount(codec, encoded, n); !s.ok()) return s;
  const float value = GetF32(encoded.data() + 4);
  if (auto s = FormatErrorStatus(codec.name(), CheckHeaderValue(value, what, true)); !s.ok()) {
    return s;
  }
  return value;
}

}  // namespace bytecomp::compress::codec_checks
