// Tensor name patterns, as Strategy entries and planner options write them: an exact name, or
// a glob where * matches any run of characters and ? any one character.
#pragma once

#include "absl/strings/string_view.h"
#include "strategy.pb.h"

namespace bytecomp {

bool GlobMatch(absl::string_view pattern, absl::string_view name);

// The Strategy entry a tensor gets: the first whose name_pattern matches; nullptr if none.
const proto::TensorStrategy* EntryFor(const proto::Strategy& strategy, absl::string_view tensor);

}  // namespace bytecomp
