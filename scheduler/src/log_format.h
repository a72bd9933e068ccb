// Wording shared by the scheduler's protocols in logs and replies (private to scheduler/src).
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/str_format.h"

namespace bytecomp {

// "5.0 s": timeouts as the config's milliseconds, said in seconds.
inline std::string Seconds(int64_t ms) { return absl::StrFormat("%.1f s", ms / 1000.0); }

}  // namespace bytecomp
