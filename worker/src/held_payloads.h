// The zero-copy push payloads ZeroMQ still holds. The data thread's PartitionSender counts one
// when it makes such a message and the message's free function uncounts it, on whichever
// thread ZeroMQ drops the message (an I/O thread once it is written, the reaper once its
// socket is closed). Before the data loop returns it waits for none to be held: once the data
// thread is gone no operation completes on a ZeroMQ thread, and the engine may stop what a
// completion calls into (the CPU pool, the local reducers). The engine owns it: a payload still
// held after that wait (an error, logged) is released when the engine terminates its ZeroMQ
// context, after the data loop is gone.
#pragma once

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace bytecomp::worker {

// Thread-safe.
class HeldPayloads {
 public:
  void Hold() ABSL_LOCKS_EXCLUDED(mu_);
  void Release() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits at most `timeout` for none to be held; returns how many still are.
  int64_t AwaitNone(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Mutex mu_;
  int64_t held_ ABSL_GUARDED_BY(mu_) = 0;
  // held_ == 0. The wait's condition is this flag, as the engine's other waits' are: a
  // condition function of ours would be called from inside Abseil, where TSan sees no lock
  // taken (test/sanitizers/tsan_absl_sync.cc), and its read would look like a race.
  bool none_held_ ABSL_GUARDED_BY(mu_) = true;
};

}  // namespace bytecomp::worker
