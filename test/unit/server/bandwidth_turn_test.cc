// BandwidthTurn: one prober at a time holds a server's bandwidth turn; END, a quiet holder and
// the holder's time limit give it back; an END without the turn is refused clearly.
#include "bytecomp/server/bandwidth_turn.h"

#include <gtest/gtest.h>

namespace bytecomp::server {
namespace {

proto::DataHeader Probe(int sender, proto::ProbeTurn turn, int64_t turn_ms = 0) {
  proto::DataHeader h;
  h.set_op(proto::OP_PROBE);
  h.set_sender(sender);
  h.set_probe_turn(turn);
  h.set_probe_turn_ms(turn_ms);
  return h;
}

proto::ProbeTurn Begin(BandwidthTurn& t, const char* who, int sender, int64_t now,
                       int64_t turn_ms = 5000) {
  absl::StatusOr<proto::ProbeTurn> r =
      t.OnProbe(who, Probe(sender, proto::PROBE_TURN_BEGIN, turn_ms), now);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : proto::PROBE_TURN_NONE;
}

TEST(BandwidthTurnTest, OneHolderAtATimeUntilItGivesItBack) {
  BandwidthTurn t(/*quiet_ms=*/500);
  EXPECT_FALSE(t.held());
  EXPECT_EQ(Begin(t, "a", 0, 0), proto::PROBE_TURN_GRANTED);
  EXPECT_TRUE(t.held());
  EXPECT_EQ(Begin(t, "b", 1, 1), proto::PROBE_TURN_BUSY);
  EXPECT_EQ(Begin(t, "a", 0, 2), proto::PROBE_TURN_GRANTED);  // asking again keeps it
  // Small probes and transfers need no turn and are answered NONE, from anyone.
  EXPECT_EQ(*t.OnProbe("b", Probe(1, proto::PROBE_TURN_NONE), 3), proto::PROBE_TURN_NONE);
  EXPECT_EQ(*t.OnProbe("a", Probe(0, proto::PROBE_TURN_NONE), 4), proto::PROBE_TURN_NONE);
  EXPECT_EQ(Begin(t, "b", 1, 5), proto::PROBE_TURN_BUSY);
  // After its last transfer, the holder gives it back.
  EXPECT_EQ(*t.OnProbe("a", Probe(0, proto::PROBE_TURN_END), 6), proto::PROBE_TURN_NONE);
  EXPECT_FALSE(t.held());
  EXPECT_EQ(Begin(t, "b", 1, 7), proto::PROBE_TURN_GRANTED);
  EXPECT_EQ(Begin(t, "a", 0, 8), proto::PROBE_TURN_BUSY);
}

TEST(BandwidthTurnTest, AQuietHolderLosesTheTurnAfterTheBound) {
  BandwidthTurn t(/*quiet_ms=*/500);
  EXPECT_EQ(Begin(t, "a", 0, 1000), proto::PROBE_TURN_GRANTED);
  // Every probe of the holder restarts the bound.
  EXPECT_EQ(*t.OnProbe("a", Probe(0, proto::PROBE_TURN_NONE), 1400), proto::PROBE_TURN_NONE);
  EXPECT_EQ(Begin(t, "b", 1, 1899), proto::PROBE_TURN_BUSY);
  EXPECT_EQ(Begin(t, "b", 1, 1900), proto::PROBE_TURN_GRANTED);  // 500 ms without a probe
  // The old holder's END is refused: its transfers may have overlapped another's.
  absl::StatusOr<proto::ProbeTurn> late = t.OnProbe("a", Probe(0, proto::PROBE_TURN_END), 1901);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(late.status().message(),
            "link probe: PROBE_TURN_END from sender 0, which does not hold the bandwidth turn "
            "(never granted, or taken back after 500 ms without a probe or at its "
            "probe_turn_ms)");
  EXPECT_TRUE(t.held());  // still b's
  EXPECT_EQ(Begin(t, "a", 0, 1902), proto::PROBE_TURN_BUSY);
}

TEST(BandwidthTurnTest, TheHoldersTimeLimitEndsTheTurnEvenWhileItProbes) {
  BandwidthTurn t(/*quiet_ms=*/500);
  EXPECT_EQ(Begin(t, "a", 0, 0, /*turn_ms=*/1000), proto::PROBE_TURN_GRANTED);
  for (int64_t now = 100; now < 1000; now += 100) {
    EXPECT_EQ(*t.OnProbe("a", Probe(0, proto::PROBE_TURN_NONE), now), proto::PROBE_TURN_NONE);
    EXPECT_EQ(Begin(t, "b", 1, now), proto::PROBE_TURN_BUSY);
  }
  EXPECT_EQ(Begin(t, "b", 1, 1000), proto::PROBE_TURN_GRANTED);
}

TEST(BandwidthTurnTest, QueryIsBusyWhileAnyoneHoldsOrWaits) {
  BandwidthTurn t(/*quiet_ms=*/500);
  auto query = [&](const char* who, int64_t now) {
    return *t.OnProbe(who, Probe(0, proto::PROBE_TURN_QUERY), now);
  };
  EXPECT_EQ(query("x", 0), proto::PROBE_TURN_IDLE);
  EXPECT_EQ(Begin(t, "a", 0, 10), proto::PROBE_TURN_GRANTED);
  EXPECT_EQ(query("x", 11), proto::PROBE_TURN_BUSY);
  EXPECT_EQ(Begin(t, "b", 1, 12), proto::PROBE_TURN_BUSY);  // b waits
  EXPECT_EQ(*t.OnProbe("a", Probe(0, proto::PROBE_TURN_END), 13), proto::PROBE_TURN_NONE);
  EXPECT_EQ(query("x", 14), proto::PROBE_TURN_BUSY);  // b has not had its turn
  EXPECT_EQ(Begin(t, "b", 1, 15), proto::PROBE_TURN_GRANTED);
  EXPECT_EQ(*t.OnProbe("b", Probe(1, proto::PROBE_TURN_END), 16), proto::PROBE_TURN_NONE);
  EXPECT_EQ(query("x", 17), proto::PROBE_TURN_IDLE);
  // A waiter that stops asking (it gave up at its time limit) is forgotten after quiet_ms.
  EXPECT_EQ(Begin(t, "a", 0, 20), proto::PROBE_TURN_GRANTED);
  EXPECT_EQ(Begin(t, "c", 2, 21), proto::PROBE_TURN_BUSY);
  EXPECT_EQ(*t.OnProbe("a", Probe(0, proto::PROBE_TURN_END), 22), proto::PROBE_TURN_NONE);
  EXPECT_EQ(query("x", 520), proto::PROBE_TURN_BUSY);
  EXPECT_EQ(query("x", 521), proto::PROBE_TURN_IDLE);
}

TEST(BandwidthTurnTest, EndWithoutTheTurnIsRefused) {
  BandwidthTurn t(/*quiet_ms=*/500);
  absl::StatusOr<proto::ProbeTurn> never = t.OnProbe("a", Probe(-1, proto::PROBE_TURN_END), 0);
  EXPECT_EQ(never.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(never.status().message().find("PROBE_TURN_END from sender -1, which does not hold"),
            std::string::npos);
  EXPECT_EQ(Begin(t, "a", 0, 1), proto::PROBE_TURN_GRANTED);
  EXPECT_FALSE(t.OnProbe("b", Probe(1, proto::PROBE_TURN_END), 2).ok());  // not b's to end
  EXPECT_TRUE(t.held());
}

}  // namespace
}  // namespace bytecomp::server
