#include "forward_timer.h"

#include <dirent.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "bytecomp/common/stats.h"

namespace bytecomp::worker {

double ProcessWaitUs() {
  // Each line: "<ns on a CPU> <ns waiting on a run queue> <timeslices>".
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return -1;
  double wait_ns = 0;
  bool any = false;
  while (const dirent* entry = readdir(tasks)) {
    if (entry->d_name[0] == '.') continue;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/self/task/%.20s/schedstat", entry->d_name);
    FILE* f = std::fopen(path, "r");
    if (f == nullptr) continue;  // a thread that ended meanwhile
    unsigned long long on_cpu = 0, waiting = 0;
    if (std::fscanf(f, "%llu %llu", &on_cpu, &waiting) == 2) {
      wait_ns += static_cast<double>(waiting);
      any = true;
    }
    std::fclose(f);
  }
  closedir(tasks);
  return any ? wait_ns / 1e3 : -1;
}

bool ThreadSchedUs(int64_t tid, double* cpu_us, double* wait_us) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%lld/schedstat", static_cast<long long>(tid));
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return false;
  unsigned long long on_cpu = 0, waiting = 0;
  const bool read = std::fscanf(f, "%llu %llu", &on_cpu, &waiting) == 2;
  std::fclose(f);
  if (!read) return false;
  *cpu_us = static_cast<double>(on_cpu) / 1e3;
  *wait_us = static_cast<double>(waiting) / 1e3;
  return true;
}

int64_t ThisThreadId() { return static_cast<int64_t>(syscall(SYS_gettid)); }

double ContendedUs(double elapsed_us, double cpu_us, double wait_us) {
  const double off_cpu = std::max(0.0, elapsed_us - cpu_us - wait_us);
  return std::max(0.0, wait_us - off_cpu);
}

namespace {

// ProcessWaitUs at most once a millisecond.
class WaitCache {
 public:
  double Get(double now_us) {
    absl::MutexLock lock(&mu_);
    if (read_us_ < 0 || now_us - read_us_ >= 1000) {
      value_us_ = ProcessWaitUs();
      read_us_ = now_us;
    }
    return value_us_;
  }

 private:
  absl::Mutex mu_;
  double read_us_ ABSL_GUARDED_BY(mu_) = -1;
  double value_us_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace

CpuSample SampleCpu(int64_t tid) {
  static WaitCache* const wait_cache = new WaitCache;
  CpuSample s;
  s.tid = tid != 0 ? tid : ThisThreadId();
  if (!ThreadSchedUs(s.tid, &s.thread_cpu_us, &s.thread_wait_us)) {
    s.thread_cpu_us = s.thread_wait_us = -1;
  }
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  s.process_wait_us = wait_cache->Get(static_cast<double>(now.tv_sec) * 1e6 +
                                      static_cast<double>(now.tv_nsec) / 1e3);
  timespec ts{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) == 0) {
    s.process_us = static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
  }
  // First line: "cpu  user nice system idle iowait irq softirq steal ..." in clock ticks.
  if (FILE* f = std::fopen("/proc/stat", "r")) {
    unsigned long long v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                    &v[4], &v[5], &v[6], &v[7]) >= 4) {
      for (unsigned long long x : v) s.host_total_ticks += x;
      s.host_busy_ticks = s.host_total_ticks - v[3] - v[4];
    }
    std::fclose(f);
  }
  return s;
}

int CpuCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  return CPU_COUNT(&set);
}

void ForwardTimer::Started(int64_t round, int64_t time_us, const CpuSample& cpu) {
  if (round < 0 || round > rounds_) return;
  if (round >= 1) {
    auto [it, inserted] = first_start_.emplace(round, Mark{time_us, cpu});
    if (!inserted && time_us < it->second.time_us) it->second = Mark{time_us, cpu};
  }
  auto [last, inserted] = last_start_.emplace(round, Mark{time_us, cpu});
  if (!inserted && time_us > last->second.time_us) last->second = Mark{time_us, cpu};
}

void ForwardTimer::Waited(int64_t start_us, int64_t end_us) {
  if (waits_.size() < kMaxWaits && end_us > start_us) waits_.emplace_back(start_us, end_us);
}

void ForwardTimer::Done(int64_t round, int64_t time_us, const CpuSample& cpu) {
  if (round < 0 || round > rounds_) return;
  auto [it, inserted] = last_done_.emplace(round, Mark{time_us, cpu});
  if (!inserted && time_us > it->second.time_us) it->second = Mark{time_us, cpu};
}

