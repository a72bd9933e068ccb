#include "bytecomp/server/bandwidth_turn.h"

#include "absl/strings/str_cat.h"
#include "bytecomp/common/logging.h"

namespace bytecomp::server {

BandwidthTurn::BandwidthTurn(int64_t quiet_ms) : quiet_ms_(quiet_ms) {}

void BandwidthTurn::Expire(int64_t now_ms) {
  absl::erase_if(waiters_, [&](const auto& w) { return now_ms - w.second >= quiet_ms_; });
  if (holder_.empty()) return;
  const bool quiet = now_ms - last_seen_ms_ >= quiet_ms_;
  if (!quiet && now_ms < until_ms_) return;
  BC_LOG_WARNING("link probe: took the bandwidth turn back from sender ", holder_sender_,
                 quiet ? absl::StrCat(": no probe for ", now_ms - last_seen_ms_, " ms")
                       : std::string(": its time limit passed"));
  holder_.clear();
}

absl::StatusOr<proto::ProbeTurn> BandwidthTurn::OnProbe(absl::string_view prober,
                                                        const proto::DataHeader& probe,
                                                        int64_t now_ms) {
  Expire(now_ms);
  const bool holds = !holder_.empty() && holder_ == prober;
  if (holds) last_seen_ms_ = now_ms;
  switch (probe.probe_turn()) {
    case proto::PROBE_TURN_BEGIN:
      if (!holder_.empty() && !holds) {
        waiters_[prober] = now_ms;
        return proto::PROBE_TURN_BUSY;
      }
      waiters_.erase(prober);
      holder_ = std::string(prober);
      holder_sender_ = probe.sender();
      last_seen_ms_ = now_ms;
      until_ms_ = now_ms + probe.probe_turn_ms();
      return proto::PROBE_TURN_GRANTED;
    case proto::PROBE_TURN_END:
      if (!holds) {
        return absl::FailedPreconditionError(absl::StrCat(
            "link probe: PROBE_TURN_END from sender ", probe.sender(),
            ", which does not hold the bandwidth turn (never granted, or taken back after ",
            quiet_ms_, " ms without a probe or at its probe_turn_ms)"));
      }
      holder_.clear();
      return proto::PROBE_TURN_NONE;
    case proto::PROBE_TURN_QUERY:
      return holder_.empty() && waiters_.empty() ? proto::PROBE_TURN_IDLE : proto::PROBE_TURN_BUSY;
    default:
      return proto::PROBE_TURN_NONE;
  }
}

}  // namespace bytecomp::server
