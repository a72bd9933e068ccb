#include "bytecomp/common/clock_offset.h"

#include "gtest/gtest.h"

namespace bytecomp {
namespace {

TEST(ClockOffsetTest, TheShortestRoundTripWins) {
  ClockOffset clock;
  EXPECT_EQ(clock.offset_us(), 0);
  EXPECT_EQ(clock.round_trip_us(), -1);
  // Scheduler 5000 us ahead; a slow reply (asymmetric: 900 us back) is off by 450 us.
  clock.AddSample(1000, 1000 + 5000 + 100, 2000);
  EXPECT_EQ(clock.offset_us(), 5000 + 100 - 500);
  // A quick, symmetric one: exact.
  clock.AddSample(10000, 10000 + 5000 + 20, 10040);
  EXPECT_EQ(clock.offset_us(), 5000);
  EXPECT_EQ(clock.round_trip_us(), 40);
  // A slower one later does not replace it; nor does a clock that stepped back.
  clock.AddSample(20000, 20000 + 9000, 20300);
  clock.AddSample(30000, 30000, 29990);
  EXPECT_EQ(clock.offset_us(), 5000);
}

}  // namespace
}  // namespace bytecomp
