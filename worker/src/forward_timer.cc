#include "bytecomp/worker/engine/forward_timer.h"

#include <algorithm>
#include <vector>

#include "bytecomp/common/stats.h"

namespace bytecomp::worker {

void ForwardTimer::Started(int64_t round, int64_t time_us) {
  if (round < 1 || round > rounds_) return;
  auto [it, inserted] = first_start_.emplace(round, time_us);
  if (!inserted) it->second = std::min(it->second, time_us);
}

void ForwardTimer::Done(int64_t round, int64_t time_us) {
  if (round < 0 || round > rounds_) return;
  auto [it, inserted] = last_done_.emplace(round, time_us);
  if (!inserted) it->second = std::max(it->second, time_us);
}

double ForwardTimer::MedianUs() const {
  std::vector<double> gaps;
  for (const auto& [round, start] : first_start_) {
    auto end = last_done_.find(round - 1);
    if (end == last_done_.end()) continue;
    gaps.push_back(static_cast<double>(std::max<int64_t>(0, start - end->second)));
  }
  return Median(std::move(gaps));
}

double ForwardTimer::RoundMedianUs() const {
  std::vector<double> spans;
  for (const auto& [round, start] : first_start_) {
    auto end = last_done_.find(round);
    if (end != last_done_.end()) {
      spans.push_back(static_cast<double>(std::max<int64_t>(0, end->second - start)));
    }
  }
  return Median(std::move(spans));
}

}  // namespace bytecomp::worker
