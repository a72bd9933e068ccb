#include "ready_profiler.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/stats.h"

namespace bytecomp::worker {

double BlockDensity(const float* x, size_t n) {
  if (n == 0) return 0;
  constexpr size_t kBlock = 256;
  size_t nonzero = 0;
  for (size_t begin = 0; begin < n; begin += kBlock) {
    const size_t end = std::min(n, begin + kBlock);
    bool any = false;
    for (size_t i = begin; i < end; ++i) any |= x[i] != 0.0f;
    nonzero += any ? 1 : 0;
  }
  return static_cast<double>(nonzero) / static_cast<double>((n + kBlock - 1) / kBlock);
}

bool ReadyProfiler::WantsBlockDensity(const std::string& name) const {
  auto it = tensors_.find(name);
  return !done_ && rounds_ > 0 && it != tensors_.end() && it->second.calls == 1;
}

std::optional<proto::ModelProfile> ReadyProfiler::Record(const std::string& name, int64_t elements,
                                                         int element_bytes, int64_t time_us,
                                                         double block_density, const CpuSample& cpu,
                                                         bool on_device) {
  if (done_ || rounds_ <= 0) return std::nullopt;
  Tensor& t = tensors_[name];
  t.elements = elements;
  t.element_bytes = element_bytes;
  t.on_device = on_device;
  const int64_t round = t.calls++;
  forward_.Started(round, time_us, cpu);
  if (cpu.tid != 0) caller_tid_ = cpu.tid;
  if (round >= 1 && round <= rounds_) {
    t.calls_in_rounds.push_back(Call{time_us, cpu.tid, cpu.thread_cpu_us, cpu.thread_wait_us});
  }
  if (block_density >= 0) t.block_density = block_density;
  if (round <= rounds_) return std::nullopt;
  done_ = true;
  return Build();
}

proto::ModelProfile ReadyProfiler::Build() const {
  // Per round, its first and last call (every tensor's r-th call is of round r + 1).
  std::vector<Call> first, last;  // by round - 1
  for (const auto& [name, t] : tensors_) {
    for (size_t r = 0; r < t.calls_in_rounds.size(); ++r) {
      const Call& c = t.calls_in_rounds[r];
      if (r >= first.size()) {
        first.resize(r + 1, c);
        last.resize(r + 1, c);
      }
      if (c.time_us < first[r].time_us) first[r] = c;
      if (c.time_us > last[r].time_us) last[r] = c;
    }
  }
  // The training thread's wait for a CPU and its own CPU time from call a to call b: known
  // when one thread made both and the kernel said (-1 otherwise).
  auto waited = [](const Call& a, const Call& b) {
    if (a.tid != b.tid || a.tid == 0 || a.wait_us < 0 || b.wait_us < 0) return -1.0;
    return std::max(0.0, b.wait_us - a.wait_us);
  };
  auto ran = [](const Call& a, const Call& b) {
    if (a.tid != b.tid || a.tid == 0 || a.cpu_us < 0 || b.cpu_us < 0) return -1.0;
    return std::max(0.0, b.cpu_us - a.cpu_us);
  };
  // Per round, its calls in time order and, at each, what the training thread's wait for a
  // CPU had added since the round's first call: summed over consecutive calls made by one
  // thread (ContendedUs).
  std::map<const Call*, double> contended;
  // Tensors called, in some round, after a wait of the training thread that began after the
  // round's previous call (ProfileTensor.after_wait).
  std::set<std::string> after_wait;
  {
    std::vector<std::vector<const Call*>> calls(first.size());
    std::map<const Call*, std::string> tensor_of;
    for (const auto& [name, t] : tensors_) {
      for (size_t r = 0; r < t.calls_in_rounds.size(); ++r) {
        calls[r].push_back(&t.calls_in_rounds[r]);
        tensor_of[&t.calls_in_rounds[r]] = name;
      }
    }
    for (size_t r = 0; r < calls.size(); ++r) {
      std::stable_sort(calls[r].begin(), calls[r].end(),
                       [](const Call* a, const Call* b) { return a->time_us < b->time_us; });
      double sum = 0;
      for (size_t k = 0; k < calls[r].size(); ++k) {
        const Call* c = calls[r][k];
        if (k > 0) {
          const Call* p = calls[r][k - 1];
          auto next_wait = std::lower_bound(waits_.begin(), waits_.end(),
                                            std::make_pair(p->time_us, int64_t{0}));
          if (next_wait != waits_.end() && next_wait->first < c->time_us) {
            after_wait.insert(tensor_of[c]);
          }
          const double wait = waited(*p, *c), cpu = ran(*p, *c);
          if (wait >= 0 && cpu >= 0) {
            sum += ContendedUs(static_cast<double>(c->time_us - p->time_us), cpu, wait);
          }
        }
        contended[c] = sum;
      }
    }
  }
  // Each tensor's offset from its round's first ready gradient, less what the training
  // thread's wait added in between; per tensor the median offset; the order of the medians is
  // the ready order.
  std::vector<std::pair<double, std::string>> order;
  for (const auto& [name, t] : tensors_) {
    if (t.calls_in_rounds.empty()) continue;
    std::vector<double> offsets;
    for (size_t r = 0; r < t.calls_in_rounds.size(); ++r) {
      const Call& c = t.calls_in_rounds[r];
      const double lost = contended.at(&c);
      offsets.push_back(std::max(0.0, static_cast<double>(c.time_us - first[r].time_us) - lost));
    }
    order.emplace_back(Median(offsets), name);
  }
  std::vector<double> round_wait, round_cpu;  // the training thread's, per round
  for (size_t r = 0; r < first.size(); ++r) {
    if (const double w = waited(first[r], last[r]); w >= 0) round_wait.push_back(w);
    if (const double c = ran(first[r], last[r]); c >= 0) round_cpu.push_back(c);
  }
  std::sort(order.begin(), order.end());
  proto::ModelProfile profile;
  profile.set_model("measured");
  profile.set_source(absl::StrCat(
      "measured by the worker engine: push_pull call times of rounds 1..", rounds_,
      ", median offsets from each round's first gradient; forward_us: median time from a "
      "round's last completion (where the training thread waited in the engine in between: "
      "from its last push_pull, less those waits) to the next round's first push_pull; "
      "measured_round_us: median "
      "time from a round's first push_pull to its last completion; measured_round_cpu_us and "
      "host_cpu_busy: medians of this process's CPU time and the host's busy CPU share in "
      "those rounds; measured_round_wait_us: median of this process's threads' time waiting "
      "for a CPU in them; the ready offsets and forward_us leave out what the training "
      "thread's (the push_pull caller's) wait for a CPU added to them (its wait less its time "
      "asleep or blocked in between); measured_training_wait_us and "
      "measured_training_cpu_us: medians of that thread's wait and CPU time from a round's "
      "first push_pull to its last; measured_forward_cpu_us: median of its CPU time in the "
      "forward_us intervals"));
  profile.set_forward_us(forward_.MedianUs());
  if (const double cpu_us = forward_.CpuMedianUs(); cpu_us >= 0) {
    profile.set_measured_forward_cpu_us(cpu_us);
  }
  profile.set_measured_round_us(forward_.RoundMedianUs());
  profile.set_measured_round_cpu_us(forward_.RoundCpuMedianUs());
  profile.set_host_cpu_busy(std::clamp(forward_.HostBusyMedian(), 0.0, 1.0));
  profile.set_cpu_cores(CpuCores());
  if (const double wait_us = forward_.RoundWaitMedianUs(); wait_us >= 0) {
    profile.set_measured_round_wait_us(wait_us);
  }
  if (!round_wait.empty()) profile.set_measured_training_wait_us(Median(std::move(round_wait)));
  if (!round_cpu.empty()) profile.set_measured_training_cpu_us(Median(std::move(round_cpu)));
  double previous = 0;
  for (const auto& [offset, name] : order) {
    const Tensor& t = tensors_.at(name);
    proto::TensorProfile* tp = profile.add_tensors();
    tp->set_name(name);
    tp->set_elements(t.elements);
    tp->set_element_bytes(t.element_bytes);
    tp->set_ready_gap_us(std::max(0.0, offset - previous));
    if (t.block_density >= 0) tp->set_block_density(t.block_density);
    if (t.on_device) tp->set_on_device(true);
    if (after_wait.contains(name)) tp->set_after_wait(true);
    if (static_cast<int>(t.calls_in_rounds.size()) < rounds_) tp->set_some_rounds_only(true);
    previous = offset;
  }
  return profile;
}

}  // namespace bytecomp::worker
