// A multi-producer queue whose consumer is a thread blocked in zmq::poll: producers push under
// a mutex and write an eventfd that the consumer polls beside its sockets (no busy waiting).
// The host local reducer's I/O thread and the engine's data and control threads each take
// their commands from one.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>
#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace bytecomp::worker {

template <typename T>
class WakeQueue {
 public:
  WakeQueue() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~WakeQueue() { close(fd_); }
  WakeQueue(const WakeQueue&) = delete;
  WakeQueue& operator=(const WakeQueue&) = delete;

  void Push(T item) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      items_.push_back(std::move(item));
    }
    const uint64_t one = 1;
    (void)!write(fd_, &one, sizeof(one));
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

  int fd() const { return fd_; }

 private:
  const int fd_;
  absl::Mutex mu_;
  std::deque<T> items_ ABSL_GUARDED_BY(mu_);
};

}  // namespace bytecomp::worker
