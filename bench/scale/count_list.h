// "8,16,32" -> {8, 16, 32}: the lists of sizes the scale tools take as flags. A part that is
// not a positive count ends the tool (exit 2) naming it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace bytecomp::scale {

inline std::vector<int64_t> CountList(const std::string& text, const char* tool) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v <= 0) {
      std::fprintf(stderr, "%s: '%s' is not a positive count\n", tool, std::string(part).c_str());
      std::exit(2);
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace bytecomp::scale
