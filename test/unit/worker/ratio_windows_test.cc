// RatioWindows on a fake clock: a report per complete window of one version, with the means
// of the communication time, the round time and the kept energy; windows that a strategy switch
// splits, or that the worker joined late, are not reported.
#include "ratio_windows.h"

#include "gtest/gtest.h"

namespace bytecomp::worker {
namespace {

// Round r starts at 1000 r us and takes comm_us; returns the report, if any.
std::optional<proto::RatioReport> Round(RatioWindows& w, uint64_t r, uint64_t version, double kept,
                                        int64_t comm_us = 300) {
  const int64_t start = 1000 * static_cast<int64_t>(r);
  w.Started("t", r, start);
  return w.Finished("t", r, version, 4, kept, start + comm_us);
}

TEST(RatioWindowsTest, ReportsEachCompleteWindowWithItsMeans) {
  RatioWindows w;
  for (uint64_t r = 0; r < 3; ++r) EXPECT_FALSE(Round(w, r, 1, 0.5).has_value()) << r;
  auto report = Round(w, 3, 1, 0.7, 500);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->tensor(), "t");
  EXPECT_EQ(report->strategy_version(), 1u);
  EXPECT_EQ(report->window(), 0u);
  EXPECT_EQ(report->rounds(), 4u);
  EXPECT_DOUBLE_EQ(report->comm_us(), (300 * 3 + 500) / 4.0);
  EXPECT_DOUBLE_EQ(report->round_us(), 1000.0);  // the gaps 0-1, 1-2, 2-3
  EXPECT_DOUBLE_EQ(report->kept_energy(), (0.5 * 3 + 0.7) / 4);
  for (uint64_t r = 4; r < 7; ++r) EXPECT_FALSE(Round(w, r, 1, 0.5).has_value());
  report = Round(w, 7, 1, 0.5);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->window(), 1u);
  EXPECT_DOUBLE_EQ(report->round_us(), 1000.0);  // 3-4 counts for window 1
}

TEST(RatioWindowsTest, AWindowSplitByASwitchOrJoinedLateIsNotReported) {
  RatioWindows w;
  Round(w, 0, 1, 0.5);
  Round(w, 1, 1, 0.5);
  Round(w, 2, 2, 0.5);  // version 2 from round 2
  EXPECT_FALSE(Round(w, 3, 2, 0.5).has_value());
  for (uint64_t r = 4; r < 7; ++r) EXPECT_FALSE(Round(w, r, 2, 0.5).has_value());
  auto report = Round(w, 7, 2, 0.5);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->strategy_version(), 2u);
  RatioWindows late;
  Round(late, 6, 1, 0.5);
  EXPECT_FALSE(Round(late, 7, 1, 0.5).has_value());  // window 1 seen from round 6 only
  for (uint64_t r = 8; r < 11; ++r) EXPECT_FALSE(Round(late, r, 1, 0.5).has_value());
  EXPECT_TRUE(Round(late, 11, 1, 0.5).has_value());
}

TEST(RatioWindowsTest, UnmeasuredKeptEnergyIsMinusOne) {
  RatioWindows w;
  for (uint64_t r = 0; r < 3; ++r) Round(w, r, 1, 0.5);
  auto report = Round(w, 3, 1, -1);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->kept_energy(), -1);
}

TEST(RatioWindowsTest, SquaredNormIsTheSumOfSquares) {
  const float x[] = {1.0f, -2.0f, 3.0f};
  EXPECT_DOUBLE_EQ(SquaredNorm(x), 14.0);
}

}  // namespace
}  // namespace bytecomp::worker
