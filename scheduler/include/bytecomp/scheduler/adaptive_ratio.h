// The adaptive ratio on the scheduler (TensorStrategy.adaptive_ratio, proto/strategy.proto):
// the workers' RatioReports gathered per tensor, strategy version and window of rounds; once
// every pushing worker reported a window, the policy decides for the tensor's strategy entry,
// and a change becomes a new strategy version that StrategyControl switches every node to
// (prepare / commit: every node at the same round).
//
// The policy weighs parallel efficiency (how much of the round the tensor spends
// communicating) against statistical efficiency (how much of the gradient the codec keeps).
// Per window, over the pushing workers' reports:
//   kept  = mean kept-energy fraction: sum of the sent values' squares over the error-
//           compensated gradient's (1: everything sent; the rest waits in the memory and
//           arrives later, staler);
//   share = mean of comm_us / round_us: the tensor's communication time per round against the
//           time between rounds.
//   kept < raise_below_kept and ratio < max_ratio           -> ratio * step (at most max_ratio):
//           too much of the gradient waits; sending more is worth its time.
//   kept >= lower_above_kept, share >= min_comm_share and
//   ratio > min_ratio                                        -> ratio / step (at least
//           min_ratio): most of the energy fits in fewer values, and the round spends enough
//           of its time communicating for the cut to show.
//   otherwise the ratio stays; a window without kept-energy measurements changes nothing.
// One change at a time: reports of older versions are dropped, and no decision is made while
// an update is being switched to.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>

#include "control.pb.h"
#include "strategy.pb.h"

namespace bytecomp {

// A window's measurements over the pushing workers.
struct RatioWindow {
  double kept_energy = -1;  // mean; -1 when a worker did not measure it
  double comm_share = 0;    // mean comm_us / round_us
  double comm_us = 0, round_us = 0;
  int workers = 0;
};

struct RatioDecision {
  double ratio = 0;
  std::string reason;  // the measured values against the thresholds
};

// The policy above for an entry with `config` (defaults filled in) at `ratio`: the new ratio
// and why, or nullopt when it stays.
std::optional<RatioDecision> DecideRatio(const proto::AdaptiveRatio& config, double ratio,
                                         const RatioWindow& window);

class AdaptiveRatioControl {
 public:
  // A change of one entry's ratio: the strategy to switch to and the log line with its reason.
  struct Change {
    proto::Strategy strategy;
    std::string log;
  };

  // A worker's report under the strategy `current`, in a job whose windows come from
  // `pushers` workers (all of them, or each machine's local root in a hierarchical job).
  // Returns the change once the report completes a window and the policy changes the entry's
  // ratio; nullopt otherwise. A report that is stale (another version), for a tensor without
  // an adaptive entry, or malformed (no rounds, a negative or non-finite time) is dropped; the
  // error names why, for the log.
  std::optional<Change> Add(int worker_rank, const proto::RatioReport& report,
                            const proto::Strategy& current, int pushers, std::string* dropped);

 private:
  // (tensor, version, window) -> reports by worker rank.
  std::map<std::tuple<std::string, uint64_t, uint64_t>, std::map<int, proto::RatioReport>> windows_;
};

}  // namespace bytecomp
