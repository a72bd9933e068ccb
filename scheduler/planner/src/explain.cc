#include "bytecomp/planner/explain.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/text_format.h"

namespace bytecomp::planner {
namespace {

// "ratio=0.01 memory=residual", "-" for none.
std::string CodecSettings(const proto::CodecCost& codec) {
  std::map<std::string, std::string> sorted(codec.params().begin(), codec.params().end());
  std::vector<std::string> parts;
  for (const auto& [key, value] : sorted) parts.push_back(absl::StrCat(key, "=", value));
  if (!codec.memory().empty()) parts.push_back(absl::StrCat("memory=", codec.memory()));
  return parts.empty() ? "-" : absl::StrJoin(parts, " ");
}

const char* SchemeWord(uint8_t scheme) {
  return scheme == proto::SCHEME_ALLGATHER ? "allgather" : "allreduce";
}

bool AnyCodecOption(const SimTensor& tensor) {
  for (const OptionCost& o : tensor.options) {
    if (o.option.codec >= 0) return true;
  }
  return false;
}

}  // namespace

const char* WhyText(Why why) {
  switch (why) {
    case Why::kCompressed:
      return "compressed";
    case Why::kBelowMinBytes:
      return "under min_compress_bytes";
    case Why::kNoAllowedCodec:
      return "no allowed codec";
    case Why::kBeforeBubble:
      return "sent before a communication bubble";
    case Why::kNoGain:
      return "no option gains";
    case Why::kCollective:
      return "summed among the workers";
  }
  return "?";
}

std::string HumanBytes(double bytes) {
  if (bytes >= 1 << 20) return absl::StrFormat("%.1f MiB", bytes / (1 << 20));
  if (bytes >= 1 << 10) return absl::StrFormat("%.1f KiB", bytes / (1 << 10));
  return absl::StrFormat("%.0f B", bytes);
}

std::vector<TensorExplanation> ExplainPlan(const PreparedProblem& problem,
                                           const std::vector<int>& choice) {
  const auto& tensors = problem.sim.tensors;
  const int n = static_cast<int>(tensors.size());
  TimelineSimulator sim(&problem.sim);
  // Tensors before the last bubble of the uncompressed timeline (step 2 of the algorithm).
  sim.Rebase(problem.none_index, 0);
  int first_kept = 0;
  for (int j = 1; j < n; ++j) {
    if (sim.idle_before(j)) first_kept = j;
  }
  const double planned_us = sim.Rebase(choice, 0);
  std::vector<TensorExplanation> out(n);
  std::vector<int> changed = choice;
  for (int i = 0; i < n; ++i) {
    TensorExplanation& e = out[i];
    const SimTensor& t = tensors[i];
    // The scheme: the same option on the servers, or as a collective.
    const TensorOption& chosen = t.options[choice[i]].option;
    for (int o = 0; o < static_cast<int>(t.options.size()); ++o) {
      TensorOption twin = t.options[o].option;
      if (twin.scheme == chosen.scheme || (chosen.collective() && twin.collective())) continue;
      twin.scheme = chosen.scheme;
      if (!(twin == chosen)) continue;
      changed[i] = o;
      e.scheme_twin = o;
      e.scheme_saving_us = sim.Evaluate(changed, i) - planned_us;
      changed[i] = choice[i];
      break;
    }
    if (chosen.codec < 0 && chosen.collective()) {
      e.why = Why::kCollective;
      changed[i] = problem.none_index[i];
      e.saving_us = sim.Evaluate(changed, i) - planned_us;
      changed[i] = choice[i];
      continue;
    }
    if (t.options[choice[i]].option.codec >= 0) {
      e.why = Why::kCompressed;
      changed[i] = problem.none_index[i];
      e.saving_us = sim.Evaluate(changed, i) - planned_us;
      changed[i] = choice[i];
      continue;
    }
    if (t.bytes < problem.inputs.options.min_compress_bytes()) {
      e.why = Why::kBelowMinBytes;
    } else if (!AnyCodecOption(t)) {
      e.why = Why::kNoAllowedCodec;
    } else if (i < first_kept) {
      e.why = Why::kBeforeBubble;
    } else {
      e.why = Why::kNoGain;
      e.saving_us = -TimelineSimulator::kAborted;
      for (int o = 0; o < static_cast<int>(t.options.size()); ++o) {
        if (t.options[o].option.codec < 0) continue;
        changed[i] = o;
        const double gain = planned_us - sim.Evaluate(changed, i);
        if (gain > e.saving_us) {
          e.saving_us = gain;
          e.best_option = o;
        }
      }
      changed[i] = choice[i];
    }
  }
  return out;
}

std::string PlanTable(const PreparedProblem& problem, const std::vector<int>& choice,
                      const std::vector<TensorExplanation>& explanations, bool large_only,
                      bool option_counts) {
  const auto& costs = problem.inputs.costs;
  std::string out = absl::StrFormat("%-4s %-40s %10s  %-26s %-26s %-11s %10s", "#", "tensor",
                                    "size", "chosen", "codec settings", "loss", "saving ms");
  if (option_counts) absl::StrAppendFormat(&out, " %7s %6s", "options", "undom.");
  out += "  why\n";
  std::map<Why, int> left_out;
  for (size_t i = 0; i < problem.sim.tensors.size(); ++i) {
    const SimTensor& t = problem.sim.tensors[i];
    const TensorExplanation& e = explanations[i];
    const TensorOption& option = t.options[choice[i]].option;
    if (large_only && e.why == Why::kBelowMinBytes) {
      ++left_out[e.why];
      continue;
    }
    std::string settings = "-", loss = LossName(proto::LOSS_NONE), why = WhyText(e.why);
    if (option.codec >= 0) {
      settings = CodecSettings(costs.codecs(option.codec));
      loss = LossName(LossOf(costs.codecs(option.codec)));
    }
    if (e.why == Why::kNoGain && e.best_option >= 0) {
      why = absl::StrCat("no option gains > ", problem.inputs.options.min_relative_gain() * 100,
                         "% (best: ", DescribeOption(t.options[e.best_option].option, costs), ")");
    }
    if (e.scheme_twin >= 0) {
      const TensorOption& twin = t.options[e.scheme_twin].option;
      absl::StrAppendFormat(&why, "; %s: %s would take %+.3f ms",
                            option.collective() ? SchemeWord(option.scheme) : "servers",
                            twin.collective() ? SchemeWord(twin.scheme) : "the servers",
                            e.scheme_saving_us / 1e3);
    }
    const bool has_saving =
        e.why == Why::kCompressed || e.why == Why::kNoGain || e.why == Why::kCollective;
    absl::StrAppendFormat(&out, "%-4d %-40s %10s  %-26s %-26s %-11s %10s", i, t.name,
                          HumanBytes(static_cast<double>(t.bytes)), DescribeOption(option, costs),
                          settings, loss,
                          has_saving ? absl::StrFormat("%.3f", e.saving_us / 1e3) : "-");
    if (option_counts) {
      absl::StrAppendFormat(&out, " %7d %6d", t.tree_options, static_cast<int>(t.options.size()));
    }
    absl::StrAppend(&out, "  ", why, "\n");
  }
  if (!left_out.empty()) {
    std::vector<std::string> counts;
    for (const auto& [why, count] : left_out) {
      counts.push_back(absl::StrCat(count, " ", WhyText(why)));
    }
    absl::StrAppend(&out, "not listed, uncompressed: ", absl::StrJoin(counts, ", "), " (",
                    problem.inputs.options.min_compress_bytes(), " bytes)\n");
  }
  return out;
}

std::string ExcludedCodecs(const PreparedProblem& problem) {
  const proto::PlannerOptions& options = problem.inputs.options;
  std::vector<std::string> excluded;
  for (const proto::CodecCost& codec : problem.inputs.costs.codecs()) {
    const proto::LossClass loss = LossOf(codec);
    // Excluded when no tensor may use it (max_loss and options.codecs hold for every tensor,
    // an entry of options.allowed for those it matches).
    bool some_tensor = false;
    for (const proto::TensorProfile& tensor : problem.inputs.profile.tensors()) {
      some_tensor = some_tensor || CodecAllowed(codec, tensor, options);
    }
    if (some_tensor || (problem.inputs.profile.tensors().empty() &&
                        CodecAllowed(codec, proto::TensorProfile(), options))) {
      continue;
    }
    const proto::LossClass max_loss = options.max_loss() == proto::LOSS_UNSPECIFIED
                                          ? proto::LOSS_COMPENSATED
                                          : options.max_loss();
    const bool named = options.codecs().empty() ||
                       std::find(options.codecs().begin(), options.codecs().end(), codec.name()) !=
                           options.codecs().end();
    excluded.push_back(
        loss > max_loss ? absl::StrCat(codec.name(), " (loss class ", LossName(loss),
                                       ", above max_loss ", LossName(max_loss), ")")
        : !named        ? absl::StrCat(codec.name(), " (not in the planner options' codecs)")
                        : absl::StrCat(codec.name(),
                                       " (lossier than options.allowed accepts for every tensor)"));
  }
  return absl::StrJoin(excluded, ", ");
}

std::string StrategyFileText(const proto::Strategy& strategy, absl::string_view header,
                             absl::string_view table) {
  std::string out;
  for (absl::string_view text : {header, table}) {
    if (text.empty()) continue;
    for (absl::string_view line : absl::StrSplit(absl::StripSuffix(text, "\n"), '\n')) {
      absl::StrAppend(&out, line.empty() ? "#" : "# ", line, "\n");
    }
    out += "#\n";
  }
  std::string body;
  google::protobuf::TextFormat::PrintToString(strategy, &body);
  return out + body;
}

}  // namespace bytecomp::planner
