// The measured forward time (ModelProfile.forward_us) on a fake clock: from the last completion
// of round r-1 to the first push_pull of round r, median over the profiled rounds 1..N; and
// the gradients' block density in the profile.
#include <gtest/gtest.h>

#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <map>
#include <thread>
#include <vector>

#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "forward_timer.h"
#include "ready_profiler.h"

namespace bytecomp::worker {
namespace {

TEST(ForwardTimerTest, GapFromLastCompletionToNextFirstCall) {
  ForwardTimer t(3);
  // Round 0: calls at 0 and 10, completions at 50 and 80 (the later one ends the round).
  t.Started(0, 0);
  t.Started(0, 10);
  t.Done(0, 80);
  t.Done(0, 50);
  // Round 1 starts at 1080 (gap 1000): calls in any order, the earliest counts.
  t.Started(1, 1090);
  t.Started(1, 1080);
  t.Done(1, 1200);
  // Round 2: gap 3000; round 3: gap 500; round 4 is beyond the profile.
  t.Started(2, 4200);
  t.Done(2, 4300);
  t.Started(3, 4800);
  t.Done(3, 4900);
  t.Started(4, 4900 + 99999);
  EXPECT_DOUBLE_EQ(t.MedianUs(), 1000);  // median of 1000, 3000, 500
  // Rounds 1..3 themselves: 1200-1080, 4300-4200, 4900-4800 (round 0 is not profiled).
  EXPECT_DOUBLE_EQ(t.RoundMedianUs(), 100);
  t.Done(3, 5400);  // a later completion of round 3 ends it: 600
  EXPECT_DOUBLE_EQ(t.RoundMedianUs(), 120);
}

// Cross-barrier: step() returns at once and the next forward waits in the engine for each
// layer's pull as it reaches the layer, so round 0's last completion (at 9000) comes after
// round 1's forward began. The forward is the time from round 0's last push_pull call to
// round 1's first, less the training thread's waits in the engine.
TEST(ForwardTimerTest, TheTrainingThreadsWaitsInTheEngineAreLeftOutOfTheForward) {
  ForwardTimer cross(1);
  cross.Started(0, 0);
  cross.Started(0, 1000);    // the backward's last gradient
  cross.Waited(3000, 4400);  // two layers' pulls
  cross.Waited(4500, 5000);
  cross.Waited(7900, 8100);    // only its part before round 1 began counts
  cross.Waited(20000, 21000);  // after round 1 began: not the forward's
  cross.Done(0, 9000);
  cross.Started(1, 8000);
  EXPECT_DOUBLE_EQ(cross.MedianUs(), 7000 - 1400 - 500 - 100);
  // An optimizer that waits for every pull in step(): the waits come first; the same rule.
  ForwardTimer step(1);
  step.Started(0, 1000);
  step.Waited(1000, 4000);
  step.Done(0, 4000);
  step.Started(1, 9000);
  EXPECT_DOUBLE_EQ(step.MedianUs(), 5000);
  // No wait in the engine (a comm hook's futures): from the last completion, as before.
  ForwardTimer hook(1);
  hook.Started(0, 1000);
  hook.Done(0, 4000);
  hook.Started(1, 9000);
  EXPECT_DOUBLE_EQ(hook.MedianUs(), 5000);
  EXPECT_DOUBLE_EQ(hook.CpuMedianUs(), -1);  // the training thread not sampled
  // The training thread's own CPU in the same interval: from the last push_pull call less
  // nothing (blocked in the engine it runs no CPU), or from the last completion.
  auto on = [](double cpu_us) {
    CpuSample s;
    s.tid = 7;
    s.thread_cpu_us = cpu_us;
    s.thread_wait_us = 0;
    return s;
  };
  ForwardTimer ran(2);
  ran.Started(0, 1000, on(100));
  ran.Waited(1000, 4000);
  ran.Done(0, 4000, on(100));
  ran.Started(1, 9000, on(4100));  // waited in the engine: from round 0's last call
  ran.Done(1, 10000, on(4100));
  ran.Started(2, 13000, on(6100));  // from round 1's last completion
  ran.Done(2, 14000, on(6100));
  EXPECT_DOUBLE_EQ(ran.MedianUs(), 5000);
  EXPECT_DOUBLE_EQ(ran.CpuMedianUs(), 4000);  // 4000 and 2000: the upper median
}

TEST(ForwardTimerTest, OverlappingRoundsCountZeroAndMissingEndsAreSkipped) {
  ForwardTimer t(3);
  t.Done(0, 500);
  t.Started(1, 400);  // called before round 0's last completion: no forward time
  t.Started(2, 900);  // round 1 never completed: no gap for round 2
  EXPECT_DOUBLE_EQ(t.MedianUs(), 0);
  t.Done(1, 700);
  EXPECT_DOUBLE_EQ(t.MedianUs(), 200);  // gaps 0 and 200: the upper median
  EXPECT_DOUBLE_EQ(ForwardTimer(3).MedianUs(), 0);
}

TEST(ForwardTimerTest, CpuUseOfEachRoundFromItsFirstCallToItsLastCompletion) {
  ForwardTimer t(2);
  auto cpu = [](double process_us, uint64_t busy, uint64_t total) {
    return CpuSample{process_us, busy, total};
  };
  EXPECT_DOUBLE_EQ(t.RoundCpuMedianUs(), 0);  // nothing sampled
  t.Started(1, 1000, cpu(5000, 100, 1000));
  t.Done(1, 1500, cpu(5300, 150, 1100));
  t.Done(1, 2000, cpu(5900, 190, 1200));  // the round's last completion
  t.Started(2, 3000, cpu(7000, 300, 1400));
  t.Done(2, 4000, cpu(8100, 340, 1600));
  // Process CPU: 900 and 1100 us (the upper median); host: 90 of 200 ticks and 40 of 200.
  EXPECT_DOUBLE_EQ(t.RoundCpuMedianUs(), 1100);
  EXPECT_DOUBLE_EQ(t.HostBusyMedian(), 0.45);
  // Unsampled rounds (no counters) are left out.
  ForwardTimer bare(1);
  bare.Started(1, 0);
  bare.Done(1, 10);
  EXPECT_DOUBLE_EQ(bare.RoundCpuMedianUs(), 0);
  EXPECT_DOUBLE_EQ(bare.HostBusyMedian(), 0);
}

TEST(ForwardTimerTest, SamplesThisProcessAndTheHost) {
  const CpuSample before = SampleCpu();
  volatile double sink = 0;
  for (int i = 0; i < 20'000'000; ++i) sink = sink + i * 1e-9;  // some CPU time
  const CpuSample after = SampleCpu();
  EXPECT_GT(after.process_us, before.process_us);
  EXPECT_GT(after.host_total_ticks, 0u);
  EXPECT_GE(after.host_total_ticks, before.host_total_ticks);
  EXPECT_LE(after.host_busy_ticks, after.host_total_ticks);
  EXPECT_GE(CpuCores(), 1);
}

TEST(ForwardTimerTest, WaitForACpuOfEachRound) {
  ForwardTimer t(2);
  auto waited = [](double wait_us) {
    CpuSample s;
    s.process_wait_us = wait_us;
    return s;
  };
  t.Started(1, 1000, waited(100));
  t.Done(1, 2000, waited(400));
  t.Started(2, 3000, waited(500));
  t.Done(2, 4000, waited(1500));
  EXPECT_DOUBLE_EQ(t.RoundWaitMedianUs(), 1000);  // 300 and 1000: the upper median
  // Not sampled (a kernel without schedstat): unknown, not zero.
  ForwardTimer bare(1);
  bare.Started(1, 0);
  bare.Done(1, 10);
  EXPECT_DOUBLE_EQ(bare.RoundWaitMedianUs(), -1);
}

double ThreadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

// Two threads of this process on one CPU: while one runs the other waits, and the process's
// wait sum says so. A program beside the process would not count (its wait is its own).
TEST(ForwardTimerTest, ThreadsSharingOneCpuWaitForIt) {
  const double before = ProcessWaitUs();
  if (before < 0) GTEST_SKIP() << "this kernel does not report schedstat";
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu(), &one);
  // The sum covers live threads only: the spinners stay until it has been read.
  absl::Notification read;
  absl::BlockingCounter spun(2);
  auto spin = [&] {
    ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof one, &one), 0);
    volatile double sink = 0;
    const double start = ThreadCpuMs();
    while (ThreadCpuMs() - start < 100) sink = sink + 1;  // 100 ms of CPU each
    spun.DecrementCount();
    read.WaitForNotification();
  };
  std::thread a(spin), b(spin);
  spun.Wait();
  // 200 ms of CPU through one CPU: each thread waited while the other ran, about 100 ms in all
  // (schedulers hand out slices of a few ms; a loaded host only adds wait).
  const double waited = ProcessWaitUs() - before;
  read.Notify();
  a.join();
  b.join();
  EXPECT_GT(waited, 40'000);
  EXPECT_GE(SampleCpu().process_wait_us, 0);
}

