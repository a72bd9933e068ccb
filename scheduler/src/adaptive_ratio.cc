#include "bytecomp/scheduler/adaptive_ratio.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bytecomp/compress/strategy.h"

namespace bytecomp {
namespace {

// Bounds the pending windows: a worker that stops reporting leaves its windows behind.
constexpr size_t kMaxPendingWindows = 4096;

bool Finite(double x) { return std::isfinite(x); }

}  // namespace

std::optional<RatioDecision> DecideRatio(const proto::AdaptiveRatio& config, double ratio,
                                         const RatioWindow& window) {
  if (window.kept_energy < 0) return std::nullopt;
  const std::string measured = absl::StrFormat(
      "kept energy %.3f, communication %.1f%% of the round (%.0f of %.0f us, mean of %d "
      "workers)",
      window.kept_energy, 100 * window.comm_share, window.comm_us, window.round_us, window.workers);
  if (window.kept_energy < config.raise_below_kept() && ratio < config.max_ratio()) {
    return RatioDecision{
        std::min(config.max_ratio(), ratio * config.step()),
        absl::StrFormat("%s: kept energy below %.3f, too much of the gradient waits in the "
                        "error-feedback memory",
                        measured, config.raise_below_kept())};
  }
  if (window.kept_energy >= config.lower_above_kept() &&
      window.comm_share >= config.min_comm_share() && ratio > config.min_ratio()) {
    return RatioDecision{
        std::max(config.min_ratio(), ratio / config.step()),
        absl::StrFormat("%s: kept energy at least %.3f and communication at least %.1f%% of "
                        "the round, fewer values save time at little loss",
                        measured, config.lower_above_kept(), 100 * config.min_comm_share())};
  }
  return std::nullopt;
}

std::optional<AdaptiveRatioControl::Change> AdaptiveRatioControl::Add(
    int worker_rank, const proto::RatioReport& report, const proto::Strategy& current, int pushers,
    std::string* dropped) {
  auto drop = [&](std::string why) -> std::optional<Change> {
    *dropped = absl::StrCat("ratio report of worker ", worker_rank, " for tensor '",
                            report.tensor(), "' window ", report.window(), " dropped: ", why);
    return std::nullopt;
  };
  dropped->clear();
  if (report.rounds() == 0 || !Finite(report.comm_us()) || report.comm_us() < 0 ||
      !Finite(report.round_us()) || report.round_us() < 0 || !Finite(report.kept_energy()) ||
      report.kept_energy() > 1 + 1e-9) {
    return drop("no rounds, or a time or kept energy out of range");
  }
  // Older versions' windows are over: a change was made since, or is being made.
  for (auto it = windows_.begin(); it != windows_.end();) {
    it = std::get<1>(it->first) < current.version() ? windows_.erase(it) : std::next(it);
  }
  if (report.strategy_version() != current.version()) {
    return drop(absl::StrCat("measured under strategy version ", report.strategy_version(),
                             ", version ", current.version(), " is in force"));
  }
  const proto::TensorStrategy* matched = EntryFor(current, report.tensor());
  int entry = -1;
  for (int i = 0; i < current.tensors_size(); ++i) {
    if (&current.tensors(i) == matched) entry = i;
  }
  if (entry < 0 || !current.tensors(entry).has_adaptive_ratio()) {
    return drop("its strategy entry does not adapt the ratio");
  }
  if (windows_.size() >= kMaxPendingWindows) windows_.erase(windows_.begin());
  auto& reports = windows_[{report.tensor(), report.strategy_version(), report.window()}];
  reports[worker_rank] = report;
  if (static_cast<int>(reports.size()) < pushers) return std::nullopt;

  RatioWindow window;
  bool kept_measured = true;
  double kept = 0;
  for (const auto& [rank, r] : reports) {
    kept_measured = kept_measured && r.kept_energy() >= 0;
    kept += r.kept_energy();
    window.comm_share += r.round_us() > 0 ? r.comm_us() / r.round_us() : 0;
    window.comm_us += r.comm_us();
    window.round_us += r.round_us();
    ++window.workers;
  }
  window.kept_energy = kept_measured ? kept / window.workers : -1;
  window.comm_share /= window.workers;
  window.comm_us /= window.workers;
  window.round_us /= window.workers;
  windows_.erase({report.tensor(), report.strategy_version(), report.window()});

  const proto::TensorStrategy& t = current.tensors(entry);
  absl::StatusOr<double> ratio = compress::PushRatio(t);
  if (!ratio.ok()) return drop(std::string(ratio.status().message()));
  const proto::AdaptiveRatio config = compress::AdaptiveRatioWithDefaults(t.adaptive_ratio());
  std::optional<RatioDecision> decision = DecideRatio(config, *ratio, window);
  if (!decision.has_value()) return std::nullopt;
  Change change;
  change.strategy = current;
  proto::TensorStrategy* changed = change.strategy.mutable_tensors(entry);
  // Six digits, unless they fall outside the bounds (a bound with more digits).
  std::string text = absl::StrCat(decision->ratio);
  double parsed = 0;
  if (!absl::SimpleAtod(text, &parsed) || parsed < config.min_ratio() ||
      parsed > config.max_ratio()) {
    text = absl::StrFormat("%.17g", decision->ratio);
  }
  (*changed->mutable_push_codec()->mutable_params())["ratio"] = text;
  // Two-way with the same codec: the pull keeps the push's ratio.
  if (changed->pull_codec().name() == changed->push_codec().name()) {
    (*changed->mutable_pull_codec()->mutable_params())["ratio"] = text;
  }
  change.log = absl::StrCat("adaptive ratio: entry '", t.name_pattern(), "' (",
                            t.push_codec().name(), ") ratio ", *ratio, " -> ", text,
                            " after window ", report.window(), " of tensor '", report.tensor(),
                            "' under version ", current.version(), ": ", decision->reason);
  return change;
}

}  // namespace bytecomp
