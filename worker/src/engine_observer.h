// What the engine shows of itself while it runs, when asked (nothing is on by default):
//   - the runtime timeline (ClusterConfig.timeline_dir or BYTECOMP_TIMELINE): every partition's
//     stages, written on the scheduler's clock (telemetry/timeline.h);
//   - Prometheus metrics on BYTECOMP_METRICS_ADDRESS (host:port, or a port on loopback);
//   - a StatsReport to the scheduler every ClusterConfig.stats_report_ms (its status page):
//     each tensor's traffic and the recent training rounds' times.
// The stages and loops call the timeline and the metrics through pointers that are null when
// off; the engine calls Started/Completed once per operation.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "bytecomp/telemetry.h"
#include "bytecomp/worker/engine.h"
#include "cluster_config.pb.h"
#include "control.pb.h"
#include "operation.h"

namespace bytecomp::worker {

class EngineObserver {
 public:
  // Opens what the configuration and the environment ask for; what cannot be opened is
  // logged and left off (the job goes on). `clock`: ours against the scheduler's.
  EngineObserver(const proto::ClusterConfig& config, int rank,
                 std::shared_ptr<const ClockOffset> clock);

  telemetry::Timeline* timeline() const { return timeline_.get(); }
  telemetry::NodeMetrics* metrics() const { return metrics_.get(); }
  // Gauges read at scrape: the engine's statistics, the data loop's queue and bytes in flight.
  void WatchEngine(std::function<EngineStats()> stats, const std::atomic<int64_t>* queued,
                   const std::atomic<int64_t>* inflight_bytes);

  // The operation's stages start (its layout and plan are set).
  void Started(const Operation& op);
  // The operation completed at `done_us` (Timeline::NowUs). Returns a StatsReport to send when
  // one is due.
  std::optional<proto::ControlMessage> Completed(const Operation& op, int64_t done_us,
                                                 const EngineStats& totals)
      ABSL_LOCKS_EXCLUDED(mu_);

  // A report of what completed since the last one, when one is due (the control thread asks
  // every poll, so that the last rounds are reported too); nullopt otherwise.
  std::optional<proto::ControlMessage> DueReport(int64_t now_us, const EngineStats& totals)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The metrics server's URL; empty when none.
  std::string metrics_url() const { return http_ != nullptr ? http_->url() : ""; }

 private:
  struct TensorTotals {
    proto::TensorStats stats;
  };
  struct RoundTimes {
    int64_t first_ready_us = 0;
    int64_t last_done_us = 0;
  };
  proto::ControlMessage Report(const EngineStats& totals, int64_t now_us)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t report_every_us_;
  std::unique_ptr<telemetry::Timeline> timeline_;
  std::unique_ptr<telemetry::NodeMetrics> metrics_;
  std::unique_ptr<telemetry::HttpServer> http_;  // after metrics_: stopped before it goes

  absl::Mutex mu_;
  std::map<uint32_t, TensorTotals> tensors_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, RoundTimes> rounds_ ABSL_GUARDED_BY(mu_);  // the last kKeptRounds
  int64_t last_report_us_ ABSL_GUARDED_BY(mu_) = 0;
  bool news_ ABSL_GUARDED_BY(mu_) = false;  // completed operations not yet reported
};

}  // namespace bytecomp::worker
