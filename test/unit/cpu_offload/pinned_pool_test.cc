#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "bytecomp/cpu_offload.h"
#include "gtest/gtest.h"
#if BYTECOMP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace bytecomp::cpu_offload {
namespace {

PinnedPoolOptions HostOnly(size_t bound) {
  PinnedPoolOptions options;
  options.max_total_bytes = bound;
  options.prefer_cuda_host = false;
  return options;
}

TEST(PinnedMemoryPool, SizeClassesArePowersOfTwo) {
  EXPECT_EQ(PinnedMemoryPool::SizeClass(1, 4096), 4096u);
  EXPECT_EQ(PinnedMemoryPool::SizeClass(4096, 4096), 4096u);
  EXPECT_EQ(PinnedMemoryPool::SizeClass(4097, 4096), 8192u);
  EXPECT_EQ(PinnedMemoryPool::SizeClass(3'000'000, 4096), size_t{1} << 22);
  EXPECT_EQ(PinnedMemoryPool::SizeClass(100, 1000), 1024u);
}

TEST(PinnedMemoryPool, ReusesFreedBlockOfTheSameClass) {
  PinnedMemoryPool pool(HostOnly(1 << 20));
  uint8_t* first = nullptr;
  {
    auto buffer = pool.Acquire(10000);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    EXPECT_EQ(buffer->size(), 10000u);
    EXPECT_EQ(buffer->capacity(), 16384u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer->data()) % sysconf(_SC_PAGESIZE), 0u);
    std::memset(buffer->data(), 0xab, buffer->capacity());
    first = buffer->data();
    EXPECT_EQ(pool.stats().in_use_bytes, 16384u);
  }
  EXPECT_EQ(pool.stats().in_use_bytes, 0u);
  EXPECT_EQ(pool.stats().cached_bytes, 16384u);
  auto again = pool.Acquire(9000);  // same class
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->data(), first);
  EXPECT_EQ(pool.stats().allocations, 1u);
  EXPECT_EQ(pool.stats().reuses, 1u);
  auto other = pool.Acquire(100);  // another class: a new block
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->data(), first);
  EXPECT_EQ(pool.stats().allocations, 2u);
}

