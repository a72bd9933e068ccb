// The scheduler's control plane at scale, simulated in one process: the real ControlRouter
// (every protocol the scheduler runs, without its socket) driven by W workers and S servers
// that send what real nodes send, on a virtual clock. Each step of a job's life is played in
// turn, and for each the simulation counts the messages in and out and their bytes, and
// measures the scheduler's CPU time (its thread's clock around each call), which is how long
// the step takes when the scheduler is what limits it: one thread handles every message.
//
// Steps: registration (every node, then the topology to each), declarations (each worker
// declares the job's tensors; the replies to workers and servers), heartbeats (intervals of
// both directions), a barrier of the workers, a strategy switch (prepare to every worker,
// their replies, the commit to all), a server lost (silent past heartbeat_timeout_ms) and
// replaced (a new server registers for its rank: its topology, the declarations, and
// ServerReplaced to the workers), the scheduler restarted (a new ControlRouter takes the job
// over: every node registers again, rejoining, and sends the report of its RejoinRecord, which
// saw everything it sent and was sent).
//
// bench/scale/control_plane_bench.cc prints the table; test/unit/scheduler runs it at 256
// nodes and checks each step completes with work linear in the nodes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace bytecomp::scale {

struct ControlSimOptions {
  int workers = 1024;
  int servers = 64;
  int tensors = 16;                  // declared by every worker
  int heartbeat_intervals = 5;       // of the heartbeat step
  std::string scratch_dir = "/tmp";  // for the strategy file the switch reloads
};

struct ControlStep {
  std::string name;
  int64_t messages_in = 0;        // node -> scheduler
  int64_t messages_out = 0;       // scheduler -> nodes
  int64_t bytes_out = 0;          // serialized
  double scheduler_cpu_ms = 0;    // the scheduler's thread, over the step's calls
  int64_t waited_ms = 0;          // virtual time the protocol waits by configuration (timeouts)
  int64_t rss_growth_kb = 0;      // the process's resident memory after the step minus before
  int64_t largest_out_bytes = 0;  // the largest message the scheduler sent (serialized)
  int64_t largest_in_bytes = 0;   // the largest message a node sent
  int64_t most_to_one_node = 0;   // the most messages one node was sent in the step
  std::string outcome;            // what completed ("topology to 1088 nodes")
};

// Runs the steps in order; an error names the step that did not complete and why.
absl::StatusOr<std::vector<ControlStep>> RunControlPlaneSim(const ControlSimOptions& options);

}  // namespace bytecomp::scale
