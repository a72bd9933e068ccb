#include <sched.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "bytecomp/cpu_offload.h"
#include "gtest/gtest.h"

namespace bytecomp::cpu_offload {
namespace {

ThreadPoolOptions Threads(size_t n) {
  ThreadPoolOptions options;
  options.num_threads = n;
  return options;
}

// Blocks the pool's only thread until released, so that tasks queue up behind it.
class Gate {
 public:
  PoolTask Task() {
    return [this](absl::Status) {
      entered_.set_value();
      open_.get_future().wait();
    };
  }
  void WaitEntered() { entered_.get_future().wait(); }
  void Open() { open_.set_value(); }

 private:
  std::promise<void> entered_;
  std::promise<void> open_;
};

TEST(PriorityThreadPool, HigherPriorityFirstFifoAmongEquals) {
  PriorityThreadPool pool(Threads(1));
  Gate gate;
  ASSERT_TRUE(pool.Submit(1000, gate.Task()).ok());
  gate.WaitEntered();

  std::mt19937 rng(7);
  std::vector<std::pair<int, int>> submitted;  // (priority, submission index)
  std::vector<std::pair<int, int>> ran;
  absl::Mutex ran_mutex;
  for (int i = 0; i < 500; ++i) {
    const int priority = static_cast<int>(rng() % 7) - 3;
    submitted.emplace_back(priority, i);
    ASSERT_TRUE(pool.Submit(priority,
                            [&, priority, i](absl::Status status) {
                              ASSERT_TRUE(status.ok());
                              absl::MutexLock lock(&ran_mutex);
                              ran.emplace_back(priority, i);
                            })
                    .ok());
  }
  EXPECT_EQ(pool.queued(), 500u);
  gate.Open();
  pool.Shutdown(ShutdownMode::kDrain);

  std::vector<std::pair<int, int>> expected = submitted;
  std::stable_sort(expected.begin(), expected.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  EXPECT_EQ(ran, expected);
}

TEST(PriorityThreadPool, HundredThousandTasksNoneLost) {
  constexpr int kSubmitters = 4;
  constexpr int kPerSubmitter = 25000;
  std::atomic<int64_t> sum{0};
  std::atomic<int> count{0};
  PriorityThreadPool pool(Threads(3));
  std::vector<std::thread> submitters;
  for (int t = 0; t < kSubmitters; ++t) {
    submitters.emplace_back([&, t] {
      for (int i = 0; i < kPerSubmitter; ++i) {
        const int value = t * kPerSubmitter + i;
        pool.Submit(i % 5,
                    [&, value](absl::Status status) {
                      if (status.ok()) {
                        sum.fetch_add(value, std::memory_order_relaxed);
                        count.fetch_add(1, std::memory_order_relaxed);
                      }
                    })
            .IgnoreError();
      }
    });
  }
  for (std::thread& t : submitters) t.join();
  pool.Shutdown(ShutdownMode::kDrain);
  constexpr int64_t kTotal = int64_t{kSubmitters} * kPerSubmitter;
  EXPECT_EQ(count.load(), kTotal);
  EXPECT_EQ(sum.load(), kTotal * (kTotal - 1) / 2);
  EXPECT_EQ(pool.tasks_run(), static_cast<uint64_t>(kTotal));
  EXPECT_EQ(pool.tasks_cancelled(), 0u);
}

TEST(PriorityThreadPool, CancelShutdownDeliversCancelledToEveryQueuedTask) {
  PriorityThreadPool pool(Threads(1));
  Gate gate;
  ASSERT_TRUE(pool.Submit(0, gate.Task()).ok());
  gate.WaitEntered();
  std::atomic<int> ran{0};
  std::atomic<int> cancelled{0};
  std::vector<std::future<absl::Status>> futures;
  for (int i = 0; i < 1000; ++i) {
    pool.Submit(i % 3,
                [&](absl::Status status) {
                  (status.ok() ? ran : cancelled).fetch_add(1);
                  if (!status.ok()) {
                    EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
                  }
                })
        .IgnoreError();
    futures.push_back(pool.SubmitWithFuture(1, [] { return absl::OkStatus(); }));
  }
  // Shutdown cancels the queue first, then joins the thread blocked in the gate.
  std::thread shutdown([&] { pool.Shutdown(ShutdownMode::kCancelQueued); });
  while (pool.tasks_cancelled() < 2000) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  gate.Open();
  shutdown.join();
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(cancelled.load(), 1000);
  for (auto& f : futures) {
    const absl::Status status = f.get();
    EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
    EXPECT_NE(status.message().find("shut down"), absl::string_view::npos);
  }
  EXPECT_EQ(pool.queued(), 0u);
  EXPECT_EQ(pool.tasks_run(), 1u);  // the gate only
}

TEST(PriorityThreadPool, DrainShutdownRunsQueuedAndChainedTasks) {
  PriorityThreadPool pool(Threads(2));
  std::atomic<int> ran{0};
  for (int i = 0; i < 100; ++i) {
    pool.Submit(0,
                [&](absl::Status status) {
                  ASSERT_TRUE(status.ok());
                  std::this_thread::sleep_for(std::chrono::microseconds(50));
                  ran.fetch_add(1);
                  // Work chained from a running task still runs during a drain.
                  pool.Submit(5,
                              [&](absl::Status chained) {
                                if (chained.ok()) ran.fetch_add(1);
                              })
                      .IgnoreError();
                })
        .IgnoreError();
  }
  pool.Shutdown(ShutdownMode::kDrain);
  EXPECT_EQ(ran.load(), 200);
  EXPECT_EQ(pool.tasks_cancelled(), 0u);
}

TEST(PriorityThreadPool, SubmitAfterShutdownIsRefusedAndCancelled) {
  PriorityThreadPool pool(Threads(1));
  pool.Shutdown();
  absl::Status seen = absl::OkStatus();
  const absl::Status submit = pool.Submit(0, [&](absl::Status status) { seen = status; });
  EXPECT_EQ(submit.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(seen.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(pool.SubmitWithFuture(0, [] { return absl::OkStatus(); }).get().code(),
            absl::StatusCode::kCancelled);
  pool.Shutdown();  // idempotent
}

TEST(PriorityThreadPool, FutureCarriesTheTaskStatus) {
  PriorityThreadPool pool(Threads(2));
  auto ok = pool.SubmitWithFuture(0, [] { return absl::OkStatus(); });
  auto bad = pool.SubmitWithFuture(0, [] { return absl::DataLossError("bad chunk"); });
  EXPECT_TRUE(ok.get().ok());
  EXPECT_EQ(bad.get().message(), "bad chunk");
}

TEST(PriorityThreadPool, PinnedThreadsRunOnTheirCpu) {
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  int cpu = -1;
  for (int c = CPU_SETSIZE - 1; c >= 0; --c) {
    if (CPU_ISSET(c, &allowed)) cpu = c;  // lowest allowed CPU
  }
  ASSERT_GE(cpu, 0);
  ThreadPoolOptions options = Threads(2);
  options.pin_cpus = {cpu};
  PriorityThreadPool pool(options);
  std::vector<std::future<absl::Status>> futures;
  std::atomic<int> elsewhere{0};
  for (int i = 0; i < 50; ++i) {
    futures.push_back(pool.SubmitWithFuture(0, [&] {
      if (sched_getcpu() != cpu) elsewhere.fetch_add(1);
      return absl::OkStatus();
    }));
  }
  for (auto& f : futures) ASSERT_TRUE(f.get().ok());
  EXPECT_EQ(elsewhere.load(), 0);
}

}  // namespace
}  // namespace bytecomp::cpu_offload
