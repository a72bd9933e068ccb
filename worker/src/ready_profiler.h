// Times when each gradient becomes ready (its push_pull call) during rounds 1..N, and turns
// them into the ModelProfile the planner takes: tensors in ready order with the median gap
// between consecutive ones. Round 0 is left out: it declares tensors and warms caches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "forward_timer.h"
#include "planner.pb.h"

namespace bytecomp::worker {

// The fraction of x's 256-element blocks holding a non-zero (the planner's block_density).
double BlockDensity(const float* x, size_t n);

class ReadyProfiler {
 public:
  explicit ReadyProfiler(int rounds) : rounds_(rounds), forward_(rounds) {}

  // Whether the next push_pull of `name` is the one to measure the block density of (round 1,
  // the first profiled: one pass over the gradient, once).
  bool WantsBlockDensity(const std::string& name) const;
  // A push_pull of `name` was called at time_us; block_density: the fraction of its
  // 256-element blocks holding a non-zero (BlockDensity), or -1 when not measured. Returns the
  // profile once, when the first tensor starts round rounds + 1 (every tensor has had its
  // rounds 1..N by then). A tensor's measured density goes into the profile.
  // `cpu`: the CPU counters at the call (SampleCpu, on the calling thread), for the profile's
  // CPU fields. A gap between two calls of one round on the same thread leaves out what that
  // thread's wait for a CPU added between them (ContendedUs; ModelProfile.
  // measured_training_wait_us). `on_device`: a GPU tensor's gradient (the profile says so: the
  // planner fuses host tensors only).
  std::optional<proto::ModelProfile> Record(const std::string& name, int64_t elements,
                                            int element_bytes, int64_t time_us,
                                            double block_density = -1, const CpuSample& cpu = {},
                                            bool on_device = false);

  // A push_pull of `round` (its tensor's call count, from 0) completed at time_us: the last
  // completion of a round ends it, for the profile's forward_us (forward_timer.h).
  void RecordDone(int64_t round, int64_t time_us, const CpuSample& cpu = {}) {
    forward_.Done(round, time_us, cpu);
  }
  // The training thread waited in the engine for a push_pull from start_us to end_us (the
  // forward time leaves such waits out: forward_timer.h).
  void RecordWait(int64_t start_us, int64_t end_us) {
    if (done_) return;
    forward_.Waited(start_us, end_us);
    if (waits_.size() < ForwardTimer::kMaxWaits && end_us > start_us) {
      waits_.emplace_back(start_us, end_us);
    }
  }
  // Whether a completion of `round` still matters (the engine samples the CPU only then).
  bool Wants(int64_t round) const { return !done_ && round <= rounds_; }

  bool done() const { return done_; }
  // The thread of the latest push_pull call: the training thread, whose wait the completions
  // sample (RecordDone's `cpu`, SampleCpu(caller_tid())).
  int64_t caller_tid() const { return caller_tid_; }

 private:
  // A push_pull call: when, and the calling thread's CPU and wait for a CPU so far (-1:
  // unknown).
  struct Call {
    int64_t time_us = 0;
    int64_t tid = 0;
    double cpu_us = -1;
    double wait_us = -1;
  };
  struct Tensor {
    int64_t elements = 0;
    int element_bytes = 4;
    int64_t calls = 0;
    std::vector<Call> calls_in_rounds;  // by round - 1
    double block_density = -1;          // measured in round 1; -1: not measured
    bool on_device = false;
  };
  proto::ModelProfile Build() const;

  int rounds_;
  ForwardTimer forward_;
  bool done_ = false;
  int64_t caller_tid_ = 0;
  std::map<std::string, Tensor> tensors_;
  // The training thread's waits in the engine (start, end), in time order: a tensor called
  // after one that came after the previous tensor's call is after_wait.
  std::vector<std::pair<int64_t, int64_t>> waits_;
};

}  // namespace bytecomp::worker
