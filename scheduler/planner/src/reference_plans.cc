// The plans the ByteComp algorithm is measured against: the exact optimum under the model
// (small models) and compressing every tensor with one codec.
#include <chrono>

#include "absl/strings/str_cat.h"
#include "bytecomp/planner/planner.h"

namespace bytecomp::planner {

absl::StatusOr<PlanResult> PlanExhaustive(const PreparedProblem& problem, double max_combinations) {
  const auto start = std::chrono::steady_clock::now();
  const auto& tensors = problem.sim.tensors;
  const int n = static_cast<int>(tensors.size());
  double combinations = 1;
  for (const auto& t : tensors) combinations *= static_cast<double>(t.options.size());
  if (combinations > max_combinations) {
    return absl::ResourceExhaustedError(absl::StrCat("exhaustive search over ", combinations,
                                                     " combinations exceeds the limit of ",
                                                     max_combinations));
  }
  TimelineSimulator sim(&problem.sim);
  PlanResult result;
  result.no_compression_us = sim.Rebase(problem.none_index, 0);
  // Per resource: compute segments, and the least work each suffix of tensors can need.
  using Work = std::array<double, kNumResources>;
  Work compute{};
  for (const auto& t : tensors) compute[kCompute] += static_cast<float>(t.ready_gap_us);
  std::vector<Work> min_suffix(n + 1, Work{});
  for (int i = n - 1; i >= 0; --i) {
    for (int r = 0; r < kNumResources; ++r) {
      double least = tensors[i].options[0].work_us[r];
      for (const auto& o : tensors[i].options) least = std::min(least, o.work_us[r]);
      min_suffix[i][r] = min_suffix[i + 1][r] + least;
    }
  }
  // Tail bounds: tensor k is ready no earlier than the gaps after the current snapshot, and
  // then needs at least its cheapest option's span.
  std::vector<double> gaps(n, 0), tail_max(n + 1, -1e300);
  for (int i = 1; i < n; ++i) gaps[i] = gaps[i - 1] + static_cast<float>(tensors[i].ready_gap_us);
  for (int k = n - 1; k >= 0; --k) {
    double least = tensors[k].options[0].span_us;
    for (const auto& o : tensors[k].options) least = std::min(least, o.span_us);
    tail_max[k] = std::max(tail_max[k + 1], gaps[k] + least);
  }
  std::vector<int> choice(n, 0);
  std::vector<Work> prefix(n + 1, compute);
  double best = result.no_compression_us * (1 + 1e-12);
  std::vector<int> best_choice = problem.none_index;
  // Depth-first in backprop order: the simulation of tensors < depth is shared.
  auto dfs = [&](auto&& self, int depth) -> void {
    for (size_t o = 0; o < tensors[depth].options.size(); ++o) {
      choice[depth] = static_cast<int>(o);
      double t = sim.ExtendStack(choice, depth);
      if (depth == n - 1) {
        if (t < best) {
          best = t;
          best_choice = choice;
        }
        continue;
      }
      Work bound_work;
      for (int r = 0; r < kNumResources; ++r) {
        prefix[depth + 1][r] = prefix[depth][r] + tensors[depth].options[o].work_us[r];
        bound_work[r] = prefix[depth + 1][r] + min_suffix[depth + 1][r];
      }
      if (sim.StackLowerBound(depth + 1, bound_work, tail_max[depth + 1] - gaps[depth + 1]) >=
          best) {
        continue;
      }
      self(self, depth + 1);
    }
  };
  dfs(dfs, 0);
  result.choice = best_choice;
  result.predicted_us = sim.Simulate(best_choice);
  result.simulations = sim.simulations();
  result.events = sim.events_processed();
  result.planning_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  result.compress_everything_choice = CompressEverythingChoice(problem);
  result.compress_everything_us = sim.Simulate(result.compress_everything_choice);
  return result;
}

std::vector<int> CompressEverythingChoice(const PreparedProblem& problem,
                                          const std::string& codec_name) {
  const auto& in = problem.inputs;
  int codec = -1;
  for (int c = 0; c < in.costs.codecs_size(); ++c) {
    if (codec_name.empty() ? codec < 0 : in.costs.codecs(c).name() == codec_name) codec = c;
  }
  const bool gpu = in.cluster.gpus_per_machine() > 0 && !in.options.disable_gpu();
  std::vector<int> choice = problem.none_index;
  if (codec < 0) return choice;
  for (size_t i = 0; i < problem.sim.tensors.size(); ++i) {
    const SimTensor& t = problem.sim.tensors[i];
    const TensorOption none = t.options[problem.none_index[i]].option;
    // Preferred: on the GPU if any, two-way if the codec allows; else what exists.
    int best = -1, best_score = -1;
    for (size_t o = 0; o < t.options.size(); ++o) {
      const TensorOption& opt = t.options[o].option;
      if (opt.codec != codec || opt.hierarchical != none.hierarchical ||
          opt.partitions != none.partitions) {
        continue;
      }
      int score = ((opt.encode_on == Where::kGpu) == gpu ? 4 : 0) + (opt.two_way ? 2 : 0) +
                  (opt.decode_on == opt.encode_on ? 1 : 0);
      if (score > best_score) {
        best_score = score;
        best = static_cast<int>(o);
      }
    }
    if (best >= 0) choice[i] = best;
  }
  return choice;
}

}  // namespace bytecomp::planner
