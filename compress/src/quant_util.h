// Checks shared by the sign, quantisation and low-rank codecs (private to compress/src).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "bytecomp/common/half.h"
#include "bytecomp/compress/codec_util.h"

namespace bytecomp::compress::codec_checks {

inline absl::Status OutputFits(absl::string_view codec, size_t have, size_t need) {
  if (have >= need) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("codec '", codec, "': output buffer has ", have,
                                                 " bytes, encoding needs ", need));
}

// Encoding supports up to 2^32 - 1 elements (the counter random generator indexes by uint32).
inline absl::Status InputSizeSupported(absl::string_view codec, size_t n) {
  if (n <= 0xffffffffull) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("codec '", codec, "': ", n, " elements exceed the 2^32-1 supported"));
}

inline absl::Status PayloadSizeIs(absl::string_view codec, size_t have, size_t expected,
                                  size_t n) {
  if (have == expected) return absl::OkStatus();
  return MalformedError(codec, absl::StrCat(have, " bytes for ", n, " elements (expected ",
                                            expected, ")"));
}

inline absl::Status PayloadAtLeast(absl::string_view codec, size_t have, size_t minimum,
                                   size_t n) {
  if (have >= minimum) return absl::OkStatus();
  return MalformedError(codec, absl::StrCat(have, " bytes for ", n, " elements (at least ",
                                            minimum, " expected)"));
}

inline absl::Status HeaderFloatOk(absl::string_view codec, float value, absl::string_view what,
                                  bool must_be_non_negative) {
  if ((FloatBits(value) & 0x7fffffffu) >= 0x7f800000u) {
    return MalformedError(codec, absl::StrCat(what, " is not finite"));
  }
  if (must_be_non_negative && value < 0.0f) {
    return MalformedError(codec, absl::StrCat(what, " is negative (", value, ")"));
  }
  return absl::OkStatus();
}

inline std::string InputWhat(absl::string_view codec) {
  return absl::StrCat("codec '", codec, "' input");
}

// The u32 element count leading the bit-packed payloads (sign codecs, qsgd, terngrad,
// dithering): padded bit streams would otherwise decode into a few more or fewer elements.
inline absl::Status CheckCount(absl::string_view codec, absl::Span<const uint8_t> encoded,
                               size_t n) {
  uint32_t count;
  std::memcpy(&count, encoded.data(), 4);
  if (count == n) return absl::OkStatus();
  return MalformedError(codec, absl::StrCat("payload for ", count, " elements decoded into ", n));
}

}  // namespace bytecomp::compress::codec_checks

namespace bytecomp::compress::codec_checks {

inline CodecParamSpec IntParam(std::string name, int64_t default_value, std::string help,
                               double min_value, double max_value) {
  CodecParamSpec p;
  p.name = std::move(name);
  p.type = CodecParamSpec::Type::kInt;
  p.default_value = std::to_string(default_value);
  p.help = std::move(help);
  p.min_value = min_value;
  p.max_value = max_value;
  return p;
}

inline CodecParamSpec DoubleParam(std::string name, std::string default_value, std::string help,
                                  double min_value, bool min_exclusive) {
  CodecParamSpec p;
  p.name = std::move(name);
  p.type = CodecParamSpec::Type::kDouble;
  p.default_value = std::move(default_value);
  p.help = std::move(help);
  p.min_value = min_value;
  p.min_exclusive = min_exclusive;
  return p;
}

inline CodecParamSpec ChoiceParam(std::string name, std::string default_value, std::string help,
                                  std::vector<std::string> choices) {
  CodecParamSpec p;
  p.name = std::move(name);
  p.type = CodecParamSpec::Type::kString;
  p.default_value = std::move(default_value);
  p.help = std::move(help);
  p.choices = std::move(choices);
  return p;
}

}  // namespace bytecomp::compress::codec_checks
