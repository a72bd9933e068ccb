#include "bytecomp/worker/engine/ready_profiler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/stats.h"

namespace bytecomp::worker {

std::optional<proto::ModelProfile> ReadyProfiler::Record(const std::string& name,
                                                         int64_t elements, int element_bytes,
                                                         int64_t time_us) {
  if (done_ || rounds_ <= 0) return std::nullopt;
  Tensor& t = tensors_[name];
  t.elements = elements;
  t.element_bytes = element_bytes;
  const int64_t round = t.calls++;
  forward_.Started(round, time_us);
  if (round >= 1 && round <= rounds_) t.ready_us.push_back(time_us);
  if (round <= rounds_) return std::nullopt;
  done_ = true;
  return Build();
}

proto::ModelProfile ReadyProfiler::Build() const {
  // Per round, each tensor's offset from the round's first ready gradient; then per tensor the
  // median offset; the order of the medians is the ready order.
  std::vector<std::pair<double, std::string>> order;
  for (const auto& [name, t] : tensors_) {
    if (t.ready_us.empty()) continue;
    std::vector<double> offsets;
    for (size_t r = 0; r < t.ready_us.size(); ++r) {
      int64_t first = t.ready_us[r];
      for (const auto& [other_name, o] : tensors_) {
        if (r < o.ready_us.size()) first = std::min(first, o.ready_us[r]);
      }
      offsets.push_back(static_cast<double>(t.ready_us[r] - first));
    }
    order.emplace_back(Median(offsets), name);
  }
  std::sort(order.begin(), order.end());
  proto::ModelProfile profile;
  profile.set_model("measured");
  profile.set_source(absl::StrCat(
      "measured by the worker engine: push_pull call times of rounds 1..", rounds_,
      ", median offsets from each round's first gradient; forward_us: median time from a "
      "round's last completion to the next round's first push_pull; measured_round_us: median "
      "time from a round's first push_pull to its last completion"));
  profile.set_forward_us(forward_.MedianUs());
  profile.set_measured_round_us(forward_.RoundMedianUs());
  double previous = 0;
  for (const auto& [offset, name] : order) {
    const Tensor& t = tensors_.at(name);
    proto::TensorProfile* tp = profile.add_tensors();
    tp->set_name(name);
    tp->set_elements(t.elements);
    tp->set_element_bytes(t.element_bytes);
    tp->set_ready_gap_us(std::max(0.0, offset - previous));
    previous = offset;
  }
  return profile;
}

}  // namespace bytecomp::worker