TEST(ReadyProfilerTest, ProfileCarriesTheMedianForwardTime) {
  ReadyProfiler p(3);
  const int forward[] = {0, 5000, 7000, 6000, 1};  // before rounds 1..3 (and 4, not profiled)
  int64_t now = 0;
  std::optional<proto::ModelProfile> profile;
  for (int round = 0; round <= 4 && !profile.has_value(); ++round) {
    now += forward[round];
    profile = p.Record("fc", 100, 4, now);  // the output layer's gradient first
    if (profile.has_value()) break;
    now += 300;
    profile = p.Record("conv", 1000, 4, now);
    now += 2000;  // the pulls take 2 ms; conv completes last
    p.RecordDone(round, now - 100);
    p.RecordDone(round, now);
  }
  ASSERT_TRUE(profile.has_value());
  EXPECT_DOUBLE_EQ(profile->forward_us(), 6000);
  ASSERT_EQ(profile->tensors_size(), 2);
  EXPECT_EQ(profile->tensors(0).name(), "fc");
  EXPECT_EQ(profile->tensors(1).name(), "conv");
  EXPECT_DOUBLE_EQ(profile->tensors(1).ready_gap_us(), 300);
  EXPECT_NE(profile->source().find("forward_us: median time from a round's last completion"),
            std::string::npos);
}

