// bytecomp-control-sim: the scheduler's control plane at --workers x --servers nodes in one
// process (control_plane_sim.h), each step of a job's life with its messages, bytes, the
// scheduler's CPU time (how long the step takes when the scheduler's one thread is the limit)
// and per-node figures, at each size given.
//
//   bytecomp-control-sim [--workers=64,256,1024] [--servers=4,16,64] [--tensors=16]
//
// --workers and --servers are paired lists (the i-th job has workers[i] and servers[i]).
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "control_plane_sim.h"
#include "count_list.h"

ABSL_FLAG(std::string, workers, "64,256,1024", "workers of each job (comma-separated)");
ABSL_FLAG(std::string, servers, "4,16,64", "servers of each job, paired with --workers");
ABSL_FLAG(int, tensors, 16, "tensors every worker declares");
ABSL_FLAG(int, heartbeat_intervals, 5, "intervals of the heartbeat step");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::vector<int64_t> workers =
      bytecomp::scale::CountList(absl::GetFlag(FLAGS_workers), "bytecomp-control-sim");
  const std::vector<int64_t> servers =
      bytecomp::scale::CountList(absl::GetFlag(FLAGS_servers), "bytecomp-control-sim");
  if (workers.size() != servers.size()) {
    std::fprintf(stderr, "bytecomp-control-sim: --workers and --servers list %zu and %zu jobs\n",
                 workers.size(), servers.size());
    return 2;
  }
  std::printf("%6s %5s  %-26s %9s %9s %11s %10s %9s %9s %8s %10s %8s\n", "W", "S", "step",
              "msgs in", "msgs out", "bytes out", "sched ms", "us/node", "waits ms", "rss KB",
              "max out B", "to 1 max");
  for (size_t i = 0; i < workers.size(); ++i) {
    bytecomp::scale::ControlSimOptions options;
    options.workers = static_cast<int>(workers[i]);
    options.servers = static_cast<int>(servers[i]);
    options.tensors = absl::GetFlag(FLAGS_tensors);
    options.heartbeat_intervals = absl::GetFlag(FLAGS_heartbeat_intervals);
    std::fprintf(stderr, "bytecomp-control-sim: W=%d S=%d ...\n", options.workers, options.servers);
    absl::StatusOr<std::vector<bytecomp::scale::ControlStep>> steps =
        bytecomp::scale::RunControlPlaneSim(options);
    if (!steps.ok()) {
      std::fprintf(stderr, "bytecomp-control-sim: W=%d S=%d: %s\n", options.workers,
                   options.servers, steps.status().ToString().c_str());
      return 1;
    }
    const double nodes = options.workers + options.servers;
    for (const bytecomp::scale::ControlStep& s : *steps) {
      std::printf(
          "%6d %5d  %-26s %9lld %9lld %11lld %10.1f %9.1f %9lld %8lld %10lld %8lld\n",
          options.workers, options.servers, s.name.c_str(), static_cast<long long>(s.messages_in),
          static_cast<long long>(s.messages_out), static_cast<long long>(s.bytes_out),
          s.scheduler_cpu_ms, s.scheduler_cpu_ms * 1000 / nodes,
          static_cast<long long>(s.waited_ms), static_cast<long long>(s.rss_growth_kb),
          static_cast<long long>(s.largest_out_bytes), static_cast<long long>(s.most_to_one_node));
    }
  }
  std::printf(
      "sched ms: the scheduler's thread CPU over the step (its duration when the scheduler "
      "is the limit); waits: virtual time the protocol waits by configuration; max out B: the "
      "largest message sent; to 1 max: the most messages one node was sent\n");
  return 0;
}
