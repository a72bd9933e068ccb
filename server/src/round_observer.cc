#include "bytecomp/server/round_observer.h"

namespace bytecomp::server {

void RoundTelemetry::RoundStarted(uint64_t key) {
  if (timeline_ != nullptr || metrics_ != nullptr) {
    first_push_us_[key] = telemetry::Timeline::NowUs();
  }
}

void RoundTelemetry::PushAccepted(absl::string_view codec, int64_t wire, int64_t raw) {
  if (metrics_ != nullptr) metrics_->CountBytes(telemetry::Direction::kIn, codec, wire, raw);
}

void RoundTelemetry::RoundSummed(uint64_t key, uint64_t iteration, absl::string_view codec,
                                 int64_t bytes) {
  if (timeline_ == nullptr && metrics_ == nullptr) return;
  const int64_t now = telemetry::Timeline::NowUs();
  const int64_t first_push_us = first_push_us_[key];
  if (metrics_ != nullptr) metrics_->CountRound((now - first_push_us) / 1e6);
  if (timeline_ != nullptr) {
    telemetry::TimelineEvent e;
    e.start_us = first_push_us;
    e.duration_us = now - first_push_us;
    e.round = iteration;
    e.bytes = bytes;
    e.tensor_id = static_cast<uint32_t>(key >> 32);
    e.partition = static_cast<uint32_t>(key & 0xffffffffu);
    e.codec = timeline_->CodecId(codec);
    e.stage = telemetry::Stage::kSummed;
    timeline_->Record(e);
  }
}

void RoundTelemetry::PullAnswered(absl::string_view codec, int64_t wire, int64_t raw) {
  if (metrics_ != nullptr) metrics_->CountBytes(telemetry::Direction::kOut, codec, wire, raw);
}

}  // namespace bytecomp::server
