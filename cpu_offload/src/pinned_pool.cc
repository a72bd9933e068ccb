#include "bytecomp/cpu_offload/pinned_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "bytecomp/common/logging.h"

#if BYTECOMP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace bytecomp::cpu_offload {
namespace internal {

// Everything the pool and its buffers share. options, kind and page_bytes are set before the
// state is shared and only read after.
struct PinnedPoolState : std::enable_shared_from_this<PinnedPoolState> {
  PinnedPoolOptions options;
  PinnedMemoryKind kind = PinnedMemoryKind::kUnlocked;
  size_t page_bytes = 4096;

  struct Parked {
    size_t bytes;
    std::function<void(absl::StatusOr<PinnedBuffer>)> on_ready;
  };
  mutable absl::Mutex mutex;
  // Cached blocks by size class.
  std::map<size_t, std::vector<std::pair<uint8_t*, PinnedMemoryKind>>> free_blocks
      ABSL_GUARDED_BY(mutex);
  PinnedPoolStats stats ABSL_GUARDED_BY(mutex);
  std::deque<Parked> parked ABSL_GUARDED_BY(mutex);  // AcquireOrPark requests, oldest first

  absl::StatusOr<PinnedBuffer> AcquireLocked(size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex);

  void FreeToSystem(uint8_t* data, size_t capacity, PinnedMemoryKind block_kind)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex) {
    ++stats.releases_to_system;
    switch (block_kind) {
      case PinnedMemoryKind::kCudaHost:
#if BYTECOMP_HAVE_CUDA
        cudaFreeHost(data);
#endif
        return;
      case PinnedMemoryKind::kMlocked:
        munlock(data, capacity);
        std::free(data);
        return;
      case PinnedMemoryKind::kUnlocked:
        std::free(data);
        return;
    }
  }

  // Frees cached blocks (largest first) until at least `needed` more bytes fit in the bound.
  void EvictCachedFor(size_t needed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex) {
    while (stats.in_use_bytes + stats.cached_bytes + needed > options.max_total_bytes &&
           stats.cached_bytes > 0) {
      auto it = std::prev(free_blocks.end());
      while (it->second.empty()) {
        if (it == free_blocks.begin()) return;
        --it;
      }
      auto [data, block_kind] = it->second.back();
      it->second.pop_back();
      stats.cached_bytes -= it->first;
      FreeToSystem(data, it->first, block_kind);
    }
  }

  void ReleaseAll() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex) {
    for (auto& [capacity, blocks] : free_blocks) {
      for (auto [data, block_kind] : blocks) FreeToSystem(data, capacity, block_kind);
      stats.cached_bytes -= capacity * blocks.size();
      blocks.clear();
    }
  }

  ~PinnedPoolState() {
    absl::MutexLock lock(&mutex);
    ReleaseAll();
  }
};

}  // namespace internal

namespace {

std::atomic<bool> mlock_warning_given{false};

PinnedMemoryKind DecideKind(const PinnedPoolOptions& options) {
#if BYTECOMP_HAVE_CUDA
  if (options.prefer_cuda_host) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) {
      return PinnedMemoryKind::kCudaHost;
    }
    cudaGetLastError();  // clear the sticky "no device" error for later CUDA calls
  }
#endif
  return options.lock_memory ? PinnedMemoryKind::kMlocked : PinnedMemoryKind::kUnlocked;
}

}  // namespace

absl::string_view PinnedMemoryKindName(PinnedMemoryKind kind) {
  switch (kind) {
    case PinnedMemoryKind::kCudaHost:
      return "cuda-host";
    case PinnedMemoryKind::kMlocked:
      return "mlocked";
    case PinnedMemoryKind::kUnlocked:
      return "unlocked";
  }
  return "unknown";
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    state_ = std::move(other.state_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
    kind_ = other.kind_;
  }
  return *this;
}

void PinnedBuffer::Reset() {
  if (data_ == nullptr) return;
  std::shared_ptr<internal::PinnedPoolState> state = std::move(state_);
  // Parked requests that fit now, served oldest first; their callbacks run outside the lock.
  // (After the pool is destroyed nothing is parked: its destructor cancelled the requests.)
  std::vector<std::pair<std::function<void(absl::StatusOr<PinnedBuffer>)>, PinnedBuffer>> ready;
  {
    absl::MutexLock lock(&state->mutex);
    state->stats.in_use_bytes -= capacity_;
    state->free_blocks[capacity_].emplace_back(data_, kind_);
    state->stats.cached_bytes += capacity_;
    while (!state->parked.empty()) {
      absl::StatusOr<PinnedBuffer> buffer = state->AcquireLocked(state->parked.front().bytes);
      if (!buffer.ok()) break;  // still does not fit: keep the order
      ready.emplace_back(std::move(state->parked.front().on_ready), std::move(*buffer));
      state->parked.pop_front();
    }
  }
  data_ = nullptr;
  size_ = capacity_ = 0;
  for (auto& [on_ready, buffer] : ready) on_ready(std::move(buffer));
}

size_t PinnedMemoryPool::SizeClass(size_t bytes, size_t min_class_bytes) {
  const size_t floor = std::bit_ceil(std::max<size_t>(min_class_bytes, 1));
  if (bytes <= floor) return floor;
  if (bytes > (size_t{1} << 62)) return 0;  // no class: the caller reports it
  return std::bit_ceil(bytes);
}

