// PreferLessLoss (planner.h): after the search, less lossy options wherever they cost no
// more than the tolerance.
#include <algorithm>
#include <array>
#include <tuple>

#include "bytecomp/planner/planner.h"

namespace bytecomp::planner {
namespace {

proto::LossClass LossOfOption(const PreparedProblem& problem, const TensorOption& option) {
  return option.codec < 0 ? proto::LOSS_NONE : LossOf(problem.inputs.costs.codecs(option.codec));
}

// The options of `tensor` less lossy than `current`, in the order they are tried: the
// default-partitioned uncompressed option, then per less lossy codec its option of the same
// kind (placements, one/two-way, hierarchy, partitions), least lossy first.
std::vector<int> LessLossyOptions(const PreparedProblem& problem, int tensor, int current) {
  const SimTensor& t = problem.sim.tensors[tensor];
  const TensorOption& now = t.options[current].option;
  const proto::LossClass loss = LossOfOption(problem, now);
  std::vector<std::pair<proto::LossClass, int>> found;
  for (int o = 0; o < static_cast<int>(t.options.size()); ++o) {
    TensorOption same_kind = t.options[o].option;
    if (same_kind.codec < 0) continue;
    const proto::LossClass other = LossOfOption(problem, same_kind);
    same_kind.codec = now.codec;
    if (other < loss && same_kind == now) found.push_back({other, o});
  }
  std::stable_sort(found.begin(), found.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<int> out = {problem.none_index[tensor]};
  for (const auto& [other, o] : found) out.push_back(o);
  return out;
}

}  // namespace

std::vector<int> PreferLessLoss(const PreparedProblem& problem, std::vector<int> choice) {
  TimelineSimulator sim(&problem.sim);
  sim.Rebase(choice, 0);
  return PreferLessLoss(problem, std::move(choice), sim);
}

std::vector<int> PreferLessLoss(const PreparedProblem& problem, std::vector<int> choice,
                                TimelineSimulator& sim) {
  const int n = static_cast<int>(choice.size());
  const double planned_us = sim.baseline_us();
  const double budget_us = planned_us * (1 + problem.inputs.options.min_relative_gain());
  // Lossiest first; among equals the smallest first (whose compression saves least,
  // usually), then nearest the output.
  std::vector<std::tuple<int, int64_t, int>> order;  // (-loss, bytes, tensor)
  for (int i = 0; i < n; ++i) {
    const TensorOption& option = problem.sim.tensors[i].options[choice[i]].option;
    if (option.codec < 0) continue;
    order.push_back(
        {-static_cast<int>(LossOfOption(problem, option)), problem.sim.tensors[i].bytes, i});
  }
  std::sort(order.begin(), order.end());
  std::array<double, kNumResources> total = sim.TotalWork(choice);
  TailBounds bounds;
  ComputeTailBounds(problem.sim, choice, &bounds);
  // The bounds of tensors up to this one are of an earlier choice: after a kept change, those
  // up to it are computed again only when an evaluation needs them (those after the tensor
  // it changes), so that changes kept in the order of the tensors cost no update.
  int stale_up_to = -1;
  // Same-shaped tensors' changes often leave the same backlog: their runs meet. Many changes
  // are kept: their runs become the baseline as they are.
  sim.UseRunMemo(true);
  sim.KeepEvaluatedRuns(true);
  for (const auto& [neg_loss, bytes, i] : order) {
    const auto& options = problem.sim.tensors[i].options;
    if (stale_up_to > i) {
      ComputeTailBounds(problem.sim, choice, &bounds, stale_up_to, i + 1);
      stale_up_to = i;
    }
    // Later tensors keep their options: ready later by this one's stream time.
    const double later = bounds.latest[i + 1] - bounds.offset[i] - StreamUs(options[choice[i]]);
    for (int o : LessLossyOptions(problem, i, choice[i])) {
      std::array<double, kNumResources> changed_total = total;
      for (int r = 0; r < kNumResources; ++r) {
        changed_total[r] += options[o].work_us[r] - options[choice[i]].work_us[r];
      }
      // Most changes of a communication-bound plan fail on the work and tails alone.
      const double tail = std::max(later + StreamUs(options[o]), options[o].span_us);
      if (sim.LowerBound(i, changed_total, tail) > budget_us) continue;
      std::vector<int> changed = choice;
      changed[i] = o;
      // Evaluate stops as soon as the run is known to end after the budget.
      const double t =
          sim.Evaluate(changed, i, budget_us * (1 + 1e-12), i, &changed_total, &bounds.after);
      if (t <= budget_us) {
        choice = std::move(changed);
        total = changed_total;
        if (!sim.AdoptEvaluated()) sim.Rebase(choice, i, i);
        stale_up_to = std::max(stale_up_to, i);
        break;
      }
    }
  }
  sim.UseRunMemo(false);
  sim.KeepEvaluatedRuns(false);
  return choice;
}

}  // namespace bytecomp::planner