TEST(PinnedMemoryPool, BoundExceededNamesSizesAndInUse) {
  PinnedMemoryPool pool(HostOnly(65536));
  auto a = pool.Acquire(32768);
  auto b = pool.Acquire(16384);
  auto c = pool.Acquire(16000);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  auto d = pool.Acquire(100);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string message(d.status().message());
  EXPECT_NE(message.find("request of 100 bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("bound of 65536 bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("65536 bytes are in use"), std::string::npos) << message;
  // A request larger than the bound on its own fails the same way.
  PinnedMemoryPool small(HostOnly(4096));
  EXPECT_EQ(small.Acquire(5000).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(PinnedMemoryPool, CachedBlocksOfOtherClassesAreFreedToFitTheBound) {
  PinnedMemoryPool pool(HostOnly(65536));
  {
    auto a = pool.Acquire(65536);
    ASSERT_TRUE(a.ok());
  }
  EXPECT_EQ(pool.stats().cached_bytes, 65536u);
  auto b = pool.Acquire(20000);  // needs the 64 KiB cached block to go
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(pool.stats().cached_bytes, 0u);
  EXPECT_EQ(pool.stats().in_use_bytes, 32768u);
  EXPECT_EQ(pool.stats().releases_to_system, 1u);
}

TEST(PinnedMemoryPool, NothingLeaksAfterManyCycles) {
  auto pool = std::make_unique<PinnedMemoryPool>(HostOnly(8 << 20));
  std::vector<PinnedBuffer> held;
  for (int round = 0; round < 50; ++round) {
    for (size_t bytes : {100u, 5000u, 70000u, 300000u}) {
      auto buffer = pool->Acquire(bytes + round);
      ASSERT_TRUE(buffer.ok()) << buffer.status();
      std::memset(buffer->data(), round, buffer->size());
      held.push_back(std::move(*buffer));
    }
    if (round % 3 == 0) held.clear();
  }
  PinnedBuffer survivor = std::move(held.back());
  held.clear();
  EXPECT_EQ(pool->stats().in_use_bytes, survivor.capacity());
  // At most one block per class and per simultaneously held buffer was ever allocated.
  EXPECT_LE(pool->stats().allocations, 4u * 3u);
  pool->Trim();
  EXPECT_EQ(pool->stats().cached_bytes, 0u);
  pool.reset();            // the buffer keeps the pool's state alive
  survivor.data()[0] = 1;  // still valid memory (ASan checks)
  survivor.Reset();        // freed here; LeakSanitizer checks nothing stays
  EXPECT_FALSE(survivor);
}

TEST(PinnedMemoryPool, AcquireOrParkWaitsForAReleaseInOrder) {
  auto pool = std::make_unique<PinnedMemoryPool>(HostOnly(65536));
  auto held = pool->Acquire(65536);
  ASSERT_TRUE(held.ok());
  std::vector<int> served;
  std::vector<PinnedBuffer> buffers;
  for (int id : {1, 2}) {
    auto now = pool->AcquireOrPark(30000, [&, id](absl::StatusOr<PinnedBuffer> b) {
      ASSERT_TRUE(b.ok()) << b.status();
      served.push_back(id);
      buffers.push_back(std::move(*b));
    });
    EXPECT_FALSE(now.has_value());
  }
  EXPECT_EQ(pool->parked_requests(), 2u);
  // A request that can never fit is refused at once, not parked.
  auto never = pool->AcquireOrPark(100000, [](absl::StatusOr<PinnedBuffer>) { FAIL(); });
  ASSERT_TRUE(never.has_value());
  EXPECT_EQ(never->status().code(), absl::StatusCode::kResourceExhausted);
  held->Reset();  // 64 KiB back: both 32 KiB requests fit, served oldest first
  EXPECT_EQ(served, (std::vector<int>{1, 2}));
  EXPECT_EQ(pool->parked_requests(), 0u);
  EXPECT_EQ(pool->stats().parked, 2u);
  EXPECT_EQ(pool->stats().in_use_bytes, 65536u);
  // A newcomer does not overtake a parked request.
  bool third = false;
  EXPECT_FALSE(pool->AcquireOrPark(30000, [&](absl::StatusOr<PinnedBuffer> b) { third = b.ok(); })
                   .has_value());
  buffers.clear();
  EXPECT_TRUE(third);
  // Requests still parked when the pool goes are cancelled.
  auto blocker = pool->Acquire(65536);
  ASSERT_TRUE(blocker.ok());
  absl::Status last;
  EXPECT_FALSE(pool->AcquireOrPark(4096, [&](absl::StatusOr<PinnedBuffer> b) { last = b.status(); })
                   .has_value());
  pool.reset();
  EXPECT_EQ(last.code(), absl::StatusCode::kCancelled);
}

// Capabilities are per thread on Linux: dropping CAP_IPC_LOCK from this thread's effective set
// makes mlock obey RLIMIT_MEMLOCK even when the test runs as root; it is restored afterwards.
class ScopedNoIpcLock {
 public:
  ScopedNoIpcLock() {
    header_.version = _LINUX_CAPABILITY_VERSION_3;
    header_.pid = 0;
    if (syscall(SYS_capget, &header_, saved_) != 0) return;
    __user_cap_data_struct lowered[2] = {saved_[0], saved_[1]};
    lowered[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
    dropped_ = syscall(SYS_capset, &header_, lowered) == 0;
  }
  ~ScopedNoIpcLock() {
    if (dropped_) syscall(SYS_capset, &header_, saved_);
  }

 private:
  __user_cap_header_struct header_{};
  __user_cap_data_struct saved_[2]{};
  bool dropped_ = false;
};

TEST(PinnedMemoryPool, MlockRefusedFallsBackToUnlocked) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer replaces mlock with a no-op that always succeeds";
#endif
  ScopedNoIpcLock no_ipc_lock;
  rlimit original{};
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &original), 0);
  rlimit lowered = original;
  lowered.rlim_cur = 0;
  ASSERT_EQ(setrlimit(RLIMIT_MEMLOCK, &lowered), 0);
  // Should the capability drop have failed, mlock may still succeed: probe it.
  void* probe = std::aligned_alloc(4096, 1 << 20);
  const bool mlock_works = mlock(probe, 1 << 20) == 0;
  if (mlock_works) munlock(probe, 1 << 20);
  std::free(probe);

  PinnedMemoryPool pool(HostOnly(4 << 20));
  auto buffer = pool.Acquire(1 << 20);
  ASSERT_EQ(setrlimit(RLIMIT_MEMLOCK, &original), 0);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ(buffer->kind(), mlock_works ? PinnedMemoryKind::kMlocked : PinnedMemoryKind::kUnlocked);
  std::memset(buffer->data(), 1, buffer->size());
  if (mlock_works) GTEST_SKIP() << "could not make mlock fail here; the fallback went untested";
}

#if BYTECOMP_HAVE_CUDA
// On a machine with a GPU (deploy/gpu_check.sh; elsewhere it skips): the pool's blocks come from
// cudaHostAlloc, the driver knows them as host memory, and they copy to a device and back.
TEST(PinnedMemoryPool, OnAGpuMachineBlocksAreCudaHostMemoryThatCopiesToTheDevice) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    GTEST_SKIP() << "no CUDA device";
  }
  PinnedPoolOptions options;
  options.max_total_bytes = 8 << 20;
  PinnedMemoryPool pool(options);
  EXPECT_EQ(pool.kind(), PinnedMemoryKind::kCudaHost);
  const size_t bytes = (1 << 20) + 3;
  auto buffer = pool.Acquire(bytes);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ(buffer->kind(), PinnedMemoryKind::kCudaHost);
  cudaPointerAttributes attributes{};
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, buffer->data()), cudaSuccess);
  EXPECT_EQ(attributes.type, cudaMemoryTypeHost);
  for (size_t i = 0; i < bytes; ++i) buffer->data()[i] = static_cast<uint8_t>(i * 7);
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, bytes), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(device, buffer->data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  std::memset(buffer->data(), 0, bytes);
  ASSERT_EQ(cudaMemcpy(buffer->data(), device, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(device);
  size_t wrong = 0;
  for (size_t i = 0; i < bytes; ++i) wrong += buffer->data()[i] != static_cast<uint8_t>(i * 7);
  EXPECT_EQ(wrong, 0u);
}
#endif

}  // namespace
}  // namespace bytecomp::cpu_offload
