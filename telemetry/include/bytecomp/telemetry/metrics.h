// A node's Prometheus metrics (prometheus-cpp's registry and text format), with the counters
// the data path touches kept cheap: a byte count is two atomic adds on counters found by a
// short lock-free scan of the codecs seen so far (a lock only the first time a codec is seen).
// Gauges that mirror a node's state (queue depths, heartbeat ages) are set by OnScrape
// callbacks, on the HTTP thread, from values the node publishes.
//
// Names (Prometheus conventions; every series carries role and rank):
//   bytecomp_wire_bytes_total{direction,codec}  bytes on the wire: direction "out" = pushes
//                                               sent (worker) / pull replies sent (server),
//                                               "in" = pull replies received / pushes received
//   bytecomp_raw_bytes_total{direction,codec}   the same data uncompressed
//   bytecomp_compression_ratio{direction,codec} raw / wire
//   bytecomp_rounds_total                       rounds completed (worker: push_pulls; server:
//                                               key rounds summed)
//   bytecomp_round_duration_seconds             histogram of those rounds' durations
//   bytecomp_refused_requests_total{reason}     requests refused, by reason
//   and the gauges each node adds (Gauge()).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace bytecomp::telemetry {

enum class Direction : int { kIn = 0, kOut = 1 };

class NodeMetrics {
 public:
  // `role`: "worker", "server", "scheduler".
  NodeMetrics(std::string role, int rank);
  NodeMetrics(const NodeMetrics&) = delete;
  NodeMetrics& operator=(const NodeMetrics&) = delete;

  // Data path: `wire` bytes that stand for `raw` uncompressed bytes moved in `direction`.
  void CountBytes(Direction direction, absl::string_view codec, int64_t wire, int64_t raw)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A round completed in `seconds`.
  void CountRound(double seconds);
  // A request refused; `reason` a short fixed word ("malformed", "undeclared", ...).
  void CountRefused(absl::string_view reason) ABSL_LOCKS_EXCLUDED(mu_);

  // A gauge of this node (registered once per name and labels; the reference stays valid).
  prometheus::Gauge& Gauge(const std::string& name, const std::string& help,
                           const std::map<std::string, std::string>& labels = {})
      ABSL_LOCKS_EXCLUDED(mu_);
  // Runs before every scrape (on the HTTP thread): set gauges there.
  void OnScrape(std::function<void()> refresh) ABSL_LOCKS_EXCLUDED(mu_);

  // The text exposition format (version 0.0.4) of every metric, after the OnScrape callbacks.
  std::string Render() ABSL_LOCKS_EXCLUDED(mu_);

  // The wire bytes counted so far in `direction`, over all codecs (tests, the status report).
  int64_t WireBytes(Direction direction) const;

 private:
  static constexpr int kMaxCodecs = 64;
  struct CodecCounters {
    std::string codec;
    prometheus::Counter* wire = nullptr;
    prometheus::Counter* raw = nullptr;
    prometheus::Gauge* ratio = nullptr;
  };
  CodecCounters& CountersFor(Direction direction, absl::string_view codec) ABSL_LOCKS_EXCLUDED(mu_);

  const std::map<std::string, std::string> labels_;
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& wire_family_;
  prometheus::Family<prometheus::Counter>& raw_family_;
  prometheus::Family<prometheus::Gauge>& ratio_family_;
  prometheus::Family<prometheus::Counter>& refused_family_;
  prometheus::Counter& rounds_;
  prometheus::Histogram& round_seconds_;
  std::atomic<int64_t> wire_total_[2] = {0, 0};

  // Per direction, published by count; a slot is written once, before the count covers it.
  CodecCounters codecs_[2][kMaxCodecs];
  std::atomic<int> codec_count_[2] = {0, 0};

  absl::Mutex mu_;
  std::vector<std::function<void()>> refreshers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace bytecomp::telemetry
