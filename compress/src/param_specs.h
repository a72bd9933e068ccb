// Builders of the declared parameters (codec.h CodecParamSpec) that the codec and memory
// registrations share (private to compress/src).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bytecomp/compress/codec.h"

namespace bytecomp::compress::param_specs {

inline CodecParamSpec Param(std::string name, CodecParamSpec::Type type, std::string default_value,
                            std::string help) {
  CodecParamSpec p;
  p.name = std::move(name);
  p.type = type;
  p.default_value = std::move(default_value);
  p.help = std::move(help);
  return p;
}

// p with the range [min_value, max_value] (the lower bound excluded when min_exclusive).
inline CodecParamSpec InRange(CodecParamSpec p, double min_value, double max_value,
                              bool min_exclusive = false) {
  p.min_value = min_value;
  p.max_value = max_value;
  p.min_exclusive = min_exclusive;
  return p;
}

// An int in [min_value, max_value].
inline CodecParamSpec IntParam(std::string name, int64_t default_value, std::string help,
                               double min_value, double max_value) {
  return InRange(Param(std::move(name), CodecParamSpec::Type::kInt, std::to_string(default_value),
                       std::move(help)),
                 min_value, max_value);
}

// A double at least (or, min_exclusive, above) min_value.
inline CodecParamSpec DoubleParam(std::string name, std::string default_value, std::string help,
                                  double min_value, bool min_exclusive) {
  const double kNoBound = CodecParamSpec().max_value;
  return InRange(Param(std::move(name), CodecParamSpec::Type::kDouble, std::move(default_value),
                       std::move(help)),
                 min_value, kNoBound, min_exclusive);
}

// A string among choices.
inline CodecParamSpec ChoiceParam(std::string name, std::string default_value, std::string help,
                                  std::vector<std::string> choices) {
  CodecParamSpec p = Param(std::move(name), CodecParamSpec::Type::kString, std::move(default_value),
                           std::move(help));
  p.choices = std::move(choices);
  return p;
}

// The ratio of the sparse codecs: the fraction of elements kept, in (0, 1].
inline CodecParamSpec RatioParam() {
  return InRange(Param("ratio", CodecParamSpec::Type::kDouble, "0.3", "fraction of elements kept"),
                 0.0, 1.0, /*min_exclusive=*/true);
}

}  // namespace bytecomp::compress::param_specs
