// What every CUDA codec source uses (private to compress/cuda): error handling, launch shapes,
// growable buffers, and the statistics that kernels reduce into and the host reads back.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "bytecomp/compress/format/format_error.h"

namespace bytecomp::compress::cuda {

constexpr int kThreads = 256;

inline absl::Status CudaStatus(const char* what, cudaError_t rc) {
  return absl::InternalError(absl::StrCat("CUDA: ", what, ": ", cudaGetErrorString(rc)));
}

#define BC_CUDA_TRY(expr)                                      \
  do {                                                         \
    const cudaError_t bc_rc = (expr);                          \
    if (bc_rc != cudaSuccess) return CudaStatus(#expr, bc_rc); \
  } while (0)

#define BC_ASSIGN(lhs, expr)              \
  do {                                    \
    auto bc_r = (expr);                   \
    if (!bc_r.ok()) return bc_r.status(); \
    lhs = *bc_r;                          \
  } while (0)

// Blocks for `work` threads, within the grid limit (the kernels stride over the rest).
inline unsigned Blocks(size_t work, int threads = kThreads) {
  const size_t b = (work + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<size_t>(b, 1, 65535));
}

// Blocks for a grid-stride kernel that adds one atomic per block into a few words (the
// statistics, a histogram): a few resident blocks a multiprocessor, so that the atomics on one
// address stay about a thousand; 65535 blocks' atomics on one word cost more than the pass.
inline unsigned ReduceBlocks(size_t work, int threads = kThreads) {
  static const unsigned limit = [] {
    int device = 0, sms = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        sms <= 0) {
      cudaGetLastError();  // clear it: the kernels' launch checks must not see it
      return 1024u;
    }
    return static_cast<unsigned>(sms) * 8u;
  }();
  return std::min(Blocks(work, threads), limit);
}

// A grid-stride loop: for (size_t i = GridStart(); i < n; i += GridStride()).
__device__ inline size_t GridStart() {
  return blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
}
__device__ inline size_t GridStride() { return static_cast<size_t>(gridDim.x) * blockDim.x; }

// A strided loop over x[begin, end), i = begin, begin + stride, ..., that keeps four loads a
// thread in flight (for the grids of a few blocks a multiprocessor, ReduceBlocks): each(i, x[i])
// for every such i, the loads of a step issued before its calls.
template <typename Each>
__device__ inline void ForEachLoadedStrided(const float* __restrict__ x, size_t begin, size_t end,
                                            size_t stride, Each each) {
  size_t i = begin;
  for (; i + 3 * stride < end; i += 4 * stride) {
    const float v0 = x[i], v1 = x[i + stride], v2 = x[i + 2 * stride], v3 = x[i + 3 * stride];
    each(i, v0);
    each(i + stride, v1);
    each(i + 2 * stride, v2);
    each(i + 3 * stride, v3);
  }
  for (; i < end; i += stride) each(i, x[i]);
}

// The grid's strided loop over x[0, n).
template <typename Each>
__device__ inline void ForEachLoaded(const float* __restrict__ x, size_t n, Each each) {
  ForEachLoadedStrided(x, GridStart(), n, GridStride(), each);
}

// A growable CUDA allocation; Alloc/Free are cudaMalloc/cudaFree (device) or
// cudaMallocHost/cudaFreeHost (pinned host memory, for readbacks and index uploads).
template <cudaError_t (*Alloc)(void**, size_t), cudaError_t (*Free)(void*)>
class CudaBuffer {
 public:
  CudaBuffer() = default;
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;
  ~CudaBuffer() { Free(data_); }

  absl::StatusOr<void*> Reserve(size_t bytes) {
    if (bytes > capacity_) {
      Free(data_);
      data_ = nullptr;
      capacity_ = 0;
      BC_CUDA_TRY(Alloc(&data_, bytes));
      capacity_ = bytes;
    }
    return data_;
  }
  // count elements of U (at least one, so that a pointer exists for empty inputs).
  template <typename U>
  absl::StatusOr<U*> Reserve(size_t count) {
    void* p = nullptr;
    BC_ASSIGN(p, Reserve(std::max<size_t>(count, 1) * sizeof(U)));
    return static_cast<U*>(p);
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

inline cudaError_t DeviceAlloc(void** p, size_t n) { return cudaMalloc(p, n); }
inline cudaError_t HostAlloc(void** p, size_t n) { return cudaMallocHost(p, n); }
using DeviceBuffer = CudaBuffer<DeviceAlloc, cudaFree>;
using HostBuffer = CudaBuffer<HostAlloc, cudaFreeHost>;

// What the kernels reduce into (zeroed before each use) and the host reads back at once.
struct DeviceStats {
  unsigned int max_abs_bits;  // the finite check; the sparse writer: the largest delta
  unsigned int first_bad;     // the first NaN/Inf index (UINT_MAX: none), on demand
  unsigned long long count;   // negative elements; dgc: |x| >= threshold; varint bytes
  double non_negative_sum;
  double negative_sum;
  double sum_of_squares;
  unsigned int suspect;     // a parallel reader's doubt, which the serial reader settles
  unsigned int error_code;  // the first FormatErrorCode a kernel recorded, 0: none
  FormatError error;        // ... and its numbers
};

// Records e unless an error was recorded already (the first one is reported).
__device__ inline void RecordError(DeviceStats* stats, const FormatError& e) {
  if (e.ok()) return;
  if (atomicCAS(&stats->error_code, 0u, static_cast<unsigned int>(e.code)) == 0u) {
    stats->error = e;
  }
}

struct MaxOp {
  __device__ unsigned int operator()(unsigned int a, unsigned int b) const { return a > b ? a : b; }
};

// The block's sum of each thread's v, in thread 0 (blockDim.x a multiple of 32, at most 1024).
// Every thread of the block calls it.
template <typename T>
__device__ inline T BlockSum(T v) {
  __shared__ T warp_sum[32];
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  __syncthreads();  // an earlier call's readers are done with warp_sum
  if ((threadIdx.x & 31u) == 0) warp_sum[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < blockDim.x / 32 ? warp_sum[threadIdx.x] : T(0);
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

// Adds the block's largest |x| bit pattern (each thread's max_bits) into stats->max_abs_bits,
// one atomic a block: the finite check of the encode kernels that fuse the pass
// (FusesReduction).
// Every thread of the block calls it (blockDim.x a multiple of 32, at most 1024).
__device__ inline void RecordBlockMaxAbsBits(unsigned int max_bits, DeviceStats* stats) {
  __shared__ unsigned int warp_max[32];
  for (int offset = 16; offset > 0; offset >>= 1) {
    max_bits = MaxOp()(max_bits, __shfl_xor_sync(0xffffffffu, max_bits, offset));
  }
  if ((threadIdx.x & 31u) == 0) warp_max[threadIdx.x >> 5] = max_bits;
  __syncthreads();
  if (threadIdx.x < 32) {
    max_bits = threadIdx.x < blockDim.x / 32 ? warp_max[threadIdx.x] : 0u;
    for (int offset = 16; offset > 0; offset >>= 1) {
      max_bits = MaxOp()(max_bits, __shfl_xor_sync(0xffffffffu, max_bits, offset));
    }
    if (threadIdx.x == 0 && max_bits != 0) atomicMax(&stats->max_abs_bits, max_bits);
  }
}

}  // namespace bytecomp::compress::cuda
