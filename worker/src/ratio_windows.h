// The measurements behind the adaptive ratio (TensorStrategy.adaptive_ratio): per tensor whose
// strategy entry adapts its ratio, the rounds of the current window, and the RatioReport for
// the scheduler once a window is complete. Windows are fixed spans of a tensor's rounds,
// [w * window_rounds, (w + 1) * window_rounds), alike on every worker; a window counts only
// when all its rounds ran under one strategy version (one ratio), so a switch leaves the
// window it falls in unreported.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "control.pb.h"

namespace bytecomp::worker {

// sum(x^2) in double, for the kept-energy fraction.
double SquaredNorm(absl::Span<const float> x);

class RatioWindows {
 public:
  // Round `round` of `tensor` started (its operation started) at now_us.
  void Started(const std::string& tensor, uint64_t round, int64_t now_us) ABSL_LOCKS_EXCLUDED(mu_);

  // Round `round` finished at now_us, run with strategy `version`; kept_energy is the share of
  // the compensated gradient's energy sent (-1: not measured). Returns the report when this
  // round completes a window of `window_rounds` rounds.
  std::optional<proto::RatioReport> Finished(const std::string& tensor, uint64_t round,
                                             uint64_t version, uint32_t window_rounds,
                                             double kept_energy, int64_t now_us)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Window {
    uint64_t version = 0;
    uint64_t window = 0;
    uint32_t rounds = 0;  // rounds of this window finished under `version`
    bool broken = false;  // a round of the window ran under another version
    double comm_us = 0, round_us = 0, kept = 0;
    uint32_t round_gaps = 0, kept_rounds = 0;
    bool kept_missing = false;
    int64_t started_us = -1;  // the running round's start
    uint64_t started_round = 0;
    int64_t previous_start_us = -1;  // the previous round's start
    uint64_t previous_round = 0;
  };

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Window> windows_ ABSL_GUARDED_BY(mu_);
};

}  // namespace bytecomp::worker
