// Why a plan gives each tensor what it gives, in words and numbers: the per-tensor table that
// bytecomp-plan prints, that the scheduler logs under --strategy=auto, and that both write as
// comments at the top of the strategy file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "bytecomp/planner/planner.h"
#include "strategy.pb.h"

namespace bytecomp::planner {

enum class Why : uint8_t {
  kCompressed,      // the chosen option compresses
  kBelowMinBytes,   // smaller than min_compress_bytes: never compressed
  kNoAllowedCodec,  // no codec of the table may be used (PlannerOptions codecs, max_loss)
  kBeforeBubble,    // its communication ends before a bubble of the uncompressed timeline
  kNoGain,          // no option shortens the iteration by more than min_relative_gain
  kCollective,      // uncompressed, summed by a collective among the workers, not the servers
};
// "under min_compress_bytes", ...
const char* WhyText(Why why);

struct TensorExplanation {
  Why why = Why::kNoGain;
  // kCompressed: how much longer the predicted iteration is with this tensor uncompressed and
  // the others as planned (its saving). kNoGain: how much shorter the option that came
  // closest makes it (at most min_relative_gain of the iteration; often negative: a loss).
  // Else 0.
  double saving_us = 0;
  int best_option = -1;  // kNoGain: that option (index into the tensor's options)
  // Why the scheme (when the tensor has options of another): the option the same but for its
  // scheme (a collective's on the servers; the servers' as the collective it may be), and how
  // much longer the predicted iteration is with it instead.
  int scheme_twin = -1;
  double scheme_saving_us = 0;
};

// One explanation per tensor of `choice` (the plan), from one simulation per compressed tensor
// and per option of each tensor left uncompressed for lack of gain.
std::vector<TensorExplanation> ExplainPlan(const PreparedProblem& problem,
                                           const std::vector<int>& choice);

// The per-tensor table: index, name, size, the chosen option (codec with its parameters and
// memory, where it encodes, one-way/two-way/two-round, partitions), its loss class, the
// saving and why. `large_only`: no rows for tensors under min_compress_bytes, only their
// count in a last line. `option_counts`: also the decision tree's leaves per tensor.
std::string PlanTable(const PreparedProblem& problem, const std::vector<int>& choice,
                      const std::vector<TensorExplanation>& explanations, bool large_only,
                      bool option_counts = false);

// The codecs of the table that no tensor may use, and why ("randomk (loss class high, above
// max_loss compensated)"); empty when every codec may be used.
std::string ExcludedCodecs(const PreparedProblem& problem);

// "4.0 MiB", "12.5 KiB", "100 B".
std::string HumanBytes(double bytes);

// A strategy file: `header` and `table` as comment lines ("# "), then `strategy` in text
// format. ParseStrategy (compress/strategy.h) reads it back to `strategy`.
std::string StrategyFileText(const proto::Strategy& strategy, absl::string_view header,
                             absl::string_view table);

}  // namespace bytecomp::planner
