// ThreadSanitizer cannot see libzmq's hand-offs: Debian's libzmq is built without TSan, so the
// lock-free pipes that carry a message from one thread's socket to another's (inproc, and a
// zero-copy payload to the I/O thread that writes it out) and the reference counts that decide
// which thread frees a payload are invisible to it. A message built on one thread and read on
// another then looks like a data race (the server's I/O loop reading a command its main thread
// wrote, a key shard adding a payload its I/O loop received). This library, preloaded into the
// TSan build's processes beside tsan_absl_sync (deploy/check_sanitizers.sh), interposes the
// calls that hand a message over, forwards each to libzmq's own (dlsym RTLD_NEXT) and tells
// TSan the happens-before edge the hand-off makes, on the message's data (the same address on
// both sides of an inproc pipe, which moves a message without copying it):
//   zmq_msg_send / zmq_sendmsg   release on the data before it goes;
//   zmq_msg_recv / zmq_recvmsg   acquire on the data once it has arrived;
//   zmq_msg_init_data            the payload's free function, which libzmq calls on whichever
//                                thread drops the last reference, acquires on the data first.
// Only what passes through a message is ordered: two threads that share anything else still
// need a lock, and TSan still reports them when they have none (sanitizers.tsan_zmq_sync checks
// both). One way these edges over-order: TSan does not see libzmq free a message it allocated,
// so when its allocator gives the address to a later message, that message inherits the edges
// of the first; that can hide a race, never invent one. libzmq's own memory accesses stay
// ignored (tsan.supp); its own locks and file descriptors TSan still sees. An instrumented
// libzmq would make these edges itself; Debian ships none.
//
// Built without -fsanitize=thread and with weak references to TSan's interface, so that an
// uninstrumented process it is preloaded into (python running pytest) loads it harmlessly.
#include <dlfcn.h>
#include <zmq.h>

#include <cstdio>
#include <cstdlib>

extern "C" {
void __tsan_acquire(void* addr) __attribute__((weak));
void __tsan_release(void* addr) __attribute__((weak));
}

namespace {

void Acquire(void* addr) {
  if (addr != nullptr && __tsan_acquire != nullptr) __tsan_acquire(addr);
}
void Release(void* addr) {
  if (addr != nullptr && __tsan_release != nullptr) __tsan_release(addr);
}

// libzmq's own function `name`: from the libzmq the process has loaded (found even when it was
// loaded privately, as a dependency of a dlopen'ed library), else the next definition after
// this library. Nothing here links libzmq, so a process without it loads this harmlessly.
template <typename Fn>
Fn Real(const char* name) {
  void* libzmq = dlopen("libzmq.so.5", RTLD_NOLOAD | RTLD_LAZY);
  void* fn = dlsym(libzmq != nullptr ? libzmq : RTLD_NEXT, name);
  if (fn == nullptr) {
    std::fprintf(stderr, "tsan_zmq_sync: %s not found in libzmq\n", name);
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

// The data of a message, or null for an empty one (nothing to order).
void* DataOf(zmq_msg_t* msg) {
  static const auto size = Real<size_t (*)(const zmq_msg_t*)>("zmq_msg_size");
  static const auto data = Real<void* (*)(zmq_msg_t*)>("zmq_msg_data");
  return size(msg) == 0 ? nullptr : data(msg);
}

// A zero-copy payload's own free function and hint, called through FreeAfterAcquire.
struct FreeHook {
  zmq_free_fn* free_fn;
  void* hint;
};

void FreeAfterAcquire(void* data, void* hook_ptr) {
  auto* hook = static_cast<FreeHook*>(hook_ptr);
  Acquire(data);
  hook->free_fn(data, hook->hint);
  delete hook;
}

}  // namespace

extern "C" {

int zmq_msg_send(zmq_msg_t* msg, void* socket, int flags) {
  static const auto real = Real<int (*)(zmq_msg_t*, void*, int)>("zmq_msg_send");
  Release(DataOf(msg));
  return real(msg, socket, flags);
}

int zmq_sendmsg(void* socket, zmq_msg_t* msg, int flags) {
  static const auto real = Real<int (*)(void*, zmq_msg_t*, int)>("zmq_sendmsg");
  Release(DataOf(msg));
  return real(socket, msg, flags);
}

int zmq_msg_recv(zmq_msg_t* msg, void* socket, int flags) {
  static const auto real = Real<int (*)(zmq_msg_t*, void*, int)>("zmq_msg_recv");
  const int rc = real(msg, socket, flags);
  if (rc >= 0) Acquire(DataOf(msg));
  return rc;
}

int zmq_recvmsg(void* socket, zmq_msg_t* msg, int flags) {
  static const auto real = Real<int (*)(void*, zmq_msg_t*, int)>("zmq_recvmsg");
  const int rc = real(socket, msg, flags);
  if (rc >= 0) Acquire(DataOf(msg));
  return rc;
}

int zmq_msg_init_data(zmq_msg_t* msg, void* data, size_t size, zmq_free_fn* free_fn, void* hint) {
  static const auto real =
      Real<int (*)(zmq_msg_t*, void*, size_t, zmq_free_fn*, void*)>("zmq_msg_init_data");
  if (free_fn == nullptr) return real(msg, data, size, free_fn, hint);  // never freed
  auto* hook = new FreeHook{free_fn, hint};
  const int rc = real(msg, data, size, &FreeAfterAcquire, hook);
  if (rc != 0) delete hook;
  return rc;
}

}  // extern "C"
