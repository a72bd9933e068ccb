// This worker's traffic, for EngineStats and the metrics: a part of its own so that the stages,
// the PartitionSender and their tests share it.
#pragma once

#include <atomic>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "bytecomp/telemetry.h"

namespace bytecomp::worker {

// Bytes moved by this worker (EngineStats): the stages and the PartitionSender count them, by
// codec for the metrics when they are on ("" uncompressed). The sender also publishes its queue
// and bytes in flight here.
struct TrafficCounters {
  std::atomic<int64_t> pushed_bytes{0}, pushed_raw_bytes{0}, pulled_bytes{0}, pulled_raw_bytes{0};
  std::atomic<int64_t> queued_partitions{0}, inflight_bytes{0};
  telemetry::NodeMetrics* metrics = nullptr;  // set before the engine's threads start
  void CountPush(int64_t payload_bytes, int64_t raw_bytes, absl::string_view codec) {
    pushed_bytes += payload_bytes;
    pushed_raw_bytes += raw_bytes;
    if (metrics != nullptr) {
      metrics->CountBytes(telemetry::Direction::kOut, codec, payload_bytes, raw_bytes);
    }
  }
  void CountPull(int64_t payload_bytes, int64_t raw_bytes, absl::string_view codec) {
    pulled_bytes += payload_bytes;
    pulled_raw_bytes += raw_bytes;
    if (metrics != nullptr) {
      metrics->CountBytes(telemetry::Direction::kIn, codec, payload_bytes, raw_bytes);
    }
  }
};

}  // namespace bytecomp::worker
