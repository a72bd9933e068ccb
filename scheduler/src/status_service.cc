#include "status_service.h"

#include "absl/strings/str_cat.h"
#include "bytecomp/common/clock_offset.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/scheduler/status/status_page.h"

namespace bytecomp {

void AnswerClockProbe(const RegisteredNode& node, const proto::ClockProbe& probe, Outbox* out) {
  proto::ControlMessage reply;
  reply.mutable_clock_reply()->set_node_sent_us(probe.node_sent_us());
  reply.mutable_clock_reply()->set_scheduler_us(ClockOffset::NowUs());
  out->Send(node.identity, std::move(reply));
}

StatusService::StatusService(const proto::ClusterConfig& config, int64_t start_ms)
    : job_(config.num_workers(), config.num_servers(), config.heartbeat_timeout_ms(), start_ms,
           !config.key_file().empty()),
      metrics_("scheduler", 0) {}

absl::StatusOr<std::unique_ptr<StatusService>> StatusService::Start(
    const std::string& address, const proto::ClusterConfig& config, int64_t start_ms) {
  std::unique_ptr<StatusService> service(new StatusService(config, start_ms));
  StatusService* self = service.get();
  self->metrics_.OnScrape([self] { self->RefreshGauges(); });
  auto page = [self] {
    std::shared_ptr<const status::StatusSnapshot> s = self->board_.Latest();
    if (s == nullptr) return telemetry::HttpResponse{503, "text/plain", "starting\n"};
    return telemetry::HttpResponse{200, "text/html; charset=utf-8", status::StatusPageHtml(*s)};
  };
  std::map<std::string, telemetry::HttpServer::Page> pages;
  pages["/metrics"] = telemetry::MetricsPage(&self->metrics_);
  pages["/"] = page;
  pages["/status"] = page;
  pages["/status.json"] = [self] {
    std::shared_ptr<const status::StatusSnapshot> s = self->board_.Latest();
    if (s == nullptr) return telemetry::HttpResponse{503, "application/json", "{}\n"};
    return telemetry::HttpResponse{200, "application/json", status::StatusJson(*s)};
  };
  telemetry::HttpOptions options;
  options.address = address;
  absl::StatusOr<std::unique_ptr<telemetry::HttpServer>> http =
      telemetry::HttpServer::Start(options, std::move(pages));
  if (!http.ok()) return http.status();
  service->http_ = *std::move(http);
  BC_LOG_INFO("status page and metrics on ", service->http_->url(), "/ and ", service->http_->url(),
              "/metrics");
  return service;
}

void StatusService::Seen(const RegisteredNode& node, int64_t now_ms) {
  job_.Seen(NodeTable::Name(node), now_ms);
}

void StatusService::Stats(const RegisteredNode& node, const proto::StatsReport& report) {
  if (node.role == proto::ROLE_WORKER) job_.Stats(node.rank, report);
}

void StatusService::WorkerDone(const RegisteredNode& node) {
  job_.WorkerDone(NodeTable::Name(node));
}

void StatusService::MaybePublish(int64_t now_ms, const NodeTable& nodes,
                                 const proto::Strategy& strategy,
                                 const std::string& strategy_source,
                                 std::optional<double> predicted_us, int64_t bad_messages) {
  if (published_ms_ >= 0 && now_ms - published_ms_ < 500) return;
  published_ms_ = now_ms;
  std::vector<status::NodeView> views;
  for (const RegisteredNode* n : nodes.Registered()) {
    views.push_back(
        {NodeTable::Name(*n), RoleName(n->role), n->rank, n->hostname, n->pid, n->data_address});
  }
  board_.Publish(
      job_.Snapshot(views, strategy, strategy_source, predicted_us, bad_messages, now_ms));
}

void StatusService::RefreshGauges() {
  std::shared_ptr<const status::StatusSnapshot> s = board_.Latest();
  if (s == nullptr) return;
  metrics_.Gauge("bytecomp_strategy_version", "Version of the strategy in force")
      .Set(static_cast<double>(s->strategy_version));
  metrics_.Gauge("bytecomp_nodes_registered", "Nodes registered with the scheduler")
      .Set(static_cast<double>(s->nodes.size()));
  for (const status::NodeHealth& n : s->nodes) {
    metrics_
        .Gauge("bytecomp_heartbeat_age_seconds",
               "Seconds since the scheduler last heard from a node", {{"node", n.node.name}})
        .Set(n.heartbeat_age_s);
  }
  metrics_.Gauge("bytecomp_job_pushed_bytes", "Bytes the workers reported pushed (StatsReport)")
      .Set(static_cast<double>(s->pushed_bytes));
  metrics_
      .Gauge("bytecomp_job_round_seconds", "Median of the recent rounds' times (slowest worker)")
      .Set(s->measured_round_ms / 1000);
  if (s->predicted_ms.has_value()) {
    metrics_.Gauge("bytecomp_predicted_iteration_seconds", "The planner's predicted iteration")
        .Set(*s->predicted_ms / 1000);
  }
}

}  // namespace bytecomp
