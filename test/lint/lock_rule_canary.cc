// The lock-rule check's canary (test/lint/lock_rule_canary.sh, the ctest lint.lock_rules): a
// class whose lock rule is kept, or broken when BREAK_LOCK_RULE is defined. The check compiles it
// both ways with the build's compiler and -Wthread-safety -Werror: kept must compile and broken
// must be refused, which proves that the flags and Abseil's annotations are in force (a check
// that cannot fail would let anything through).
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

class Counter {
 public:
  void Add(int n) ABSL_LOCKS_EXCLUDED(mutex_) {
#ifndef BREAK_LOCK_RULE
    absl::MutexLock lock(&mutex_);
#endif
    AddLocked(n);
  }

 private:
  void AddLocked(int n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { total_ += n; }

  absl::Mutex mutex_;
  int total_ ABSL_GUARDED_BY(mutex_) = 0;
};

int main() {
  Counter c;
  c.Add(1);
  return 0;
}
