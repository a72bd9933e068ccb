// The offset of this node's wall clock from the scheduler's, estimated NTP-style from clock
// probes (proto ClockProbe/ClockReply): of all replies, the one with the shortest round trip
// bounds the error best, to half that round trip. Used to write every node's timeline on the
// scheduler's clock.
#pragma once

#include <atomic>
#include <cstdint>

namespace bytecomp {

class ClockOffset {
 public:
  // A probe sent at `sent_us` (this node's clock) that the scheduler stamped `remote_us` and
  // whose reply arrived at `received_us`.
  void AddSample(int64_t sent_us, int64_t remote_us, int64_t received_us);
  // Scheduler clock minus this node's clock, in us (0 before any sample).
  int64_t offset_us() const { return offset_us_.load(); }
  // The round trip of the sample in use (-1: none yet).
  int64_t round_trip_us() const { return best_rtt_us_.load(); }

  // This node's wall clock, in us (the clock the samples and timelines use).
  static int64_t NowUs();

 private:
  std::atomic<int64_t> offset_us_{0};
  std::atomic<int64_t> best_rtt_us_{-1};
};

}  // namespace bytecomp