// What fusion must know: the training thread waited for a push_pull between two tensors'
// calls of a round ("sync" waits on "barrier" before pushing "w1"), and a tensor pushed in
// rounds 0 and 1 only ("once": its second call is its only one in the profiled rounds).
TEST(ReadyProfilerTest, WaitsBetweenCallsAndTensorsOfSomeRoundsAreMarked) {
  ReadyProfiler p(3);
  int64_t now = 0;
  std::optional<proto::ModelProfile> profile;
  for (int round = 0; round <= 4 && !profile.has_value(); ++round) {
    now += 1000;
    profile = p.Record("barrier", 1, 4, now);
    if (profile.has_value()) break;
    p.RecordWait(now + 10, now + 200);
    now += 300;
    p.Record("w1", 100, 4, now);
    now += 50;
    p.Record("w2", 100, 4, now);
    if (round <= 1) p.Record("once", 100, 4, now + 10);  // its calls 0 and 1
    now += 1000;
  }
  ASSERT_TRUE(profile.has_value());
  std::map<std::string, proto::TensorProfile> by_name;
  for (const auto& t : profile->tensors()) by_name[t.name()] = t;
  ASSERT_EQ(by_name.size(), 4u);
  EXPECT_TRUE(by_name["w1"].after_wait());
  EXPECT_FALSE(by_name["w2"].after_wait());
  EXPECT_FALSE(by_name["barrier"].after_wait());
  EXPECT_TRUE(by_name["once"].some_rounds_only());
  EXPECT_FALSE(by_name["w2"].some_rounds_only());
}

