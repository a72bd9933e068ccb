// The runtime timeline's cost on the recording thread: ns per Timeline::Record (the hook the
// data path calls), with 1 and 4 threads recording at once while the writer drains, against a
// plain store of the same event into an array (the reference). The data-plane benchmark's
// rounds record about 6 events per partition and worker (run_data_plane_bench.py
// --timeline-overhead counts them), so per round: events x ns/event.
//   build/bin/timeline_bench [events per thread, default 2000000]
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "bytecomp/telemetry/timeline.h"

using bytecomp::telemetry::Stage;
using bytecomp::telemetry::Timeline;
using bytecomp::telemetry::TimelineEvent;

namespace {

// CPU time of the whole process so far (the recording threads and the writer).
double ProcessCpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// ns per event with `threads` threads recording `n` events each (`timeline` null: the
// reference, a plain store); events are paced in bursts of 4096 (about half a ring) with a
// pause for the writer, as a node's rounds are, and only the bursts are timed, so that a busy
// machine's preemptions between bursts do not count.
double RecordNs(Timeline* timeline, int threads, int n, double* wall_s) {
  std::vector<double> ns(threads);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      TimelineEvent e;
      e.stage = Stage::kPushSent;
      std::vector<TimelineEvent> plain(4096);
      double busy = 0;
      for (int done = 0; done < n;) {
        const auto burst = std::chrono::steady_clock::now();
        for (int i = 0; i < 4096 && done < n; ++i, ++done) {
          e.start_us = Timeline::NowUs();
          e.round = static_cast<uint64_t>(done);
          if (timeline != nullptr) {
            timeline->Record(e);
          } else {
            plain[static_cast<size_t>(i)] = e;
          }
        }
        busy += Seconds(burst);
        std::this_thread::sleep_for(std::chrono::milliseconds(timeline != nullptr ? 60 : 1));
      }
      ns[t] = busy * 1e9 / n;
    });
  }
  for (auto& p : pool) p.join();
  *wall_s = Seconds(start);
  double sum = 0;
  for (double v : ns) sum += v;
  return sum / threads;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 2000000;
  // Reference: the same event stamped and stored into a plain array, paced alike.
  double ref_wall = 0;
  const double ref_ns = RecordNs(nullptr, 1, n, &ref_wall);
  const std::string path = "/tmp/timeline_bench." + std::to_string(getpid()) + ".json";
  double results[2], walls[2], writer_ns = 0;
  int64_t dropped[2];
  const int threads[2] = {1, 4};
  for (int k = 0; k < 2; ++k) {
    auto timeline = Timeline::Open(path, "bench");
    if (!timeline.ok()) {
      std::fprintf(stderr, "%s\n", std::string(timeline.status().message()).c_str());
      return 1;
    }
    const double cpu_before = ProcessCpuSeconds();
    results[k] = RecordNs(timeline->get(), threads[k], n / threads[k], &walls[k]);
    dropped[k] = (*timeline)->dropped_events();
    timeline->reset();  // the writer's last flush
    if (k == 0) {
      // What is not the recording thread's is the writer's (formatting and writing JSON).
      writer_ns = ((ProcessCpuSeconds() - cpu_before) * 1e9 - results[0] * n) / (n - dropped[0]);
    }
  }
  std::remove(path.c_str());
  std::printf("reference (stamp + store): %.1f ns/event\n", ref_ns);
  for (int k = 0; k < 2; ++k) {
    std::printf(
        "Timeline::Record, %d thread(s): %.1f ns/event (%.2fx the reference); %lld of %d "
        "dropped (%.1f s)\n",
        threads[k], results[k], results[k] / ref_ns, static_cast<long long>(dropped[k]), n,
        walls[k]);
  }
  std::printf("writer thread: %.0f ns of CPU per event written\n", writer_ns);
  std::printf(
      "{\"bench\":\"timeline\",\"reference_ns\":%.2f,\"record_ns_1\":%.2f,"
      "\"record_ns_4\":%.2f,\"dropped_1\":%lld,\"dropped_4\":%lld,"
      "\"writer_ns\":%.1f}\n",
      ref_ns, results[0], results[1], static_cast<long long>(dropped[0]),
      static_cast<long long>(dropped[1]), writer_ns);
  return 0;
}
