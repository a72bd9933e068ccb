#include "bytecomp/scheduler/status/job_status.h"

#include <algorithm>

#include "bytecomp/common/clock_offset.h"
#include "bytecomp/common/stats.h"
#include "bytecomp/compress/strategy.h"

namespace bytecomp::status {
namespace {

std::string PlacementName(proto::Placement p) {
  switch (p) {
    case proto::PLACEMENT_CPU_POOL:
      return "cpu pool";
    case proto::PLACEMENT_INLINE:
      return "inline";
    case proto::PLACEMENT_GPU:
      return "gpu";
    default:
      return "default (pool; GPU for device tensors)";
  }
}

std::string SchemeName(proto::Scheme scheme) {
  switch (scheme) {
    case proto::SCHEME_ALLREDUCE:
      return "allreduce";
    case proto::SCHEME_ALLGATHER:
      return "allgather";
    default:
      return "ps";
  }
}

}  // namespace

JobStatus::JobStatus(int num_workers, int num_servers, int heartbeat_timeout_ms, int64_t start_ms,
                     bool keyed)
    : num_workers_(num_workers),
      num_servers_(num_servers),
      heartbeat_timeout_ms_(heartbeat_timeout_ms),
      start_ms_(start_ms),
      keyed_(keyed) {}

void JobStatus::Seen(const std::string& node_name, int64_t now_ms) {
  last_seen_ms_[node_name] = now_ms;
}

void JobStatus::WorkerDone(const std::string& node_name) { done_[node_name] = true; }

void JobStatus::Stats(int worker_rank, const proto::StatsReport& report) {
  if (worker_rank < 0 || worker_rank >= num_workers_) return;
  proto::StatsReport& kept = reports_[worker_rank] = report;
  if (kept.tensors_size() > kMaxTensors) {
    kept.mutable_tensors()->DeleteSubrange(kMaxTensors, kept.tensors_size() - kMaxTensors);
  }
  const int rounds = std::min({kept.round_index_size(), kept.round_ms_size(), kMaxRounds});
  kept.mutable_round_index()->Truncate(rounds);
  kept.mutable_round_ms()->Truncate(rounds);
  kept.mutable_iteration_ms()->Truncate(std::min(rounds, kept.iteration_ms_size()));
}

StatusSnapshot JobStatus::Snapshot(const std::vector<NodeView>& nodes,
                                   const proto::Strategy& strategy,
                                   const std::string& strategy_source,
                                   std::optional<double> predicted_us, int64_t bad_messages,
                                   int64_t now_ms) const {
  StatusSnapshot s;
  s.taken_at_us = ClockOffset::NowUs();
  s.uptime_s = (now_ms - start_ms_) / 1000.0;
  s.num_workers = num_workers_;
  s.num_servers = num_servers_;
  s.keyed = keyed_;
  s.bad_messages = bad_messages;
  for (const NodeView& node : nodes) {
    NodeHealth h;
    h.node = node;
    auto seen = last_seen_ms_.find(node.name);
    if (seen != last_seen_ms_.end()) h.heartbeat_age_s = (now_ms - seen->second) / 1000.0;
    if (done_.count(node.name)) {
      h.state = "done";
    } else if (h.heartbeat_age_s < 0 || h.heartbeat_age_s * 1000 > heartbeat_timeout_ms_) {
      h.state = "silent";
    } else if (h.heartbeat_age_s * 2000 > heartbeat_timeout_ms_) {
      h.state = "late";
    } else {
      h.state = "ok";
    }
    s.nodes.push_back(std::move(h));
  }
  s.strategy_version = strategy.version();
  s.strategy_source = strategy_source;
  if (predicted_us.has_value()) s.predicted_ms = *predicted_us / 1000.0;

  // Tensors: summed over workers, in the order the first report lists them.
  std::map<std::string, size_t> row_of;
  std::map<uint64_t, double> round_ms;  // slowest worker per round
  std::vector<double> iterations;
  for (const auto& [rank, report] : reports_) {
    s.pushed_bytes += report.pushed_bytes();
    s.pulled_bytes += report.pulled_bytes();
    s.operations += report.operations();
    for (const proto::TensorStats& t : report.tensors()) {
      auto [it, added] = row_of.emplace(t.name(), s.tensors.size());
      if (added) {
        TensorRow row;
        row.name = t.name();
        const compress::TensorPlan plan =
            compress::PlanFor(strategy, t.name(), t.rounds() > 0 ? t.raw_bytes() / t.rounds() : 0);
        row.codec = plan.compressed() ? plan.push.name() : "none";
        if (plan.two_way()) row.pull_codec = plan.pull.name();
        row.compress_on = plan.compressed() ? PlacementName(plan.compress_on) : "-";
        row.scheme = SchemeName(plan.scheme);
        row.unencrypted = keyed_ && plan.collective();
        s.tensors.push_back(row);
      }
      TensorRow& row = s.tensors[it->second];
      row.rounds += t.rounds();
      row.raw_bytes += t.raw_bytes();
      row.pushed_bytes += t.pushed_bytes();
      row.last_round_ms = std::max(row.last_round_ms, t.last_round_ms());
    }
    for (int i = 0; i < report.round_index_size() && i < report.round_ms_size(); ++i) {
      double& ms = round_ms[report.round_index(i)];
      ms = std::max(ms, report.round_ms(i));
      if (i < report.iteration_ms_size() && report.iteration_ms(i) > 0) {
        iterations.push_back(report.iteration_ms(i));
      }
    }
  }
  for (TensorRow& row : s.tensors) {
    row.ratio = row.pushed_bytes > 0 ? static_cast<double>(row.raw_bytes) / row.pushed_bytes : 0;
  }
  std::vector<double> recent;
  for (auto it = round_ms.begin(); it != round_ms.end(); ++it) {
    if (static_cast<int>(std::distance(it, round_ms.end())) > kMaxRounds) continue;
    s.rounds.emplace_back(it->first, it->second);
    recent.push_back(it->second);
  }
  s.measured_round_ms = Median(recent);
  s.measured_iteration_ms = Median(iterations);
  return s;
}

void StatusBoard::Publish(StatusSnapshot snapshot) {
  auto shared = std::make_shared<const StatusSnapshot>(std::move(snapshot));
  absl::MutexLock lock(&mu_);
  latest_ = std::move(shared);
}

std::shared_ptr<const StatusSnapshot> StatusBoard::Latest() const {
  absl::MutexLock lock(&mu_);
  return latest_;
}

}  // namespace bytecomp::status
