#include "bytecomp/common/clock_offset.h"

#include <time.h>

namespace bytecomp {

void ClockOffset::AddSample(int64_t sent_us, int64_t remote_us, int64_t received_us) {
  const int64_t rtt = received_us - sent_us;
  if (rtt < 0) return;  // the clock stepped back between send and receive
  const int64_t best = best_rtt_us_.load();
  if (best >= 0 && rtt >= best) return;
  best_rtt_us_.store(rtt);
  offset_us_.store(remote_us - (sent_us + received_us) / 2);
}

int64_t ClockOffset::NowUs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

}  // namespace bytecomp
