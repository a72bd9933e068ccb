// A priority thread pool for encode/decode work. Higher priority runs first, FIFO among
// equals (partitions nearer the input layer are needed first in the next forward pass).
// Every submitted task is invoked exactly once: with OK when it runs, or with a Cancelled
// status when the pool shuts down before it started, so no task is ever lost silently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <future>
#include <mutex>  // std::once_flag
#include <queue>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace bytecomp::cpu_offload {

struct ThreadPoolOptions {
  size_t num_threads = 1;
  // Thread i is pinned to cpus[i % cpus.size()]; empty means no pinning. A failed pin is a
  // warning, not an error (containers often forbid it).
  std::vector<int> pin_cpus;
  std::string name = "offload";  // thread name prefix (pthread_setname_np), for profilers
};

enum class ShutdownMode {
  kDrain,         // run every queued task, then stop
  kCancelQueued,  // invoke every queued task with a Cancelled status, then stop
};

// status is OK when the task should do its work, Cancelled when the pool stopped first.
using PoolTask = absl::AnyInvocable<void(absl::Status status)>;

class PriorityThreadPool {
 public:
  explicit PriorityThreadPool(ThreadPoolOptions options);
  // Shutdown(kDrain) if not yet shut down.
  ~PriorityThreadPool();
  PriorityThreadPool(const PriorityThreadPool&) = delete;
  PriorityThreadPool& operator=(const PriorityThreadPool&) = delete;

  // Queues task. While a kDrain shutdown is still running tasks, new tasks are accepted (so
  // work chained from a running task completes). Otherwise, after shutdown began, the task is
  // invoked at once on the caller's thread with a Cancelled status and FailedPrecondition is
  // returned.
  absl::Status Submit(int priority, PoolTask task) ABSL_LOCKS_EXCLUDED(mutex_);

  // Runs fn (returning absl::Status) on the pool; the future holds fn's status, or
  // Cancelled if the pool stopped before fn ran.
  template <typename Fn>
  std::future<absl::Status> SubmitWithFuture(int priority, Fn fn) {
    static_assert(std::is_convertible_v<std::invoke_result_t<Fn&>, absl::Status>,
                  "fn must return absl::Status");
    std::promise<absl::Status> promise;
    std::future<absl::Status> future = promise.get_future();
    Submit(priority, [fn = std::move(fn),
                      promise = std::move(promise)](absl::Status status) mutable {
      if (status.ok()) {
        promise.set_value(fn());
      } else {
        promise.set_value(std::move(status));
      }
    }).IgnoreError();  // a refused task already delivered Cancelled to the promise
    return future;
  }

  // Stops accepting tasks, deals with the queue as mode says, and joins the threads. Tasks
  // already running finish. Idempotent; later calls only wait for the first to finish.
  void Shutdown(ShutdownMode mode = ShutdownMode::kDrain) ABSL_LOCKS_EXCLUDED(mutex_);

  size_t num_threads() const { return threads_.size(); }
  size_t queued() const ABSL_LOCKS_EXCLUDED(mutex_);
  uint64_t tasks_run() const ABSL_LOCKS_EXCLUDED(mutex_);
  uint64_t tasks_cancelled() const ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  struct Entry {
    int priority;
    uint64_t sequence;  // FIFO among equal priorities
    mutable PoolTask task;
  };
  struct Later {
    bool operator()(const Entry& a, const Entry& b) const {
      if (a.priority != b.priority) return a.priority < b.priority;
      return a.sequence > b.sequence;
    }
  };

  void WorkerLoop(size_t index) ABSL_LOCKS_EXCLUDED(mutex_);

  const ThreadPoolOptions options_;
  mutable absl::Mutex mutex_;
  absl::CondVar work_available_;  // signalled on a new task and at shutdown
  std::priority_queue<Entry, std::vector<Entry>, Later> queue_ ABSL_GUARDED_BY(mutex_);
  uint64_t next_sequence_ ABSL_GUARDED_BY(mutex_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  bool drain_ ABSL_GUARDED_BY(mutex_) = true;
  // Workers not yet exited; a drain accepts tasks while > 0.
  size_t live_workers_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t tasks_run_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t tasks_cancelled_ ABSL_GUARDED_BY(mutex_) = 0;
  std::once_flag shutdown_once_;
  // Written by the constructor and by the one Shutdown call only.
  std::vector<std::thread> threads_;
};

}  // namespace bytecomp::cpu_offload