std::vector<ForwardTimer::Forward> ForwardTimer::Forwards() const {
  // Whether both marks sampled the same training thread's schedstat.
  auto sampled = [](const Mark& a, const Mark& b) {
    return a.cpu.tid == b.cpu.tid && a.cpu.tid != 0 && a.cpu.thread_wait_us >= 0 &&
           b.cpu.thread_wait_us >= 0 && a.cpu.thread_cpu_us >= 0 && b.cpu.thread_cpu_us >= 0;
  };
  // What the training thread's wait for a CPU added from mark a to mark b, `blocked_us` of
  // which it spent waiting in the engine (not slack that absorbs a wait); 0 when unknown.
  auto contended = [&](const Mark& a, const Mark& b, double blocked_us) {
    if (!sampled(a, b)) return 0.0;
    return ContendedUs(static_cast<double>(b.time_us - a.time_us) - blocked_us,
                       std::max(0.0, b.cpu.thread_cpu_us - a.cpu.thread_cpu_us),
                       std::max(0.0, b.cpu.thread_wait_us - a.cpu.thread_wait_us));
  };
  // The training thread's own CPU time from mark a to mark b; -1 when unknown.
  auto ran = [&](const Mark& a, const Mark& b) {
    return sampled(a, b) ? std::max(0.0, b.cpu.thread_cpu_us - a.cpu.thread_cpu_us) : -1.0;
  };
  std::vector<Forward> forwards;
  for (const auto& [round, start] : first_start_) {
    auto previous = last_start_.find(round - 1);
    double waited = 0;
    if (previous != last_start_.end()) {
      for (const auto& [from, to] : waits_) {
        waited += static_cast<double>(std::max<int64_t>(
            0, std::min(to, start.time_us) - std::max(from, previous->second.time_us)));
      }
    }
    if (waited > 0) {  // the training loop's own time: the interval less its waits
      const double own =
          std::max(0.0, static_cast<double>(start.time_us - previous->second.time_us) - waited);
      forwards.push_back({std::max(0.0, own - contended(previous->second, start, waited)),
                          ran(previous->second, start)});
      continue;
    }
    auto end = last_done_.find(round - 1);
    if (end == last_done_.end()) continue;
    const double gap = static_cast<double>(start.time_us - end->second.time_us);
    forwards.push_back(
        {std::max(0.0, gap - contended(end->second, start, 0)), ran(end->second, start)});
  }
  return forwards;
}

double ForwardTimer::MedianUs() const {
  std::vector<double> gaps;
  for (const Forward& f : Forwards()) gaps.push_back(f.us);
  return Median(std::move(gaps));
}

double ForwardTimer::CpuMedianUs() const {
  std::vector<double> cpu;
  for (const Forward& f : Forwards()) {
    if (f.cpu_us >= 0) cpu.push_back(f.cpu_us);
  }
  return cpu.empty() ? -1 : Median(std::move(cpu));
}

namespace {

// Median over the rounds with both ends of `value(start, end)`, where it is defined (>= 0).
double RoundMedian(
    const std::map<int64_t, ForwardTimer::Mark>& first,
    const std::map<int64_t, ForwardTimer::Mark>& last,
    const std::function<double(const ForwardTimer::Mark&, const ForwardTimer::Mark&)>& value) {
  std::vector<double> values;
  for (const auto& [round, start] : first) {
    auto end = last.find(round);
    if (end == last.end()) continue;
    const double v = value(start, end->second);
    if (v >= 0) values.push_back(v);
  }
  return Median(std::move(values));
}

}  // namespace

double ForwardTimer::RoundMedianUs() const {
  return RoundMedian(first_start_, last_done_, [](const Mark& a, const Mark& b) {
    return static_cast<double>(std::max<int64_t>(0, b.time_us - a.time_us));
  });
}

double ForwardTimer::RoundCpuMedianUs() const {
  return RoundMedian(first_start_, last_done_, [](const Mark& a, const Mark& b) {
    return a.cpu.process_us > 0 ? b.cpu.process_us - a.cpu.process_us : -1;
  });
}

double ForwardTimer::RoundWaitMedianUs() const {
  std::vector<double> waits;
  for (const auto& [round, start] : first_start_) {
    auto end = last_done_.find(round);
    if (end == last_done_.end() || start.cpu.process_wait_us < 0 ||
        end->second.cpu.process_wait_us < 0) {
      continue;
    }
    waits.push_back(std::max(0.0, end->second.cpu.process_wait_us - start.cpu.process_wait_us));
  }
  return waits.empty() ? -1 : Median(std::move(waits));
}

double ForwardTimer::HostBusyMedian() const {
  return RoundMedian(first_start_, last_done_, [](const Mark& a, const Mark& b) {
    const double total = static_cast<double>(b.cpu.host_total_ticks - a.cpu.host_total_ticks);
    if (a.cpu.host_total_ticks == 0 || b.cpu.host_total_ticks <= a.cpu.host_total_ticks) {
      return -1.0;
    }
    return static_cast<double>(b.cpu.host_busy_ticks - a.cpu.host_busy_ticks) / total;
  });
}

}  // namespace bytecomp::worker
