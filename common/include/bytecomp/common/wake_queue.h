// A multi-producer queue whose consumer is a thread blocked in zmq::poll: producers push under
// a mutex and write an eventfd that the consumer polls beside its sockets (no busy waiting); a
// consumer without sockets waits on the eventfd alone (WaitAndTakeAll). The consumer takes
// everything at once, so the eventfd is written only when the queue turns non-empty: one
// system call per batch, not per item. Users: the worker engine's data and control threads, the
// host local reducer's I/O thread, the server's I/O thread and key shards.
#pragma once

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>
#include <deque>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace bytecomp {

template <typename T>
class WakeQueue {
 public:
  WakeQueue() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~WakeQueue() { close(fd_); }
  WakeQueue(const WakeQueue&) = delete;
  WakeQueue& operator=(const WakeQueue&) = delete;

  void Push(T item) ABSL_LOCKS_EXCLUDED(mu_) {
    bool was_empty;
    {
      absl::MutexLock lock(&mu_);
      was_empty = items_.empty();
      items_.push_back(std::move(item));
    }
    // Items behind this one find the queue non-empty: the consumer, which reads the eventfd
    // before it takes everything, takes them with this one.
    if (was_empty) {
      const uint64_t one = 1;
      (void)!write(fd_, &one, sizeof(one));
    }
  }

  // Takes everything queued; clears the eventfd.
  std::deque<T> TakeAll() ABSL_LOCKS_EXCLUDED(mu_) {
    uint64_t count;
    (void)!read(fd_, &count, sizeof(count));
    absl::MutexLock lock(&mu_);
    std::deque<T> out;
    out.swap(items_);
    return out;
  }

  // Blocks until something is queued, then takes everything (a consumer without sockets).
  std::deque<T> WaitAndTakeAll() ABSL_LOCKS_EXCLUDED(mu_) {
    while (true) {
      pollfd readable{fd_, POLLIN, 0};
      (void)::poll(&readable, 1, -1);  // interrupted: look again
      std::deque<T> items = TakeAll();
      if (!items.empty()) return items;
    }
  }

  // How many items wait (for a producer that holds back while its consumer is behind).
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return items_.size();
  }

  int fd() const { return fd_; }

 private:
  const int fd_;
  mutable absl::Mutex mu_;
  std::deque<T> items_ ABSL_GUARDED_BY(mu_);
};

}  // namespace bytecomp
