// The ByteComp planner: chooses per tensor whether, how and where to compress.
//
// The published algorithm (Espresso/ByteComp, shared/ANCHORS.md):
//  1. order tensors by size, larger first, nearer the output first among equals;
//  2. simulate without compression and drop tensors whose communication ends before a
//     communication bubble (compressing them cannot help);
//  3. for each remaining tensor, try each GPU option with the others fixed; keep the best;
//  4. group GPU-compressed tensors by (size, option) and enumerate how many of each group to
//     move to the CPU pool, farthest from the output first.
// Ours: steps 3 and 4 start from the best uniform assignment instead of no compression
// (PlannerOptions.start_uncompressed for the paper's start); afterwards refinement passes
// over every option (pairs of tensors too on small models) and from the best uniform
// assignments (PlannerOptions.skip_refinement to skip). Dominated options are dropped first.
// Changes are evaluated incrementally from the simulator's snapshots, options in order of a
// lower bound, stopping when the bound cannot beat the best found.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bytecomp/planner/decision_tree.h"
#include "bytecomp/planner/inputs.h"
#include "bytecomp/planner/timeline.h"
#include "planner.pb.h"
#include "strategy.pb.h"

namespace bytecomp::planner {

struct PlannerInputs {
  proto::ModelProfile profile;
  proto::ClusterDescription cluster;
  proto::CostTable costs;
  proto::PlannerOptions options;
};

// Inputs with defaults applied (every codec of the cost table with its loss class, LossOf),
// every tensor's options enumerated and costed.
struct PreparedProblem {
  PlannerInputs inputs;
  SimProblem sim;
  int none_option_index(int tensor) const { return none_index[tensor]; }
  std::vector<int> none_index;  // per tensor: uncompressed, default partitioning
};
absl::StatusOr<PreparedProblem> Prepare(const PlannerInputs& inputs);

struct PlanResult {
  std::vector<int> choice;  // option index per tensor (into sim.tensors[i].options)
  double predicted_us = 0;
  double no_compression_us = 0;
  double compress_everything_us = 0;
  std::vector<int> compress_everything_choice;
  int dropped_before_bubble = 0;
  int64_t simulations = 0;  // full or partial simulations run
  int64_t events = 0;       // simulated events processed
  double planning_ms = 0;
};

// The ByteComp decision algorithm, then PreferLessLoss (unless options.skip_less_loss).
PlanResult PlanByteComp(const PreparedProblem& problem);

// Gives compressed tensors less lossy options (LossOf: uncompressed first, then another codec
// of a lower class in the same placement) while the iteration stays within
// min_relative_gain of `choice`'s: the lossiest tensors first, and among them the smallest. A
// codec's gain must pay for its loss; a plan within the tolerance of the fastest is as good a
// prediction (the model's own error is larger).
std::vector<int> PreferLessLoss(const PreparedProblem& problem, std::vector<int> choice);
// The same on a simulator of `problem` whose baseline is `choice` already (the search's): it
// is left with the result as its baseline, and baseline_us() its iteration time.
std::vector<int> PreferLessLoss(const PreparedProblem& problem, std::vector<int> choice,
                                TimelineSimulator& sim);
// Exhaustive search (branch and bound over backprop order); exact under the model. Returns
// an error when the number of combinations exceeds `max_combinations`.
absl::StatusOr<PlanResult> PlanExhaustive(const PreparedProblem& problem,
                                          double max_combinations = 1e7);

// "Compress everything": every tensor that may be compressed uses codec `codec_name` (the
// first codec of the table when empty), on the GPU when there is one, two-way when the
// codec allows, flat, default partitioning.
std::vector<int> CompressEverythingChoice(const PreparedProblem& problem,
                                          const std::string& codec_name = "");

// The Strategy for a choice: one entry per tensor, by exact name.
proto::Strategy ToStrategy(const PreparedProblem& problem, const std::vector<int>& choice);

// The reverse: the option a Strategy gives each tensor (its first matching entry's codec by
// name and parameters, placements, one-way, two-way or the servers' union, hierarchical,
// partition size), so that it can be simulated. An error names a tensor whose codec is not in
// the cost table or whose option the tree does not offer (Prepare with keep_dominated, so
// that no option was dropped).
absl::StatusOr<std::vector<int>> ChoiceOf(const PreparedProblem& problem,
                                          const proto::Strategy& strategy);

}  // namespace bytecomp::planner
