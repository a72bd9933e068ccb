// The measured forward time (ModelProfile.forward_us) on a fake clock: from the last completion
// of round r-1 to the first push_pull of round r, median over the profiled rounds 1..N.
#include <gtest/gtest.h>

#include "bytecomp/worker/engine/forward_timer.h"
#include "bytecomp/worker/engine/ready_profiler.h"

namespace bytecomp::worker {
namespace {

TEST(ForwardTimerTest, GapFromLastCompletionToNextFirstCall) {
  ForwardTimer t(3);
  // Round 0: calls at 0 and 10, completions at 50 and 80 (the later one ends the round).
  t.Started(0, 0);
  t.Started(0, 10);
  t.Done(0, 80);
  t.Done(0, 50);
  // Round 1 starts at 1080 (gap 1000): calls in any order, the earliest counts.
  t.Started(1, 1090);
  t.Started(1, 1080);
  t.Done(1, 1200);
  // Round 2: gap 3000; round 3: gap 500; round 4 is beyond the profile.
  t.Started(2, 4200);
  t.Done(2, 4300);
  t.Started(3, 4800);
  t.Done(3, 4900);
  t.Started(4, 4900 + 99999);
  EXPECT_DOUBLE_EQ(t.MedianUs(), 1000);  // median of 1000, 3000, 500
  // Rounds 1..3 themselves: 1200-1080, 4300-4200, 4900-4800 (round 0 is not profiled).
  EXPECT_DOUBLE_EQ(t.RoundMedianUs(), 100);
  t.Done(3, 5400);  // a later completion of round 3 ends it: 600
  EXPECT_DOUBLE_EQ(t.RoundMedianUs(), 120);
}

TEST(ForwardTimerTest, OverlappingRoundsCountZeroAndMissingEndsAreSkipped) {
  ForwardTimer t(3);
  t.Done(0, 500);
  t.Started(1, 400);  // called before round 0's last completion: no forward time
  t.Started(2, 900);  // round 1 never completed: no gap for round 2
  EXPECT_DOUBLE_EQ(t.MedianUs(), 0);
  t.Done(1, 700);
  EXPECT_DOUBLE_EQ(t.MedianUs(), 200);  // gaps 0 and 200: the upper median
  EXPECT_DOUBLE_EQ(ForwardTimer(3).MedianUs(), 0);
}

TEST(ReadyProfilerTest, ProfileCarriesTheMedianForwardTime) {
  ReadyProfiler p(3);
  const int forward[] = {0, 5000, 7000, 6000, 1};  // before rounds 1..3 (and 4, not profiled)
  int64_t now = 0;
  std::optional<proto::ModelProfile> profile;
  for (int round = 0; round <= 4 && !profile.has_value(); ++round) {
    now += forward[round];
    profile = p.Record("fc", 100, 4, now);  // the output layer's gradient first
    if (profile.has_value()) break;
    now += 300;
    profile = p.Record("conv", 1000, 4, now);
    now += 2000;  // the pulls take 2 ms; conv completes last
    p.RecordDone(round, now - 100);
    p.RecordDone(round, now);
  }
  ASSERT_TRUE(profile.has_value());
  EXPECT_DOUBLE_EQ(profile->forward_us(), 6000);
  ASSERT_EQ(profile->tensors_size(), 2);
  EXPECT_EQ(profile->tensors(0).name(), "fc");
  EXPECT_EQ(profile->tensors(1).name(), "conv");
  EXPECT_DOUBLE_EQ(profile->tensors(1).ready_gap_us(), 300);
  EXPECT_NE(profile->source().find("forward_us: median time from a round's last completion"),
            std::string::npos);
}

}  // namespace
}  // namespace bytecomp::worker
