#include "engine_observer.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/dtype.h"
#include "bytecomp/common/logging.h"
#include "stage_pipeline.h"

namespace bytecomp::worker {
namespace {

constexpr size_t kKeptRounds = 64;  // StatsReport's bound
constexpr int kReportedTensors = 256;

}  // namespace

EngineObserver::EngineObserver(const proto::ClusterConfig& config, int rank,
                               std::shared_ptr<const ClockOffset> clock)
    : report_every_us_(int64_t{config.stats_report_ms()} * 1000) {
  timeline_ = telemetry::OpenNodeTimeline(config.timeline_dir(), "worker", rank, std::move(clock));
  const std::string address = telemetry::HttpAddress("", "BYTECOMP_METRICS_ADDRESS");
  if (!address.empty()) {
    metrics_ = std::make_unique<telemetry::NodeMetrics>("worker", rank);
    http_ = telemetry::ServeMetrics(address, metrics_.get());
    if (http_ == nullptr) metrics_.reset();
  }
}

void EngineObserver::WatchEngine(std::function<EngineStats()> stats,
                                 const std::atomic<int64_t>* queued,
                                 const std::atomic<int64_t>* inflight_bytes) {
  if (metrics_ == nullptr) return;
  telemetry::NodeMetrics* m = metrics_.get();
  prometheus::Gauge& queue =
      m->Gauge("bytecomp_queue_depth", "Partitions waiting in a queue", {{"queue", "data send"}});
  prometheus::Gauge& inflight =
      m->Gauge("bytecomp_inflight_bytes", "Push bytes sent and not yet acknowledged");
  prometheus::Gauge& operations =
      m->Gauge("bytecomp_operations", "push_pull operations accepted (EngineStats)");
  prometheus::Gauge& pushed = m->Gauge("bytecomp_engine_pushed_bytes",
                                       "Bytes pushed as the C API reports them (EngineStats)");
  m->OnScrape([=, &queue, &inflight, &operations, &pushed] {
    queue.Set(static_cast<double>(queued->load()));
    inflight.Set(static_cast<double>(inflight_bytes->load()));
    const EngineStats s = stats();
    operations.Set(static_cast<double>(s.operations));
    pushed.Set(static_cast<double>(s.pushed_bytes));
  });
}

void EngineObserver::Started(const Operation& op) {
  if (timeline_ == nullptr) return;
  const int64_t now = telemetry::Timeline::NowUs();
  for (int64_t p = 0; p < op.layout().num_partitions(); ++p) {
    const int64_t bytes = op.layout().range(p).count * static_cast<int64_t>(DTypeSize(op.dtype()));
    TraceStage(*timeline_, op, p, telemetry::Stage::kReady, op.ready_us, -1, bytes);
    TraceStage(*timeline_, op, p, telemetry::Stage::kQueued, op.ready_us,
               std::max<int64_t>(0, now - op.ready_us), bytes);
  }
}

std::optional<proto::ControlMessage> EngineObserver::Completed(const Operation& op, int64_t done_us,
                                                               const EngineStats& totals) {
  const double seconds = (done_us - op.ready_us) / 1e6;
  if (timeline_ != nullptr) {
    TraceStage(*timeline_, op, 0, telemetry::Stage::kDone, done_us, -1, op.pushed_bytes.load());
  }
  if (metrics_ != nullptr) metrics_->CountRound(seconds);
  if (report_every_us_ <= 0) return std::nullopt;
  absl::MutexLock lock(&mu_);
  proto::TensorStats& t = tensors_[op.layout().tensor_id].stats;
  if (t.name().empty()) {
    t.set_tensor_id(op.layout().tensor_id);
    t.set_name(op.request.name);
  }
  t.set_rounds(t.rounds() + 1);
  t.set_raw_bytes(t.raw_bytes() +
                  op.request.element_count * static_cast<int64_t>(DTypeSize(op.dtype())));
  t.set_pushed_bytes(t.pushed_bytes() + op.pushed_bytes.load());
  t.set_last_round_ms(seconds * 1000);
  t.set_codec(op.plan().compressed() ? op.plan().push.name() : "");
  RoundTimes& r = rounds_[op.round()];
  r.first_ready_us = r.first_ready_us == 0 ? op.ready_us : std::min(r.first_ready_us, op.ready_us);
  r.last_done_us = std::max(r.last_done_us, done_us);
  while (rounds_.size() > kKeptRounds + 1) rounds_.erase(rounds_.begin());
  news_ = true;
  if (done_us - last_report_us_ < report_every_us_) return std::nullopt;
  return Report(totals, done_us);
}

std::optional<proto::ControlMessage> EngineObserver::DueReport(int64_t now_us,
                                                               const EngineStats& totals) {
  if (report_every_us_ <= 0) return std::nullopt;
  absl::MutexLock lock(&mu_);
  if (!news_ || now_us - last_report_us_ < report_every_us_) return std::nullopt;
  return Report(totals, now_us);
}

proto::ControlMessage EngineObserver::Report(const EngineStats& totals, int64_t now_us) {
  last_report_us_ = now_us;
  news_ = false;
  proto::ControlMessage message;
  proto::StatsReport* report = message.mutable_stats_report();
  report->set_pushed_bytes(totals.pushed_bytes);
  report->set_pulled_bytes(totals.pulled_bytes);
  report->set_operations(totals.operations);
  std::vector<const proto::TensorStats*> tensors;
  for (const auto& [id, t] : tensors_) tensors.push_back(&t.stats);
  if (tensors.size() > static_cast<size_t>(kReportedTensors)) {  // the largest ones
    std::partial_sort(tensors.begin(), tensors.begin() + kReportedTensors, tensors.end(),
                      [](const proto::TensorStats* a, const proto::TensorStats* b) {
                        return a->raw_bytes() > b->raw_bytes();
                      });
    tensors.resize(kReportedTensors);
  }
  for (const proto::TensorStats* t : tensors) *report->add_tensors() = *t;
  // Rounds that a later round has begun after: the newest may still be running.
  for (auto it = rounds_.begin(); it != rounds_.end(); ++it) {
    auto next = std::next(it);
    if (next == rounds_.end()) break;
    report->add_round_index(it->first);
    report->add_round_ms((it->second.last_done_us - it->second.first_ready_us) / 1000.0);
    report->add_iteration_ms(next->first == it->first + 1
                                 ? (next->second.first_ready_us - it->second.first_ready_us) /
                                       1000.0
                                 : 0);
  }
  return message;
}

}  // namespace bytecomp::worker
