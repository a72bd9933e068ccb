#include "ratio_windows.h"

namespace bytecomp::worker {

double SquaredNorm(absl::Span<const float> x) {
  double sum = 0;
  for (float v : x) sum += static_cast<double>(v) * v;
  return sum;
}

void RatioWindows::Started(const std::string& tensor, uint64_t round, int64_t now_us) {
  absl::MutexLock lock(&mu_);
  Window& w = windows_[tensor];
  if (w.started_us >= 0) {
    w.previous_start_us = w.started_us;
    w.previous_round = w.started_round;
  }
  w.started_us = now_us;
  w.started_round = round;
}

std::optional<proto::RatioReport> RatioWindows::Finished(const std::string& tensor, uint64_t round,
                                                         uint64_t version, uint32_t window_rounds,
                                                         double kept_energy, int64_t now_us) {
  if (window_rounds == 0) return std::nullopt;
  absl::MutexLock lock(&mu_);
  Window& w = windows_[tensor];
  if (w.started_us < 0 || w.started_round != round) return std::nullopt;  // not seen starting
  const uint64_t window = round / window_rounds;
  if (w.rounds == 0 || w.window != window) {
    // A new window: its first round decides the version it must keep.
    const Window timing = w;
    w = Window{};
    w.started_us = timing.started_us;
    w.started_round = timing.started_round;
    w.previous_start_us = timing.previous_start_us;
    w.previous_round = timing.previous_round;
    w.window = window;
    w.version = version;
    // Only a window seen from its first round counts.
    w.broken = round != window * window_rounds;
  }
  if (version != w.version) w.broken = true;
  ++w.rounds;
  w.comm_us += static_cast<double>(now_us - w.started_us);
  if (w.previous_start_us >= 0 && w.previous_round + 1 == round) {
    w.round_us += static_cast<double>(w.started_us - w.previous_start_us);
    ++w.round_gaps;
  }
  if (kept_energy >= 0) {
    w.kept += kept_energy;
    ++w.kept_rounds;
  } else {
    w.kept_missing = true;
  }
  if (w.rounds < window_rounds || round + 1 != (window + 1) * window_rounds) return std::nullopt;
  const bool complete = !w.broken && w.rounds == window_rounds;
  std::optional<proto::RatioReport> report;
  if (complete) {
    report.emplace();
    report->set_tensor(tensor);
    report->set_strategy_version(w.version);
    report->set_window(window);
    report->set_rounds(w.rounds);
    report->set_comm_us(w.comm_us / w.rounds);
    report->set_round_us(w.round_gaps > 0 ? w.round_us / w.round_gaps : 0);
    report->set_kept_energy(w.kept_missing || w.kept_rounds == 0 ? -1 : w.kept / w.kept_rounds);
  }
  w.rounds = 0;  // the next round opens the next window
  return report;
}

}  // namespace bytecomp::worker