TEST(ForwardTimerTest, ContentionIsTheWaitNotMadeUpBySleeping) {
  EXPECT_DOUBLE_EQ(ContendedUs(1000, 600, 400), 400);  // never off the CPU: all of the wait
  EXPECT_DOUBLE_EQ(ContendedUs(1000, 100, 300), 0);    // 600 us asleep absorbed it
  EXPECT_DOUBLE_EQ(ContendedUs(1000, 500, 400), 300);  // 100 us asleep absorbed a part
  EXPECT_DOUBLE_EQ(ContendedUs(0, 0, 0), 0);
}

// The training thread (tid 7) waits for a CPU while the communication keeps the cores busy:
// what the wait added is contention, not the model's compute, and is left out of the gaps and
// the forward time; a wait that the thread made up by sleeping less added nothing.
TEST(ReadyProfilerTest, WhatTheTrainingThreadsWaitAddedIsLeftOutOfGapsAndForward) {
  auto on = [](int64_t tid, double cpu_us, double wait_us) {
    CpuSample s;
    s.tid = tid;
    s.thread_cpu_us = cpu_us;
    s.thread_wait_us = wait_us;
    return s;
  };
  ReadyProfiler p(3);
  int64_t now = 0;
  double cpu = 0, wait = 0;
  std::optional<proto::ModelProfile> profile;
  for (int round = 0; round <= 4 && !profile.has_value(); ++round) {
    now += 5000;  // the forward pass on the CPU: 4000 us running, 1000 waiting
    cpu += 4000;
    wait += 1000;
    profile = p.Record("fc", 100, 4, now, -1, on(7, cpu, wait));
    EXPECT_EQ(p.caller_tid(), 7);
    if (profile.has_value()) break;
    now += 700;  // 300 us running, 400 waiting, never asleep
    cpu += 300;
    wait += 400;
    profile = p.Record("conv", 1000, 4, now, -1, on(7, cpu, wait));
    now += 1000;  // 100 us running, 300 waiting, 600 asleep: the sleep made up the wait
    cpu += 100;
    wait += 300;
    profile = p.Record("bias", 10, 4, now, -1, on(7, cpu, wait));
    // A thread of its own (another autograd device thread): its wait is not the caller's.
    now += 500;
    profile = p.Record("emb", 1000, 4, now, -1, on(8, 99999, 99999));
    now += 2000;
    p.RecordDone(round, now, on(7, cpu, wait));
  }
  ASSERT_TRUE(profile.has_value());
  ASSERT_EQ(profile->tensors_size(), 4);
  EXPECT_EQ(profile->tensors(1).name(), "conv");
  EXPECT_DOUBLE_EQ(profile->tensors(1).ready_gap_us(), 300);  // 700 less 400
  EXPECT_EQ(profile->tensors(2).name(), "bias");
  EXPECT_DOUBLE_EQ(profile->tensors(2).ready_gap_us(), 1000);
  EXPECT_EQ(profile->tensors(3).name(), "emb");
  EXPECT_DOUBLE_EQ(profile->tensors(3).ready_gap_us(), 500);
  EXPECT_DOUBLE_EQ(profile->forward_us(), 4000);  // 5000 less 1000
  // The forward ran 4000 us on the CPU: on one host the planner charges it to the shared cores.
  EXPECT_DOUBLE_EQ(profile->measured_forward_cpu_us(), 4000);
  // The round's first call to its last (emb's, another thread): not one thread's, so unknown.
  EXPECT_FALSE(profile->has_measured_training_wait_us());
  EXPECT_EQ(profile->measured_training_cpu_us(), 0);
}

