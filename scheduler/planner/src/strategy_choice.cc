// ChoiceOf (planner.h): the option of the decision tree that a Strategy gives each tensor,
// the inverse of ToStrategy, so that a Strategy written by hand (or by the planner) can be
// simulated (bytecomp-plan --evaluate).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/glob.h"
#include "bytecomp/compress/strategy.h"
#include "bytecomp/planner/planner.h"

namespace bytecomp::planner {
namespace {

bool Compressed(const proto::CodecConfig& c) { return !compress::IsNoneName(c.name()); }

// The cost table's entry with the codec's name and parameters; -1 if none.
int CodecIndex(const proto::CostTable& costs, const proto::CodecConfig& config) {
  for (int c = 0; c < costs.codecs_size(); ++c) {
    const proto::CodecCost& cost = costs.codecs(c);
    if (cost.name() != config.name() || cost.params().size() != config.params().size()) continue;
    bool same = true;
    for (const auto& [key, value] : config.params()) {
      auto it = cost.params().find(key);
      same = same && it != cost.params().end() && it->second == value;
    }
    if (same) return c;
  }
  return -1;
}

Where PlaceOf(proto::Placement p, bool gpu_default) {
  if (p == proto::PLACEMENT_GPU) return Where::kGpu;
  if (p == proto::PLACEMENT_DEFAULT && gpu_default) return Where::kGpu;
  return Where::kCpu;
}

}  // namespace

absl::StatusOr<std::vector<int>> ChoiceOf(const PreparedProblem& problem,
                                          const proto::Strategy& strategy) {
  const PlannerInputs& in = problem.inputs;
  const int64_t min_bytes =
      strategy.min_compress_bytes() > 0 ? strategy.min_compress_bytes() : 65536;
  std::vector<int> choice = problem.none_index;
  for (size_t i = 0; i < problem.sim.tensors.size(); ++i) {
    const SimTensor& t = problem.sim.tensors[i];
    const proto::TensorStrategy* entry = EntryFor(strategy, t.name);
    const TensorOption& none = t.options[problem.none_index[i]].option;
    TensorOption wanted = none;
    if (entry != nullptr) {
      wanted.hierarchical = entry->hierarchical();
      wanted.scheme = static_cast<uint8_t>(entry->scheme());
      if (entry->partition_bytes() > 0) {
        wanted.partitions = static_cast<int32_t>(std::min<int64_t>(
            std::max<int64_t>(1,
                              (t.bytes + entry->partition_bytes() - 1) / entry->partition_bytes()),
            in.profile.tensors(static_cast<int>(i)).elements()));
      }
    }
    if (entry != nullptr && Compressed(entry->push_codec()) &&
        (t.bytes >= min_bytes || entry->force())) {
      const int codec = CodecIndex(in.costs, entry->push_codec());
      if (codec < 0) {
        return absl::NotFoundError(
            absl::StrCat("tensor '", t.name, "': codec '", entry->push_codec().name(),
                         "' with these parameters is not in the cost table"));
      }
      const bool gpu = in.cluster.gpus_per_machine() > 0 && !in.options.disable_gpu();
      bool gpu_costs = false;
      for (const auto& cost : in.costs.codecs(codec).costs()) {
        gpu_costs = gpu_costs || cost.device() == proto::DEVICE_GPU;
      }
      wanted.codec = static_cast<int16_t>(codec);
      wanted.encode_on = PlaceOf(entry->compress_on(), gpu && gpu_costs);
      if (Compressed(entry->pull_codec())) {
        wanted.two_way = true;
        wanted.union_pull = compress::IsSparseUnionPull(entry->pull_codec());
        wanted.decode_on =
            wanted.union_pull ? Where::kCpu : PlaceOf(entry->decompress_on(), gpu && gpu_costs);
      }
    }
    auto found = std::find_if(t.options.begin(), t.options.end(),
                              [&](const OptionCost& o) { return o.option == wanted; });
    if (found == t.options.end()) {
      return absl::NotFoundError(absl::StrCat(
          "tensor '", t.name, "': the strategy gives it ", DescribeOption(wanted, in.costs),
          ", which the decision tree does not offer (a placement without a device or costs, "
          "two-way for a codec that cannot re-encode, or a dominated option: plan with "
          "keep_dominated)"));
    }
    choice[i] = static_cast<int>(found - t.options.begin());
  }
  return choice;
}

}  // namespace bytecomp::planner