PinnedMemoryPool::PinnedMemoryPool(PinnedPoolOptions options)
    : state_(std::make_shared<internal::PinnedPoolState>()) {
  state_->options = options;
  const long page = sysconf(_SC_PAGESIZE);
  state_->page_bytes = page > 0 ? static_cast<size_t>(page) : 4096;
  state_->kind = DecideKind(options);
}

PinnedMemoryPool::~PinnedMemoryPool() {
  std::deque<internal::PinnedPoolState::Parked> parked;
  {
    absl::MutexLock lock(&state_->mutex);
    parked.swap(state_->parked);
  }
  for (auto& p : parked) {
    p.on_ready(absl::CancelledError(absl::StrCat("pinned memory pool destroyed while a request of ",
                                                 p.bytes, " bytes waited")));
  }
  Trim();
}

absl::StatusOr<PinnedBuffer> PinnedMemoryPool::Acquire(size_t bytes) {
  absl::MutexLock lock(&state_->mutex);
  return state_->AcquireLocked(bytes);
}

std::optional<absl::StatusOr<PinnedBuffer>> PinnedMemoryPool::AcquireOrPark(
    size_t bytes, std::function<void(absl::StatusOr<PinnedBuffer>)> on_ready) {
  absl::MutexLock lock(&state_->mutex);
  const size_t capacity = SizeClass(bytes, state_->options.min_class_bytes);
  const bool can_ever_fit = capacity != 0 && capacity <= state_->options.max_total_bytes;
  // Parked requests go first, so a newcomer does not overtake them.
  if (!can_ever_fit || state_->parked.empty()) {
    absl::StatusOr<PinnedBuffer> buffer = state_->AcquireLocked(bytes);
    // Parking helps only when buffers in use will come back.
    if (buffer.ok() || buffer.status().code() != absl::StatusCode::kResourceExhausted ||
        !can_ever_fit || state_->stats.in_use_bytes == 0) {
      return buffer;
    }
  }
  state_->parked.push_back({bytes, std::move(on_ready)});
  ++state_->stats.parked;
  return std::nullopt;
}

size_t PinnedMemoryPool::parked_requests() const {
  absl::MutexLock lock(&state_->mutex);
  return state_->parked.size();
}

absl::StatusOr<PinnedBuffer> internal::PinnedPoolState::AcquireLocked(size_t bytes) {
  const size_t capacity = PinnedMemoryPool::SizeClass(bytes, options.min_class_bytes);
  if (capacity == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("pinned memory pool: a request of ", bytes, " bytes has no size class"));
  }
  uint8_t* data = nullptr;
  PinnedMemoryKind block_kind = kind;
  auto& cached = free_blocks[capacity];
  if (!cached.empty()) {
    std::tie(data, block_kind) = cached.back();
    cached.pop_back();
    stats.cached_bytes -= capacity;
    ++stats.reuses;
  } else {
    EvictCachedFor(capacity);
    if (stats.in_use_bytes + stats.cached_bytes + capacity > options.max_total_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "pinned memory pool: a request of ", bytes, " bytes (size class ", capacity,
          " bytes) exceeds the bound of ", options.max_total_bytes, " bytes: ", stats.in_use_bytes,
          " bytes are in use; raise the pinned pool bound or release "
          "buffers"));
    }
#if BYTECOMP_HAVE_CUDA
    if (block_kind == PinnedMemoryKind::kCudaHost) {
      void* p = nullptr;
      const cudaError_t rc = cudaHostAlloc(&p, capacity, cudaHostAllocPortable);
      if (rc != cudaSuccess) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "pinned memory pool: cudaHostAlloc of ", capacity,
            " bytes failed: ", cudaGetErrorString(rc), " (", stats.in_use_bytes, " bytes in use)"));
      }
      data = static_cast<uint8_t*>(p);
    }
#endif
    if (data == nullptr) {
      // Page-aligned so that mlock locks exactly this block and DMA engines like it.
      const size_t alignment = std::max(page_bytes, size_t{64});
      const size_t rounded = (capacity + alignment - 1) / alignment * alignment;
      data = static_cast<uint8_t*>(std::aligned_alloc(alignment, rounded));
      if (data == nullptr) {
        return absl::ResourceExhaustedError(absl::StrCat("pinned memory pool: the system refused ",
                                                         capacity, " bytes (", stats.in_use_bytes,
                                                         " bytes in use)"));
      }
      if (block_kind == PinnedMemoryKind::kMlocked && mlock(data, capacity) != 0) {
        const int err = errno;
        if (!mlock_warning_given.exchange(true)) {
          BC_LOG_WARNING("pinned memory pool: mlock of ", capacity, " bytes failed (",
                         std::strerror(err),
                         "); staging buffers are not page-locked. Raise RLIMIT_MEMLOCK "
                         "(ulimit -l) to lock them.");
        }
        block_kind = PinnedMemoryKind::kUnlocked;
      }
    }
    ++stats.allocations;
  }
  stats.in_use_bytes += capacity;
  return PinnedBuffer(shared_from_this(), data, bytes, capacity, block_kind);
}

void PinnedMemoryPool::Trim() {
  absl::MutexLock lock(&state_->mutex);
  state_->ReleaseAll();
}

PinnedPoolStats PinnedMemoryPool::stats() const {
  absl::MutexLock lock(&state_->mutex);
  return state_->stats;
}

size_t PinnedMemoryPool::max_total_bytes() const { return state_->options.max_total_bytes; }

PinnedMemoryKind PinnedMemoryPool::kind() const { return state_->kind; }

}  // namespace bytecomp::cpu_offload
