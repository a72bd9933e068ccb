// Measures ModelProfile.forward_us, the time the planner adds to each iteration before the
// backward pass (scheduler/planner/src/timeline.cc: iteration = forward_us + the time from the
// first gradient becoming ready to the last pull done). So it is measured as the time from the
// end of round r-1 (the last of its push_pulls completed in the engine) to the start of round
// r's backward pass (its first push_pull call), median over rounds 1..N. It holds whatever the
// training loop does in between: the optimizer step, the forward pass, the backward pass up to
// the first gradient. A round that starts before the previous one ended counts as 0.
#pragma once

#include <cstdint>
#include <map>

namespace bytecomp::worker {

class ForwardTimer {
 public:
  explicit ForwardTimer(int rounds) : rounds_(rounds) {}

  // A push_pull of `round` (the tensor's call count, from 0) was called at time_us.
  void Started(int64_t round, int64_t time_us);
  // A push_pull of `round` completed at time_us.
  void Done(int64_t round, int64_t time_us);
  // Median over rounds 1..N with both ends known; 0 when there is none.
  double MedianUs() const;
  // Median over rounds 1..N of the round itself: its first push_pull call to its last
  // completion (ModelProfile.measured_round_us); 0 when no round has both.
  double RoundMedianUs() const;

 private:
  int rounds_;
  std::map<int64_t, int64_t> first_start_;  // round -> earliest push_pull call
  std::map<int64_t, int64_t> last_done_;    // round -> latest completion
};

}  // namespace bytecomp::worker
