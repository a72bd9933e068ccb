// Typed reading and validation of codec and memory parameters (name -> value text).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bytecomp/compress/codec.h"

namespace bytecomp::compress {

// "ratio (double, default 0.3, in (0, 1]: fraction of elements kept)", one per line.
std::string DescribeParams(const std::vector<CodecParamSpec>& specs);

// Checks every given parameter against specs: unknown name, text that does not parse as the
// declared type, out of range or not among the choices is an InvalidArgument error that names
// the offender and lists the valid parameters (`what` is e.g. "codec 'topk'"). Returns the
// parameters with defaults filled in.
absl::StatusOr<CodecParams> ValidateParams(absl::string_view what,
                                           const std::vector<CodecParamSpec>& specs,
                                           const CodecParams& given);

// Reads validated, defaults-filled parameters in a factory. A missing or unparsable value (a
// bug in the factory, since the registry validated them) is remembered, and the first one is
// returned by status():
//   ParamReader r(params);
//   const double ratio = r.Double("ratio");
//   if (!r.ok()) return r.status();
class ParamReader {
 public:
  explicit ParamReader(const CodecParams& params) : params_(params) {}

  double Double(absl::string_view name);
  int64_t Int(absl::string_view name);
  bool Bool(absl::string_view name);
  std::string String(absl::string_view name);

  bool ok() const { return status_.ok(); }
  const absl::Status& status() const { return status_; }

 private:
  const std::string* Lookup(absl::string_view name);
  void Fail(absl::string_view name, absl::string_view type, const std::string& text);

  const CodecParams& params_;
  absl::Status status_;
};

// Parsers shared by the validation and the reader; false if text is not of the type.
bool ParseDoubleParam(absl::string_view text, double* value);  // finite numbers only
bool ParseIntParam(absl::string_view text, int64_t* value);
bool ParseBoolParam(absl::string_view text, bool* value);  // true/false/1/0/yes/no

}  // namespace bytecomp::compress