TEST(ReadyProfilerTest, TheTrainingThreadsWaitAndCpuOfEachRound) {
  ReadyProfiler p(2);
  std::optional<proto::ModelProfile> profile;
  for (int round = 0; round <= 3 && !profile.has_value(); ++round) {
    CpuSample s;
    s.tid = 7;
    s.thread_cpu_us = 10000 * round;
    s.thread_wait_us = 1000 * round;
    profile = p.Record("fc", 10, 4, 10000 * round, -1, s);
    if (profile.has_value()) break;
    s.thread_cpu_us += 1400 + round;  // 1401 and 1402 us of CPU in rounds 1 and 2
    s.thread_wait_us += 600;
    profile = p.Record("conv", 10, 4, 10000 * round + 2000, -1, s);
  }
  ASSERT_TRUE(profile.has_value());
  EXPECT_DOUBLE_EQ(profile->tensors(1).ready_gap_us(), 1400);  // never asleep: 2000 less 600
  EXPECT_DOUBLE_EQ(profile->measured_training_wait_us(), 600);
  EXPECT_DOUBLE_EQ(profile->measured_training_cpu_us(), 1402);  // the upper median
  // Without the thread's counters the profile is as before: raw gaps, nothing claimed.
  ReadyProfiler bare(1);
  std::optional<proto::ModelProfile> raw;
  for (int round = 0; round <= 2 && !raw.has_value(); ++round) {
    raw = bare.Record("fc", 10, 4, 10000 * round);
    if (!raw.has_value()) raw = bare.Record("conv", 10, 4, 10000 * round + 2000);
  }
  ASSERT_TRUE(raw.has_value());
  EXPECT_DOUBLE_EQ(raw->tensors(1).ready_gap_us(), 2000);
  EXPECT_FALSE(raw->has_measured_training_wait_us());
  EXPECT_FALSE(raw->has_measured_forward_cpu_us());
  EXPECT_EQ(raw->measured_training_cpu_us(), 0);
}

TEST(ForwardTimerTest, SamplesTheCallingThreadOrAnother) {
  const CpuSample mine = SampleCpu();
  EXPECT_EQ(mine.tid, ThisThreadId());
  if (mine.thread_wait_us < 0) GTEST_SKIP() << "this kernel does not report schedstat";
  volatile double sink = 0;
  const double start = ThreadCpuMs();
  while (ThreadCpuMs() - start < 20) sink = sink + 1;  // 20 ms of this thread's CPU
  // Read from another thread, as the engine's completions read the training thread's.
  CpuSample later;
  std::thread([&] { later = SampleCpu(mine.tid); }).join();
  EXPECT_EQ(later.tid, mine.tid);
  EXPECT_GE(later.thread_cpu_us - mine.thread_cpu_us, 15'000);
  EXPECT_GE(later.thread_wait_us, mine.thread_wait_us);
  double cpu = 0, wait = 0;
  EXPECT_FALSE(ThreadSchedUs(-1, &cpu, &wait));
}

TEST(ReadyProfilerTest, BlockDensityIsMeasuredOnceInTheFirstProfiledRound) {
  std::vector<float> x(1000, 0.0f);  // 4 blocks of 256 (the last holds 232)
  EXPECT_DOUBLE_EQ(BlockDensity(x.data(), x.size()), 0);
  x[300] = -1e-30f;
  x[999] = 2;
  EXPECT_DOUBLE_EQ(BlockDensity(x.data(), x.size()), 0.5);
  EXPECT_DOUBLE_EQ(BlockDensity(x.data(), 0), 0);
  ReadyProfiler p(2);
  std::optional<proto::ModelProfile> profile;
  for (int round = 0; round <= 3 && !profile.has_value(); ++round) {
    EXPECT_EQ(p.WantsBlockDensity("emb"), round == 1) << round;
    profile = p.Record("emb", 1000, 4, 1000 * round, round == 1 ? 0.25 : -1);
    if (!profile.has_value()) profile = p.Record("fc", 10, 4, 1000 * round + 10);
  }
  ASSERT_TRUE(profile.has_value());
  ASSERT_EQ(profile->tensors_size(), 2);
  EXPECT_TRUE(profile->tensors(0).has_block_density());
  EXPECT_DOUBLE_EQ(profile->tensors(0).block_density(), 0.25);
  EXPECT_FALSE(profile->tensors(1).has_block_density());
}

}  // namespace
}  // namespace bytecomp::worker
