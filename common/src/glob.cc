#include "bytecomp/common/glob.h"

namespace bytecomp {

bool GlobMatch(absl::string_view pattern, absl::string_view name) {
  // Iterative matcher with backtracking to the last '*'.
  size_t p = 0, n = 0, star = absl::string_view::npos, mark = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = n;
    } else if (star != absl::string_view::npos) {
      p = star + 1;
      n = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

const proto::TensorStrategy* EntryFor(const proto::Strategy& strategy, absl::string_view tensor) {
  for (const proto::TensorStrategy& t : strategy.tensors()) {
    if (GlobMatch(t.name_pattern(), tensor)) return &t;
  }
  return nullptr;
}

}  // namespace bytecomp
