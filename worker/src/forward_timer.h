// Measures ModelProfile.forward_us, the time the planner adds to each iteration before the
// backward pass (scheduler/planner/src/timeline.cc: iteration = forward_us + the time from the
// first gradient becoming ready to the last pull done). So it is measured as the time from the
// end of round r-1 (the last of its push_pulls completed in the engine) to the start of round
// r's backward pass (its first push_pull call), median over rounds 1..N. It holds whatever the
// training loop does in between: the optimizer step, the forward pass, the backward pass up to
// the first gradient. A round that starts before the previous one ended counts as 0. Where
// the training thread waited in the engine for pulls in between (an optimizer step that waits
// for them, or cross-barrier: the next forward waits for each layer's, and the round's last
// completion comes during that forward), the interval is from round r-1's last push_pull call
// instead, less those waits. What the training thread's (the push_pull caller's) wait for a CPU
// added to the interval (ContendedUs) is left out: on a host whose cores the job's
// communication keeps busy, that is contention, which the planner's CPU model charges on its
// own, not the model's compute.
//
// It also keeps what the CPUs did during each round (its first push_pull call to its last
// completion), so that the scheduler's link fit can tell rounds slowed by the CPU from rounds
// slowed by the network (ModelProfile.measured_round_cpu_us, measured_round_wait_us,
// host_cpu_busy, cpu_cores): what counts is the CPU this process got and how long its
// threads waited for one, not how busy other programs keep the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace bytecomp::worker {

// The CPU counters at one moment (Linux; zeros elsewhere).
struct CpuSample {
  double process_us = 0;          // this process's CPU time, every thread
  uint64_t host_busy_ticks = 0;   // /proc/stat: every CPU's time not idle (nor waiting on I/O)
  uint64_t host_total_ticks = 0;  // /proc/stat: every CPU's time
  // The time this process's threads were runnable but waiting for a CPU, summed over its live
  // threads (/proc/self/task/*/schedstat: a thread that has ended no longer counts; the
  // engine's threads live as long as it does); -1 where the kernel does not say.
  double process_wait_us = -1;
  // One thread's time on a CPU and runnable but waiting for one (/proc/self/task/<tid>/
  // schedstat): the training thread's, which calls push_pull; -1 where not read.
  int64_t tid = 0;
  double thread_cpu_us = -1;
  double thread_wait_us = -1;
};
// The counters now. The wait sum reads a file per thread, so it is read at most once a
// millisecond (the engine samples at every push_pull of a profiled round) and otherwise the
// last value is reused. `tid`: the thread whose own wait to read (0: the calling thread).
CpuSample SampleCpu(int64_t tid = 0);
// This process's thread `tid`'s time on a CPU and waiting for one so far, in us; false where
// the kernel does not say (or the thread has ended).
bool ThreadSchedUs(int64_t tid, double* cpu_us, double* wait_us);
// The calling thread's id (gettid).
int64_t ThisThreadId();

// Of `elapsed_us` of the training thread's time, in which it ran `cpu_us` and waited `wait_us`
// for a CPU, what the wait added: the wait less the time the thread spent off the CPU and not
// waiting (asleep, blocked on the GPU or a lock). A thread that never blocks (compute on the
// CPU) lost all of its wait; one that slept had slack that absorbed waits (a thread that
// hands work to a GPU, or the benchmarks' sleeping compute, catches up by sleeping less).
double ContendedUs(double elapsed_us, double cpu_us, double wait_us);
// The wait sum alone, read now (every thread of this process); -1 where unknown.
double ProcessWaitUs();
// The CPUs this process may run on (its affinity mask); 0 when unknown.
int CpuCores();

class ForwardTimer {
 public:
  explicit ForwardTimer(int rounds) : rounds_(rounds) {}

  // A push_pull of `round` (the tensor's call count, from 0) was called at time_us.
  void Started(int64_t round, int64_t time_us, const CpuSample& cpu = {});
  // A push_pull of `round` completed at time_us.
  void Done(int64_t round, int64_t time_us, const CpuSample& cpu = {});
  // The training thread waited in the engine (Engine::Wait) from start_us to end_us for a
  // push_pull to complete. The first kMaxWaits are kept.
  void Waited(int64_t start_us, int64_t end_us);
  static constexpr size_t kMaxWaits = 1 << 16;
  // Median over rounds 1..N with both ends known, less what the training thread's wait for a
  // CPU added between them (ContendedUs, where both ends sampled that thread); 0 when there is
  // none. Where the training thread waited in the engine between round r-1's last push_pull
  // call and round r's first (an optimizer that waits for every pull in step(), or one that
  // waits for each layer's as the next forward reaches it: cross-barrier, whose pulls
  // complete during the forward, after the forward began), the forward is that interval less
  // those waits instead: the time the training loop itself took.
  double MedianUs() const;
  // Median over the same intervals of the training thread's own CPU time in them
  // (ModelProfile.measured_forward_cpu_us: on one host the planner charges every worker's to
  // the shared cores); -1 where no interval sampled that thread at both ends.
  double CpuMedianUs() const;
  // Median over rounds 1..N of the round itself: its first push_pull call to its last
  // completion (ModelProfile.measured_round_us); 0 when no round has both.
  double RoundMedianUs() const;
  // Medians over the same rounds of the process's CPU time in them, and of the fraction of
  // the host's CPU time that was busy; 0 when not sampled.
  double RoundCpuMedianUs() const;
  double HostBusyMedian() const;
  // Median over the same rounds of the process's threads' wait for a CPU; -1 when not sampled.
  double RoundWaitMedianUs() const;

  // One end of a round: when, and the CPU counters then.
  struct Mark {
    int64_t time_us;
    CpuSample cpu;
  };

 private:
  // Per round with both ends known: the forward (MedianUs's interval, less the contention) and
  // the training thread's CPU time in that interval (-1: not sampled).
  struct Forward {
    double us;
    double cpu_us;
  };
  std::vector<Forward> Forwards() const;

  int rounds_;
  std::map<int64_t, Mark> first_start_;             // round -> earliest push_pull call
  std::map<int64_t, Mark> last_start_;              // round -> latest push_pull call
  std::map<int64_t, Mark> last_done_;               // round -> latest completion
  std::vector<std::pair<int64_t, int64_t>> waits_;  // the engine waits: (start, end)
};

}  // namespace bytecomp::worker
