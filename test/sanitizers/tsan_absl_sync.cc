// ThreadSanitizer cannot see Abseil's locks: Debian's libabsl_synchronization is built without
// TSan, so absl::Mutex's atomics and futex waits are invisible to it and every field guarded by
// an absl::Mutex looks like a data race. This library, preloaded into the TSan build's
// processes (LD_PRELOAD, deploy/check_sanitizers.sh), interposes the Mutex, CondVar and
// Notification functions that our code calls (and absl::Status's out-of-line reference count,
// below), forwards each to Abseil's own (dlsym
// RTLD_NEXT) and tells TSan the happens-before edge it makes: acquire after a lock is taken,
// release before it is given up. Races on data guarded by a lock are then still found when a
// thread touches it without the lock. (An instrumented Abseil would do this itself; Debian
// ships none, and nothing outside the package registries can be fetched.)
//
// Built without -fsanitize=thread and with weak references to TSan's interface, so that an
// uninstrumented process it is preloaded into (python running pytest) loads it harmlessly.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/base/options.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

extern "C" {
void __tsan_acquire(void* addr) __attribute__((weak));
void __tsan_release(void* addr) __attribute__((weak));
}

namespace {

#define BC_STR2(x) #x
#define BC_STR(x) BC_STR2(x)

void Acquire(const void* addr) {
  if (__tsan_acquire != nullptr) __tsan_acquire(const_cast<void*>(addr));
}
void Release(const void* addr) {
  if (__tsan_release != nullptr) __tsan_release(const_cast<void*>(addr));
}

// "_ZN[K]4absl<len><inline namespace><rest>": Abseil's own symbol for `rest` (K: a const
// member function).
template <typename Fn>
Fn Real(const char* rest, bool const_member = false) {
  const std::string ns = BC_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string name =
      std::string(const_member ? "_ZNK" : "_ZN") + "4absl" + std::to_string(ns.size()) + ns + rest;
  void* fn = dlsym(RTLD_NEXT, name.c_str());
  if (fn == nullptr) {
    std::fprintf(stderr, "tsan_absl_sync: %s not found in Abseil\n", name.c_str());
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

// Notification's flag, which HasBeenNotified (inline, so instrumented) reads with an acquire
// load: Notify's release is made on the same address.
const void* NotifiedFlag(const absl::Notification* n) {
  static_assert(sizeof(absl::Notification) == 2 * sizeof(absl::Mutex),
                "absl::Notification is not {Mutex mutex_; atomic<bool> notified_yet_;}");
  return reinterpret_cast<const char*>(n) + sizeof(absl::Mutex);
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static const auto real = Real<void (*)(Mutex*)>("5Mutex4LockEv");
  real(this);
  Acquire(this);
}

void Mutex::ReaderLock() {
  static const auto real = Real<void (*)(Mutex*)>("5Mutex10ReaderLockEv");
  real(this);
  Acquire(this);
}

bool Mutex::TryLock() {
  static const auto real = Real<bool (*)(Mutex*)>("5Mutex7TryLockEv");
  const bool locked = real(this);
  if (locked) Acquire(this);
  return locked;
}

bool Mutex::ReaderTryLock() {
  static const auto real = Real<bool (*)(Mutex*)>("5Mutex13ReaderTryLockEv");
  const bool locked = real(this);
  if (locked) Acquire(this);
  return locked;
}

void Mutex::Unlock() {
  static const auto real = Real<void (*)(Mutex*)>("5Mutex6UnlockEv");
  Release(this);
  real(this);
}

void Mutex::ReaderUnlock() {
  static const auto real = Real<void (*)(Mutex*)>("5Mutex12ReaderUnlockEv");
  Release(this);
  real(this);
}

void Mutex::LockWhen(const Condition& cond) {
  static const auto real =
      Real<void (*)(Mutex*, const Condition&)>("5Mutex8LockWhenERKNS0_9ConditionE");
  real(this, cond);
  Acquire(this);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, absl::Duration timeout) {
  static const auto real = Real<bool (*)(Mutex*, const Condition&, absl::Duration)>(
      "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const bool met = real(this, cond, timeout);
  Acquire(this);
  return met;
}

// Await may give the lock up and take it again while it waits.
void Mutex::Await(const Condition& cond) {
  static const auto real =
      Real<void (*)(Mutex*, const Condition&)>("5Mutex5AwaitERKNS0_9ConditionE");
  Release(this);
  real(this, cond);
  Acquire(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, absl::Duration timeout) {
  static const auto real = Real<bool (*)(Mutex*, const Condition&, absl::Duration)>(
      "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Release(this);
  const bool met = real(this, cond, timeout);
  Acquire(this);
  return met;
}

bool Mutex::AwaitWithDeadline(const Condition& cond, absl::Time deadline) {
  static const auto real = Real<bool (*)(Mutex*, const Condition&, absl::Time)>(
      "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Release(this);
  const bool met = real(this, cond, deadline);
  Acquire(this);
  return met;
}

void CondVar::Wait(Mutex* mu) {
  static const auto real = Real<void (*)(CondVar*, Mutex*)>("7CondVar4WaitEPNS0_5MutexE");
  Release(mu);
  real(this, mu);
  Acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
  static const auto real = Real<bool (*)(CondVar*, Mutex*, absl::Duration)>(
      "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  Release(mu);
  const bool timed_out = real(this, mu, timeout);
  Acquire(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, absl::Time deadline) {
  static const auto real = Real<bool (*)(CondVar*, Mutex*, absl::Time)>(
      "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  Release(mu);
  const bool timed_out = real(this, mu, deadline);
  Acquire(mu);
  return timed_out;
}

void Notification::Notify() {
  static const auto real = Real<void (*)(Notification*)>("12Notification6NotifyEv");
  Release(this);
  Release(NotifiedFlag(this));
  real(this);
}

void Notification::WaitForNotification() const {
  static const auto real =
      Real<void (*)(const Notification*)>("12Notification19WaitForNotificationEv", true);
  real(this);
  Acquire(this);
}

bool Notification::WaitForNotificationWithTimeout(absl::Duration timeout) const {
  static const auto real = Real<bool (*)(const Notification*, absl::Duration)>(
      "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE", true);
  const bool notified = real(this, timeout);
  if (notified) Acquire(this);
  return notified;
}

// absl::Status shares its heap representation (message, payloads) between copies under an
// atomic reference count that Abseil decrements out of line, in libabsl_status: invisible to
// TSan. A copy one thread read and dropped, whose last reference another thread dropped and
// freed, read as a race (the engine's data thread freeing a failed Operation's status after
// bytecomp_wait had copied its message: integration.faults). Each decrement releases on the
// representation and acquires what every earlier decrement released, so the one that frees
// it comes after every other holder's use, as the atomic makes it.
void Status::UnrefNonInlined(uintptr_t rep) {
  static const auto real = Real<void (*)(uintptr_t)>("6Status15UnrefNonInlinedEm");
  Release(reinterpret_cast<const void*>(rep));
  Acquire(reinterpret_cast<const void*>(rep));
  real(rep);
}

ABSL_NAMESPACE_END
}  // namespace absl
