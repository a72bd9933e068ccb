// Pinned host memory for staging gradients between the device, the codecs and ZeroMQ.
// With CUDA compiled in and a device present, blocks come from cudaHostAlloc (so copies are
// true DMA); otherwise they are page-aligned and mlock'ed, or plain page-aligned memory with
// a one-time warning when RLIMIT_MEMLOCK forbids locking. Requests are rounded up to a power
// of two (the size class); freed blocks are kept per class and reused. The bytes held from
// the system (in use plus cached) never exceed the configured bound.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace bytecomp::cpu_offload {

enum class PinnedMemoryKind {
  kCudaHost,  // cudaHostAlloc: page-locked and registered with the CUDA driver
  kMlocked,   // aligned_alloc + mlock
  kUnlocked,  // aligned_alloc only (mlock refused); copies to a device are then slower
};
absl::string_view PinnedMemoryKindName(PinnedMemoryKind kind);

struct PinnedPoolOptions {
  size_t max_total_bytes = size_t{1} << 30;  // bound on in-use plus cached bytes
  size_t min_class_bytes = 4096;             // smallest size class (a power of two)
  // Try cudaHostAlloc first when CUDA is compiled in (falls back when no device is present).
  bool prefer_cuda_host = true;
  // Try mlock for non-CUDA blocks.
  bool lock_memory = true;
};

struct PinnedPoolStats {
  size_t in_use_bytes = 0;   // class bytes of buffers handed out
  size_t cached_bytes = 0;   // class bytes of free blocks kept for reuse
  uint64_t allocations = 0;  // blocks obtained from the system
  uint64_t reuses = 0;       // acquisitions served from the cache
  uint64_t releases_to_system = 0;
  uint64_t parked = 0;  // AcquireOrPark requests that had to wait
};

namespace internal {
struct PinnedPoolState;
}

// A block from the pool; returns it on destruction. Move-only. It keeps the pool's state
// alive, so a buffer may outlive the PinnedMemoryPool object.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  // Made by the pool only (PinnedMemoryPool::Acquire): the state type is private to it.
  PinnedBuffer(std::shared_ptr<internal::PinnedPoolState> state, uint8_t* data, size_t size,
               size_t capacity, PinnedMemoryKind kind)
      : state_(std::move(state)), data_(data), size_(size), capacity_(capacity), kind_(kind) {}
  ~PinnedBuffer() { Reset(); }
  PinnedBuffer(PinnedBuffer&& other) noexcept { *this = std::move(other); }
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }          // the bytes requested
  size_t capacity() const { return capacity_; }  // the size class
  PinnedMemoryKind kind() const { return kind_; }
  explicit operator bool() const { return data_ != nullptr; }
  absl::Span<uint8_t> span() const { return {data_, size_}; }
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(data_);
  }

  // Returns the block to the pool now.
  void Reset();

 private:
  std::shared_ptr<internal::PinnedPoolState> state_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
  PinnedMemoryKind kind_ = PinnedMemoryKind::kUnlocked;
};

class PinnedMemoryPool {
 public:
  explicit PinnedMemoryPool(PinnedPoolOptions options = {});
  // Frees cached blocks; blocks still held by buffers are freed when those are released.
  ~PinnedMemoryPool();
  PinnedMemoryPool(const PinnedMemoryPool&) = delete;
  PinnedMemoryPool& operator=(const PinnedMemoryPool&) = delete;

  // A buffer of at least bytes (size() == bytes). Reuses a cached block of the same class;
  // frees cached blocks of other classes when the bound would be exceeded; a request that
  // still does not fit is ResourceExhausted naming the requested size, its class, the bound
  // and the bytes in use.
  absl::StatusOr<PinnedBuffer> Acquire(size_t bytes);

  // Back-pressure without a waiting thread. Returns the result at once when a buffer can be
  // had, or when waiting cannot help (its size class exceeds the bound, or no buffer is in use
  // to come back: ResourceExhausted). Otherwise parks the request, returns nullopt, and later calls
  // on_ready from the thread that releases enough memory (first come, first served), or with
  // Cancelled if the pool is destroyed first. on_ready should be short (e.g. queue a task).
  std::optional<absl::StatusOr<PinnedBuffer>> AcquireOrPark(
      size_t bytes, std::function<void(absl::StatusOr<PinnedBuffer>)> on_ready);
  size_t parked_requests() const;

  // Gives every cached block back to the system.
  void Trim();

  PinnedPoolStats stats() const;
  size_t max_total_bytes() const;
  // The kind new blocks get (decided at construction).
  PinnedMemoryKind kind() const;

  // The size class of a request: the next power of two, at least min_class_bytes.
  static size_t SizeClass(size_t bytes, size_t min_class_bytes);

 private:
  // The blocks, the bound and the parked requests, behind one mutex (pinned_pool.cc); shared
  // with the buffers handed out.
  std::shared_ptr<internal::PinnedPoolState> state_;
};

}  // namespace bytecomp::cpu_offload
