#include "bytecomp/cpu_offload/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/logging.h"

namespace bytecomp::cpu_offload {
namespace {

void NameAndPinThread(std::thread& thread, const ThreadPoolOptions& options, size_t index) {
  const std::string name = absl::StrCat(options.name, "-", index).substr(0, 15);  // 15 + NUL
  pthread_setname_np(thread.native_handle(), name.c_str());
  if (options.pin_cpus.empty()) return;
  const int cpu = options.pin_cpus[index % options.pin_cpus.size()];
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  const int rc = pthread_setaffinity_np(thread.native_handle(), sizeof(set), &set);
  if (rc != 0) {
    BC_LOG_WARNING("thread pool '", options.name, "': cannot pin thread ", index, " to CPU ", cpu,
                   " (error ", rc, "); it runs unpinned");
  }
}

}  // namespace

PriorityThreadPool::PriorityThreadPool(ThreadPoolOptions options) : options_(std::move(options)) {
  const size_t n = std::max<size_t>(1, options_.num_threads);
  threads_.reserve(n);
  live_workers_ = n;
  for (size_t i = 0; i < n; ++i) {
    threads_.emplace_back([this, i] { WorkerLoop(i); });
    NameAndPinThread(threads_.back(), options_, i);
  }
}

PriorityThreadPool::~PriorityThreadPool() { Shutdown(ShutdownMode::kDrain); }

absl::Status PriorityThreadPool::Submit(int priority, PoolTask task) {
  {
    absl::MutexLock lock(&mutex_);
    // A live worker always re-checks the queue before it exits, so an accepted task is run.
    if (!stopping_ || (drain_ && live_workers_ > 0)) {
      queue_.push(Entry{priority, next_sequence_++, std::move(task)});
      work_available_.Signal();
      return absl::OkStatus();
    }
    ++tasks_cancelled_;
  }
  const std::string why =
      absl::StrCat("thread pool '", options_.name, "' is shut down; task not run");
  task(absl::CancelledError(why));
  return absl::FailedPreconditionError(why);
}

void PriorityThreadPool::WorkerLoop(size_t index) {
  mutex_.Lock();
  while (true) {
    while (!stopping_ && queue_.empty()) work_available_.Wait(&mutex_);
    if (queue_.empty() || (stopping_ && !drain_)) {  // Shutdown cancels a queue itself
      --live_workers_;
      mutex_.Unlock();
      return;
    }
    PoolTask task = std::move(queue_.top().task);
    queue_.pop();
    mutex_.Unlock();
    task(absl::OkStatus());
    task = nullptr;  // destroy captured state outside the lock too
    mutex_.Lock();
    ++tasks_run_;
  }
}

void PriorityThreadPool::Shutdown(ShutdownMode mode) {
  std::call_once(shutdown_once_, [&] {
    std::vector<PoolTask> cancelled;
    {
      absl::MutexLock lock(&mutex_);
      stopping_ = true;
      drain_ = mode == ShutdownMode::kDrain;
      if (!drain_) {
        while (!queue_.empty()) {
          cancelled.push_back(std::move(queue_.top().task));
          queue_.pop();
        }
        tasks_cancelled_ += cancelled.size();
      }
      work_available_.SignalAll();
    }
    // Queued tasks learn of the cancellation in their submission order of priority.
    const absl::Status why = absl::CancelledError(
        absl::StrCat("thread pool '", options_.name, "' shut down before the task ran"));
    for (PoolTask& task : cancelled) task(why);
    for (std::thread& thread : threads_) {
      if (thread.get_id() == std::this_thread::get_id()) {
        thread.detach();  // Shutdown from inside a task: cannot join ourselves
      } else if (thread.joinable()) {
        thread.join();
      }
    }
  });
}

size_t PriorityThreadPool::queued() const {
  absl::MutexLock lock(&mutex_);
  return queue_.size();
}

uint64_t PriorityThreadPool::tasks_run() const {
  absl::MutexLock lock(&mutex_);
  return tasks_run_;
}

uint64_t PriorityThreadPool::tasks_cancelled() const {
  absl::MutexLock lock(&mutex_);
  return tasks_cancelled_;
}

}  // namespace bytecomp::cpu_offload
