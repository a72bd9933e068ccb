#include "bytecomp/compress/params.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace bytecomp::compress {
namespace {

absl::string_view TypeName(CodecParamSpec::Type type) {
  switch (type) {
    case CodecParamSpec::Type::kDouble:
      return "double";
    case CodecParamSpec::Type::kInt:
      return "int";
    case CodecParamSpec::Type::kBool:
      return "bool";
    case CodecParamSpec::Type::kString:
      return "string";
  }
  return "?";
}

std::string FormatBound(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrCat(static_cast<int64_t>(v));
  return absl::StrCat(v);
}

// "in (0, 1]", "at least 1", "" when unbounded.
std::string RangeText(const CodecParamSpec& spec) {
  const bool has_min = spec.min_value > -1e307;
  const bool has_max = spec.max_value < 1e307;
  if (has_min && has_max) {
    return absl::StrCat("in ", spec.min_exclusive ? "(" : "[", FormatBound(spec.min_value), ", ",
                        FormatBound(spec.max_value), spec.max_exclusive ? ")" : "]");
  }
  if (has_min) {
    return absl::StrCat(spec.min_exclusive ? "greater than " : "at least ",
                        FormatBound(spec.min_value));
  }
  if (has_max) {
    return absl::StrCat(spec.max_exclusive ? "less than " : "at most ",
                        FormatBound(spec.max_value));
  }
  return "";
}

bool InRange(const CodecParamSpec& spec, double v) {
  if (spec.min_exclusive ? !(v > spec.min_value) : !(v >= spec.min_value)) return false;
  if (spec.max_exclusive ? !(v < spec.max_value) : !(v <= spec.max_value)) return false;
  return true;
}

}  // namespace

bool ParseDoubleParam(absl::string_view text, double* value) {
  return absl::SimpleAtod(text, value) && std::isfinite(*value);
}

bool ParseIntParam(absl::string_view text, int64_t* value) { return absl::SimpleAtoi(text, value); }

bool ParseBoolParam(absl::string_view text, bool* value) {
  const std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (t == "true" || t == "1" || t == "yes") {
    *value = true;
    return true;
  }
  if (t == "false" || t == "0" || t == "no") {
    *value = false;
    return true;
  }
  return false;
}

std::string DescribeParams(const std::vector<CodecParamSpec>& specs) {
  if (specs.empty()) return "  (no parameters)";
  std::vector<std::string> lines;
  for (const auto& s : specs) {
    std::string line =
        absl::StrCat("  ", s.name, " (", TypeName(s.type), ", default ", s.default_value);
    const std::string range = RangeText(s);
    if (!range.empty()) absl::StrAppend(&line, ", ", range);
    if (!s.choices.empty()) absl::StrAppend(&line, ", one of ", absl::StrJoin(s.choices, "|"));
    absl::StrAppend(&line, ")");
    if (!s.help.empty()) absl::StrAppend(&line, ": ", s.help);
    lines.push_back(std::move(line));
  }
  return absl::StrJoin(lines, "\n");
}

absl::StatusOr<CodecParams> ValidateParams(absl::string_view what,
                                           const std::vector<CodecParamSpec>& specs,
                                           const CodecParams& given) {
  auto error = [&](const std::string& problem) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", problem, "; valid parameters:\n", DescribeParams(specs)));
  };
  CodecParams filled;
  for (const auto& s : specs) filled[s.name] = s.default_value;
  for (const auto& [name, text] : given) {
    const CodecParamSpec* spec = nullptr;
    for (const auto& s : specs) {
      if (s.name == name) spec = &s;
    }
    if (spec == nullptr) return error(absl::StrCat("unknown parameter '", name, "'"));
    switch (spec->type) {
      case CodecParamSpec::Type::kDouble: {
        double v;
        if (!ParseDoubleParam(text, &v)) {
          return error(
              absl::StrCat("parameter '", name, "' = '", text, "' is not a finite number"));
        }
        if (!InRange(*spec, v)) {
          return error(absl::StrCat("parameter '", name, "' = ", text, " is out of range (must be ",
                                    RangeText(*spec), ")"));
        }
        break;
      }
      case CodecParamSpec::Type::kInt: {
        int64_t v;
        if (!ParseIntParam(text, &v)) {
          return error(absl::StrCat("parameter '", name, "' = '", text, "' is not an integer"));
        }
        if (!InRange(*spec, static_cast<double>(v))) {
          return error(absl::StrCat("parameter '", name, "' = ", text, " is out of range (must be ",
                                    RangeText(*spec), ")"));
        }
        break;
      }
      case CodecParamSpec::Type::kBool: {
        bool v;
        if (!ParseBoolParam(text, &v)) {
          return error(
              absl::StrCat("parameter '", name, "' = '", text, "' is not a bool (true/false/1/0)"));
        }
        break;
      }
      case CodecParamSpec::Type::kString: {
        if (!spec->choices.empty()) {
          bool found = false;
          for (const auto& c : spec->choices) found |= (c == text);
          if (!found) {
            return error(absl::StrCat("parameter '", name, "' = '", text, "' is not one of ",
                                      absl::StrJoin(spec->choices, "|")));
          }
        }
        break;
      }
    }
    filled[name] = text;
  }
  return filled;
}

const std::string* ParamReader::Lookup(absl::string_view name) {
  auto it = params_.find(std::string(name));
  if (it == params_.end()) {
    if (status_.ok()) {
      status_ = absl::InternalError(absl::StrCat("parameter '", name, "' was not declared"));
    }
    return nullptr;
  }
  return &it->second;
}

void ParamReader::Fail(absl::string_view name, absl::string_view type, const std::string& text) {
  if (status_.ok()) {
    status_ = absl::InvalidArgumentError(
        absl::StrCat("parameter '", name, "' = '", text, "' is not a ", type));
  }
}

double ParamReader::Double(absl::string_view name) {
  const std::string* text = Lookup(name);
  double v = 0;
  if (text != nullptr && !ParseDoubleParam(*text, &v)) Fail(name, "number", *text);
  return v;
}

int64_t ParamReader::Int(absl::string_view name) {
  const std::string* text = Lookup(name);
  int64_t v = 0;
  if (text != nullptr && !ParseIntParam(*text, &v)) Fail(name, "integer", *text);
  return v;
}

bool ParamReader::Bool(absl::string_view name) {
  const std::string* text = Lookup(name);
  bool v = false;
  if (text != nullptr && !ParseBoolParam(*text, &v)) Fail(name, "bool", *text);
  return v;
}

std::string ParamReader::String(absl::string_view name) {
  const std::string* text = Lookup(name);
  return text != nullptr ? *text : std::string();
}

}  // namespace bytecomp::compress
