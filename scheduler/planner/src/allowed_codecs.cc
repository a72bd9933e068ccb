#include "bytecomp/planner/allowed_codecs.h"

#include <string>

#include "absl/strings/numbers.h"
#include "bytecomp/common/glob.h"
#include "bytecomp/compress/registry.h"

namespace bytecomp::planner {
namespace {

// Two codecs that keep the same elements for the same ratio (compress CodecFacts::selection:
// topk and artopk).
bool SameSelection(absl::string_view a, absl::string_view b) {
  const compress::CodecFacts* fa = compress::CodecFactsOf(a);
  const compress::CodecFacts* fb = compress::CodecFactsOf(b);
  return fa != nullptr && fb != nullptr && !fa->selection.empty() && fa->selection == fb->selection;
}

// The parameter's value as a number; false when absent or not a number.
bool NumberParam(const google::protobuf::Map<std::string, std::string>& params,
                 const std::string& name, double* value) {
  auto it = params.find(name);
  return it != params.end() && absl::SimpleAtod(it->second, value);
}

bool NoLossierThan(const proto::CodecCost& codec, const proto::CodecConfig& listed) {
  const bool same = codec.name() == listed.name();
  if (!same && !SameSelection(codec.name(), listed.name())) return false;
  for (const auto& [name, value] : listed.params()) {
    if (name == "ratio") {
      double want = 0, have = 0;
      if (!NumberParam(listed.params(), name, &want) || !NumberParam(codec.params(), name, &have) ||
          have < want) {
        return false;
      }
      continue;
    }
    if (!same) continue;  // the other codec's parameters are its own
    auto it = codec.params().find(name);
    if (it == codec.params().end() || it->second != value) return false;
  }
  return true;
}

}  // namespace

const proto::TensorAllowance* AllowanceFor(const proto::PlannerOptions& options,
                                           absl::string_view tensor) {
  for (const proto::TensorAllowance& a : options.allowed()) {
    if (GlobMatch(a.name_pattern(), tensor)) return &a;
  }
  return nullptr;
}

bool IsLossless(const proto::CodecCost& codec) {
  const compress::CodecFacts* facts = compress::CodecFactsOf(codec.name());
  if (facts == nullptr) return false;
  if (facts->loss != compress::CodecLoss::kNone && !facts->lossless_when) {
    return false;  // without copying the parameters
  }
  return compress::CodecIsLossless(
      codec.name(), compress::CodecParams(codec.params().begin(), codec.params().end()));
}

bool CodecAllowedBy(const proto::CodecCost& codec, const proto::TensorAllowance& allowance) {
  if (IsLossless(codec)) return true;
  for (const proto::CodecConfig& listed : allowance.codecs()) {
    if (NoLossierThan(codec, listed)) return true;
  }
  return false;
}

bool TwoWayAllowed(const proto::TensorAllowance* allowance) {
  return allowance == nullptr || allowance->allow_two_way();
}

}  // namespace bytecomp::planner
