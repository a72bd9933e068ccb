// The scheduler's HTTP side: its Prometheus metrics and the status page (scheduler/status),
// served on the HTTP server's own threads from snapshots the scheduler thread publishes every
// half second; and the answer to clock probes (every node's timeline is on this clock).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "bytecomp/scheduler/control_router.h"
#include "bytecomp/scheduler/node_table.h"
#include "bytecomp/scheduler/outbox.h"
#include "bytecomp/scheduler/status/job_status.h"
#include "bytecomp/telemetry.h"
#include "cluster_config.pb.h"
#include "control.pb.h"

namespace bytecomp {

// ClockProbe -> ClockReply with this host's wall clock.
void AnswerClockProbe(const RegisteredNode& node, const proto::ClockProbe& probe, Outbox* out);

class StatusService : public ControlObserver {
 public:
  // Serves /metrics, / (the page), /status and /status.json on `address` (host:port).
  static absl::StatusOr<std::unique_ptr<StatusService>> Start(const std::string& address,
                                                              const proto::ClusterConfig& config,
                                                              int64_t start_ms);

  void Seen(const RegisteredNode& node, int64_t now_ms) override;
  void Stats(const RegisteredNode& node, const proto::StatsReport& report) override;
  void WorkerDone(const RegisteredNode& node) override;
  void CountRefused() { metrics_.CountRefused("bad control message"); }
  // Publishes a snapshot when the last one is half a second old.
  void MaybePublish(int64_t now_ms, const NodeTable& nodes, const proto::Strategy& strategy,
                    const std::string& strategy_source, std::optional<double> predicted_us,
                    int64_t bad_messages);

  std::string url() const { return http_->url(); }

 private:
  StatusService(const proto::ClusterConfig& config, int64_t start_ms);
  void RefreshGauges();

  status::JobStatus job_;
  status::StatusBoard board_;
  telemetry::NodeMetrics metrics_;
  int64_t published_ms_ = -1;
  std::unique_ptr<telemetry::HttpServer> http_;  // last: stopped first
};

}  // namespace bytecomp
