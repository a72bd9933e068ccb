// CUDA kernels of the GPU codecs. The wire formats are the CPU codecs' (compress/src: the
// format comments of basic_codecs.cc, sign_codecs.cc, quant_codecs.cc and, on branch
// compress-a, sparse_codecs.cc and sparse_format.h); the per-element math is elementwise.h and
// cuda_feedback.h, which the CPU code shares. Built with --fmad=false (see elementwise.h).
//
// Each Encode runs: [fused memory: compensate into the device state] -> one reduction pass
// (max |x| bits for the finite check, sums the codec needs) -> one readback -> scalars computed
// on the host with the CPU codecs' expressions -> the element kernel, which also writes the
// memory's update. Reductions in double are summed in another order than on the CPU; the
// rounded float (a norm, a mean) is the same unless the double sums straddle a float rounding
// boundary, which is rare but possible.
#include <cub/cub.cuh>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/cuda_codec_threads.h"
#include "bytecomp/compress/cuda_codecs.h"
#include "bytecomp/compress/cuda_host_draws.h"
#include "bytecomp/compress/cuda_feedback.h"
#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/gpu_codecs.h"
#include "bytecomp/compress/params.h"

namespace bytecomp::compress::cuda {
namespace {

using namespace cuda_threads;  // the per-thread work, shared with the host tests

constexpr int kThreads = 256;
constexpr size_t kSparseHeader = 16;
constexpr size_t kRandomkHeader = 8;

#define BC_CUDA_TRY(expr)                                                       \
  do {                                                                          \
    const cudaError_t bc_rc = (expr);                                           \
    if (bc_rc != cudaSuccess) return CudaStatus(#expr, bc_rc);                  \
  } while (0)

absl::Status CudaStatus(const char* what, cudaError_t rc) {
  return absl::InternalError(absl::StrCat("CUDA: ", what, ": ", cudaGetErrorString(rc)));
}

unsigned Blocks(size_t work, int threads = kThreads) {
  const size_t b = (work + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<size_t>(b, 1, 65535));
}

// ------------------------------------------------------------------------------------------
// Device buffers.

// A growable CUDA allocation; Alloc/Free are cudaMalloc/cudaFree (device) or
// cudaMallocHost/cudaFreeHost (pinned host memory, for readbacks and index uploads).
template <cudaError_t (*Alloc)(void**, size_t), cudaError_t (*Free)(void*)>
class CudaBuffer {
 public:
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
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }

 private:
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

cudaError_t DeviceAlloc(void** p, size_t n) { return cudaMalloc(p, n); }
cudaError_t HostAlloc(void** p, size_t n) { return cudaMallocHost(p, n); }
using DeviceBuffer = CudaBuffer<DeviceAlloc, cudaFree>;
using HostBuffer = CudaBuffer<HostAlloc, cudaFreeHost>;

#define BC_ASSIGN(lhs, expr)             \
  do {                                   \
    auto bc_r = (expr);                  \
    if (!bc_r.ok()) return bc_r.status(); \
    lhs = *bc_r;                         \
  } while (0)

// ------------------------------------------------------------------------------------------
// Reduction pass.

struct DeviceStats {
  unsigned int max_abs_bits;
  unsigned int first_bad;  // first index holding NaN/Inf (UINT_MAX: none); filled on demand
  unsigned long long negative_count;
  double non_negative_sum;
  double negative_sum;
  double sum_of_squares;
  int error;  // decode validation: a DecodeError code, 0 = fine
};

struct MaxOp {
  __device__ unsigned int operator()(unsigned int a, unsigned int b) const { return a > b ? a : b; }
};

enum DecodeError : int {
  kFine = 0,
  kBadPadding,
  kBadHeaderValue,
  kBadLevel,
  kBadTernary,
  kBadNatural,
  kNonFinitePayload,
  kBadIndex,
  kIndexSectionSize,
};

const char* DecodeErrorText(int code) {
  switch (code) {
    case kBadPadding: return "padding bits after the last element are not zero";
    case kBadHeaderValue: return "a header value is not finite or has the wrong sign";
    case kBadLevel: return "a level exceeds quantum_num, a padding bit is set or a norm is bad";
    case kBadTernary: return "ternary code 3";
    case kBadNatural: return "a natural code is out of range or is 0x80 (negative zero)";
    case kNonFinitePayload: return "payload holds NaN or Inf";
    case kBadIndex: return "indices are not strictly increasing below n";
    case kIndexSectionSize: return "the index section size does not match its encoding";
  }
  return "unknown error";
}

__device__ void RecordError(DeviceStats* s, int code) { atomicCAS(&s->error, 0, code); }

template <bool kSigns, bool kSquares>
__global__ void ReduceStatsKernel(const float* __restrict__ x, size_t n, DeviceStats* stats) {
  using BlockReduceU = cub::BlockReduce<unsigned int, kThreads>;
  using BlockReduceD = cub::BlockReduce<double, kThreads>;
  using BlockReduceL = cub::BlockReduce<unsigned long long, kThreads>;
  __shared__ union {
    typename BlockReduceU::TempStorage u;
    typename BlockReduceD::TempStorage d;
    typename BlockReduceL::TempStorage l;
  } temp;
  unsigned int max_bits = 0;
  double pos = 0.0, neg = 0.0, squares = 0.0;
  unsigned long long neg_count = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float v = x[i];
    const unsigned int a = FloatBits(v) & 0x7fffffffu;
    max_bits = a > max_bits ? a : max_bits;
    if constexpr (kSigns) {
      if (v < 0.0f) {
        neg += static_cast<double>(v);
        ++neg_count;
      } else {
        pos += static_cast<double>(v);
      }
    }
    if constexpr (kSquares) {
      const double d = static_cast<double>(v);
      squares += d * d;
    }
  }
  const unsigned int block_max = BlockReduceU(temp.u).Reduce(max_bits, MaxOp());
  if (threadIdx.x == 0) atomicMax(&stats->max_abs_bits, block_max);
  if constexpr (kSigns) {
    __syncthreads();
    const double p = BlockReduceD(temp.d).Sum(pos);
    __syncthreads();
    const double q = BlockReduceD(temp.d).Sum(neg);
    __syncthreads();
    const unsigned long long c = BlockReduceL(temp.l).Sum(neg_count);
    if (threadIdx.x == 0) {
      atomicAdd(&stats->non_negative_sum, p);
      atomicAdd(&stats->negative_sum, q);
      atomicAdd(&stats->negative_count, c);
    }
  }
  if constexpr (kSquares) {
    __syncthreads();
    const double s = BlockReduceD(temp.d).Sum(squares);
    if (threadIdx.x == 0) atomicAdd(&stats->sum_of_squares, s);
  }
}

__global__ void FirstNonFiniteKernel(const float* __restrict__ x, size_t n, DeviceStats* stats) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    if (!IsFiniteFloat(x[i])) atomicMin(&stats->first_bad, static_cast<unsigned int>(i));
  }
}

// ------------------------------------------------------------------------------------------
// Memories, fused: the compensated input is written into the state buffer.

enum class MemoryKind { kNone, kResidual, kEfSignSgd, kDgcMomentum };

__global__ void ResidualCompensateKernel(const float* __restrict__ g, float* __restrict__ r,
                                         size_t n, float beta, float gamma) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    r[i] = ResidualCompensate(g[i], r[i], beta, gamma);
  }
}

__global__ void EfSignCompensateKernel(const float* __restrict__ g, float* __restrict__ e,
                                       size_t n, float inverse_lr, bool first_round) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    e[i] = first_round ? g[i] : EfSignCompensate(g[i], e[i], inverse_lr);
  }
}

__global__ void SignumBlendKernel(const float* __restrict__ g, float* __restrict__ m, size_t n,
                                  float keep, float beta, bool first_round) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    m[i] = first_round ? g[i] : SignumBlend(g[i], m[i], keep, beta);
  }
}

__global__ void DgcMomentumKernel(const float* __restrict__ g, float* __restrict__ u,
                                  float* __restrict__ v, size_t n, float momentum) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float un = DgcMomentumU(g[i], u[i], momentum);
    u[i] = un;
    v[i] = DgcMomentumV(v[i], un);
  }
}

// How the element kernels update a memory from (compensated, decoded).
struct Feedback {
  MemoryKind kind = MemoryKind::kNone;
  float* state = nullptr;  // residual / efsignsgd error; holds the compensated input on entry
  float lr = 0.0f;         // efsignsgd
  __device__ void Update(size_t i, float compensated, float decoded) const {
    if (kind == MemoryKind::kResidual) {
      state[i] = ResidualUpdate(compensated, decoded);
    } else if (kind == MemoryKind::kEfSignSgd) {
      state[i] = EfSignResidual(compensated, decoded, lr);
    }
  }
};

// ------------------------------------------------------------------------------------------
// fp16 / bf16.

template <bool kBFloat>
__global__ void HalfEncodeKernel(const float* __restrict__ x, size_t n, uint16_t* __restrict__ out,
                                 Feedback fb) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float c = x[i];
    const uint16_t h = kBFloat ? SaturatingBFloat16Bits(c) : SaturatingHalfBits(c);
    out[i] = h;
    fb.Update(i, c, kBFloat ? BFloat16BitsToFloat(h) : HalfBitsToFloat(h));
  }
}

template <bool kBFloat>
__global__ void HalfDecodeKernel(const uint16_t* __restrict__ in, size_t n, float* __restrict__ out,
                                 DeviceStats* stats) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint16_t h = in[i];
    if ((h & 0x7fffu) >= (kBFloat ? 0x7f80u : 0x7c00u)) RecordError(stats, kNonFinitePayload);
    out[i] = kBFloat ? BFloat16BitsToFloat(h) : HalfBitsToFloat(h);
  }
}

// ------------------------------------------------------------------------------------------
// Sign codecs: one warp ballot per 32 elements gives one little-endian word of the bit mask
// (element i is bit i % 8 of byte i / 8, as sign_codecs.cc packs).

__global__ void SignPackKernel(const float* __restrict__ x, size_t n, uint8_t* __restrict__ bits,
                               float clear_value, float set_value, Feedback fb) {
  const unsigned lane = threadIdx.x & 31u;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t base = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x - lane; base < n;
       base += stride) {
    const size_t i = base + lane;
    const bool valid = i < n;
    const float c = valid ? x[i] : 0.0f;
    // Bit `lane` of the ballot is SignWordBit(c, lane): the word the host tests build.
    const uint32_t word = __ballot_sync(0xffffffffu, valid && SignBit(c) != 0u);
    if (valid) fb.Update(i, c, SignDecoded(c, clear_value, set_value));
    if (lane == 0) StoreSignWord(bits, n, base, word);
  }
}

__global__ void SignUnpackKernel(const uint8_t* __restrict__ bits, size_t n, float clear_value,
                                 float set_value, float* __restrict__ out) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = ((bits[i / 8] >> (i % 8)) & 1u) ? set_value : clear_value;
  }
}

// Checks the padding bits after the last sign bit (one thread).
__global__ void SignPaddingKernel(const uint8_t* __restrict__ bits, size_t n, DeviceStats* stats) {
  if (n % 8 != 0 && (bits[n / 8] >> (n % 8)) != 0) RecordError(stats, kBadPadding);
}

// ------------------------------------------------------------------------------------------
// qsgd: per-bucket norms, then codes of `code_bits` bits, 8 codes (= code_bits bytes) a thread.

__global__ void QsgdNormKernel(const float* __restrict__ x, size_t n, size_t bucket,
                               float* __restrict__ norms_out, uint8_t* __restrict__ header) {
  using BlockReduceD = cub::BlockReduce<double, kThreads>;
  __shared__ typename BlockReduceD::TempStorage temp;
  const size_t buckets = (n + bucket - 1) / bucket;
  for (size_t b = blockIdx.x; b < buckets; b += gridDim.x) {
    const size_t begin = b * bucket;
    const size_t end = begin + bucket < n ? begin + bucket : n;
    double squares = 0.0;
    for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const double d = static_cast<double>(x[i]);
      squares += d * d;
    }
    const double total = BlockReduceD(temp).Sum(squares);
    if (threadIdx.x == 0) {
      const double root = sqrt(total);
      const float norm = static_cast<float>(root < static_cast<double>(FLT_MAX)
                                                ? root
                                                : static_cast<double>(FLT_MAX));
      norms_out[b] = norm;
      const uint32_t bits = FloatBits(norm);
      for (int k = 0; k < 4; ++k) header[4 * b + k] = static_cast<uint8_t>(bits >> (8 * k));
    }
    __syncthreads();
  }
}

__global__ void QsgdCodeKernel(const float* __restrict__ x, size_t n, size_t bucket,
                               const float* __restrict__ norms, uint32_t quantum_num,
                               uint32_t level_bits, CounterRandom random,
                               uint8_t* __restrict__ packed, Feedback fb) {
  const size_t groups = (n + 7) / 8;
  for (size_t g = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<size_t>(gridDim.x) * blockDim.x) {
    QsgdEncodeGroup(x, n, g, bucket, norms, quantum_num, level_bits, random, packed,
                    [&](size_t i, float c, float decoded) { fb.Update(i, c, decoded); });
  }
}

__global__ void QsgdDecodeKernel(const uint8_t* __restrict__ payload, size_t n, size_t bucket,
                                 uint32_t quantum_num, uint32_t level_bits,
                                 float* __restrict__ out, DeviceStats* stats) {
  const size_t groups = (n + 7) / 8;
  for (size_t g = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<size_t>(gridDim.x) * blockDim.x) {
    if (!QsgdDecodeGroup(payload, n, g, bucket, quantum_num, level_bits, out)) {
      RecordError(stats, kBadLevel);
    }
  }
}

// ------------------------------------------------------------------------------------------
// terngrad: 4 codes a byte, one byte a thread.

__global__ void TernEncodeKernel(const float* __restrict__ x, size_t n, float clip, float scale,
                                 CounterRandom random, uint8_t* __restrict__ codes, Feedback fb) {
  const size_t bytes = (n + 3) / 4;
  for (size_t g = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; g < bytes;
       g += static_cast<size_t>(gridDim.x) * blockDim.x) {
    codes[g] = TernEncodeByte(x, n, g, clip, scale, random,
                              [&](size_t i, float c, float decoded) { fb.Update(i, c, decoded); });
  }
}

__global__ void TernDecodeKernel(const uint8_t* __restrict__ codes, size_t n, float scale,
                                 float* __restrict__ out, DeviceStats* stats) {
  const size_t bytes = (n + 3) / 4;
  for (size_t g = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; g < bytes;
       g += static_cast<size_t>(gridDim.x) * blockDim.x) {
    if (!TernDecodeByte(codes[g], n, g, scale, out)) RecordError(stats, kBadTernary);
  }
}

// ------------------------------------------------------------------------------------------
// natural: one byte per element.

__global__ void NaturalEncodeKernel(const float* __restrict__ x, size_t n, uint32_t exponent_low,
                                    CounterRandom random, uint8_t* __restrict__ out, Feedback fb) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float v = x[i];
    const uint8_t code = NaturalCode(v, exponent_low, RandomBits(random, static_cast<uint32_t>(i)));
    out[i] = code;
    fb.Update(i, v, NaturalValue(code, exponent_low));
  }
}

__global__ void NaturalDecodeKernel(const uint8_t* __restrict__ codes, size_t n,
                                    uint32_t exponent_low, float* __restrict__ out,
                                    DeviceStats* stats) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint8_t code = codes[i];
    if (!NaturalCodeValid(code, exponent_low)) {
      RecordError(stats, kBadNatural);
      out[i] = 0.0f;
      continue;
    }
    out[i] = NaturalValue(code, exponent_low);
  }
}

// ------------------------------------------------------------------------------------------
// randomk: the indices come from the host (the CPU codec draws them with a sequential
// generator); values gathered, optionally scaled by the stratum size.

__global__ void RandomkGatherKernel(const float* __restrict__ x, const uint32_t* __restrict__ idx,
                                    const uint32_t* __restrict__ sizes, size_t k, bool scale,
                                    uint8_t* __restrict__ values, Feedback fb,
                                    DeviceStats* stats) {
  for (size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; j < k;
       j += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint32_t i = idx[j];
    const float c = x[i];
    const float v = scale ? c * static_cast<float>(sizes[j]) : c;
    if (!IsFiniteFloat(v)) RecordError(stats, kNonFinitePayload);  // x * n/k overflowed
    reinterpret_cast<float*>(values)[j] = v;
    fb.Update(i, c, v);
  }
}

__global__ void ScatterValuesKernel(const uint8_t* __restrict__ values,
                                    const uint32_t* __restrict__ idx, size_t k,
                                    float* __restrict__ out, DeviceStats* stats) {
  for (size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; j < k;
       j += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t b = 0;
    for (int q = 0; q < 4; ++q) b |= static_cast<uint32_t>(values[4 * j + q]) << (8 * q);
    const float v = BitsToFloat(b);
    if (!IsFiniteFloat(v)) RecordError(stats, kNonFinitePayload);
    out[idx[j]] = v;
  }
}

__global__ void WriteU32PairKernel(uint8_t* out, uint32_t a, uint32_t b) {
  for (int q = 0; q < 4; ++q) {
    out[q] = static_cast<uint8_t>(a >> (8 * q));
    out[4 + q] = static_cast<uint8_t>(b >> (8 * q));
  }
}

// ------------------------------------------------------------------------------------------
// topk: radix select of the k-th largest |x| bit pattern, 8 bits a pass from the top.

struct RadixState {
  uint32_t prefix;  // the bits of the threshold found so far
  uint32_t need;    // how many of the elements matching prefix are still to be taken
};

__global__ void RadixHistogramKernel(const float* __restrict__ x, size_t n, int shift,
                                     const RadixState* state, uint32_t* __restrict__ hist) {
  __shared__ uint32_t local[256];
  for (int b = threadIdx.x; b < 256; b += blockDim.x) local[b] = 0;
  __syncthreads();
  const uint32_t prefix = state->prefix;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint32_t a = FloatBits(x[i]) & 0x7fffffffu;
    if (RadixMatches(a, prefix, shift)) atomicAdd(&local[(a >> shift) & 255u], 1u);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < 256; b += blockDim.x) {
    if (local[b] != 0) atomicAdd(&hist[b], local[b]);
  }
}

__global__ void RadixSelectDigitKernel(const uint32_t* __restrict__ hist, int shift,
                                       RadixState* state) {
  RadixSelectDigit(hist, shift, &state->prefix, &state->need);
}

// keep[i] for topk: |x| > threshold, or == threshold among the first `ties` such elements
// (tie_rank = exclusive count of equal elements before i), as the CPU codec keeps them.
__global__ void TopkFlagsKernel(const float* __restrict__ x, size_t n, const RadixState* state,
                                const uint32_t* __restrict__ tie_rank, uint32_t* __restrict__ flags,
                                bool ties_pass) {
  const uint32_t t = state->prefix;
  const uint32_t ties = state->need;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint32_t a = FloatBits(x[i]) & 0x7fffffffu;
    flags[i] = ties_pass ? (a == t ? 1u : 0u)
                         : ((a > t || (a == t && tie_rank[i] < ties)) ? 1u : 0u);
  }
}

__global__ void ThresholdFlagsKernel(const float* __restrict__ x, size_t n, uint32_t t,
                                     uint32_t* __restrict__ flags) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    flags[i] = (FloatBits(x[i]) & 0x7fffffffu) >= t ? 1u : 0u;
  }
}

__global__ void CountAtLeastKernel(const float* __restrict__ x, size_t n, uint32_t t,
                                   unsigned long long* count) {
  using BlockReduceL = cub::BlockReduce<unsigned long long, kThreads>;
  __shared__ typename BlockReduceL::TempStorage temp;
  unsigned long long c = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    c += (FloatBits(x[i]) & 0x7fffffffu) >= t ? 1u : 0u;
  }
  const unsigned long long total = BlockReduceL(temp).Sum(c);
  if (threadIdx.x == 0) atomicAdd(count, total);
}

// Writes kept values and indices in index order; the memory forgets what was sent: residual
// r = c - c = 0, dgc_momentum u = v = 0 at sent coordinates.
__global__ void CompactKernel(const float* __restrict__ x, size_t n,
                              const uint32_t* __restrict__ flags, const uint32_t* __restrict__ pos,
                              uint8_t* __restrict__ values, uint32_t* __restrict__ idx,
                              Feedback fb, float* __restrict__ dgc_u, float* __restrict__ dgc_v) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    if (!flags[i]) continue;
    const float c = x[i];
    const uint32_t j = pos[i];
    reinterpret_cast<float*>(values)[j] = c;
    idx[j] = static_cast<uint32_t>(i);
    fb.Update(i, c, c);
    if (dgc_u != nullptr) {
      dgc_u[i] = 0.0f;
      dgc_v[i] = 0.0f;
    }
  }
}

__global__ void GatherAbsBitsKernel(const float* __restrict__ x, const uint32_t* __restrict__ idx,
                                    size_t s, uint32_t* __restrict__ out) {
  for (size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; j < s;
       j += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[j] = FloatBits(x[idx[j]]) & 0x7fffffffu;
  }
}

// ---- sparse index sections (sparse_format.h): deltas, their sizes, the three writers ----

__global__ void DeltaStatsKernel(const uint32_t* __restrict__ idx, size_t k,
                                 uint32_t* __restrict__ varint_len, DeviceStats* stats) {
  using BlockReduceL = cub::BlockReduce<unsigned long long, kThreads>;
  using BlockReduceU = cub::BlockReduce<unsigned int, kThreads>;
  __shared__ union {
    typename BlockReduceL::TempStorage l;
    typename BlockReduceU::TempStorage u;
  } temp;
  unsigned int max_delta = 0;
  unsigned long long bytes = 0;
  for (size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; j < k;
       j += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint32_t d = IndexDelta(idx, j);
    max_delta = d > max_delta ? d : max_delta;
    const uint32_t len = VarintLength(d);
    varint_len[j] = len;
    bytes += len;
  }
  const unsigned int m = BlockReduceU(temp.u).Reduce(max_delta, MaxOp());
  __syncthreads();
  const unsigned long long b = BlockReduceL(temp.l).Sum(bytes);
  if (threadIdx.x == 0) {
    atomicMax(&stats->max_abs_bits, m);  // reused: the largest delta
    atomicAdd(&stats->negative_count, b);  // reused: the varint section size
  }
}

__global__ void BitPackDeltasKernel(const uint32_t* __restrict__ idx, size_t k, uint32_t width,
                                    uint32_t* __restrict__ words) {
  for (size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; j < k;
       j += static_cast<size_t>(gridDim.x) * blockDim.x) {
    size_t word;
    uint32_t low, high;
    BitPackDeltaWords(j, width, IndexDelta(idx, j), &word, &low, &high);
    atomicOr(&words[word], low);
    if (high != 0) atomicOr(&words[word + 1], high);
  }
}

__global__ void VarintDeltasKernel(const uint32_t* __restrict__ idx, size_t k,
                                   const uint32_t* __restrict__ offsets, uint8_t* __restrict__ out) {
  for (size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; j < k;
       j += static_cast<size_t>(gridDim.x) * blockDim.x) {
    WriteVarint(out + offsets[j], IndexDelta(idx, j));
  }
}

__global__ void WriteSparseHeaderKernel(uint8_t* out, uint8_t encoding, uint8_t width, uint32_t n,
                                        uint32_t k, uint32_t index_bytes) {
  out[0] = 1;
  out[1] = encoding;
  out[2] = width;
  out[3] = 0;
  for (int q = 0; q < 4; ++q) {
    out[4 + q] = static_cast<uint8_t>(n >> (8 * q));
    out[8 + q] = static_cast<uint8_t>(k >> (8 * q));
    out[12 + q] = static_cast<uint8_t>(index_bytes >> (8 * q));
  }
}

// Decodes an index section in one thread (sequential by nature for varints; k is small for
// sparse codecs), validating as sparse_format.cc does.
__global__ void ReadIndicesKernel(const uint8_t* __restrict__ data, size_t bytes, size_t k,
                                  size_t n, uint8_t encoding, uint8_t width,
                                  uint32_t* __restrict__ idx, DeviceStats* stats) {
  uint64_t next = 0;
  if (encoding == 0) {
    for (size_t j = 0; j < k; ++j) {
      uint32_t v = 0;
      for (int q = 0; q < 4; ++q) v |= static_cast<uint32_t>(data[4 * j + q]) << (8 * q);
      if (v < next || v >= n) {
        RecordError(stats, kBadIndex);
        return;
      }
      idx[j] = v;
      next = static_cast<uint64_t>(v) + 1;
    }
  } else if (encoding == 1) {
    uint64_t bit = 0;
    for (size_t j = 0; j < k; ++j) {
      uint64_t d = 0;
      for (uint32_t b = 0; b < width; ++b, ++bit) {
        d |= static_cast<uint64_t>((data[bit / 8] >> (bit % 8)) & 1u) << b;
      }
      const uint64_t i = next + d;
      if (i >= n) {
        RecordError(stats, kBadIndex);
        return;
      }
      idx[j] = static_cast<uint32_t>(i);
      next = i + 1;
    }
  } else {
    size_t p = 0;
    for (size_t j = 0; j < k; ++j) {
      uint64_t d = 0;
      int shift = 0;
      while (true) {
        if (p == bytes || shift > 28) {
          RecordError(stats, kIndexSectionSize);
          return;
        }
        const uint8_t b = data[p++];
        d |= static_cast<uint64_t>(b & 0x7fu) << shift;
        if ((b & 0x80u) == 0) break;
        shift += 7;
      }
      const uint64_t i = next + d;
      if (i >= n) {
        RecordError(stats, kBadIndex);
        return;
      }
      idx[j] = static_cast<uint32_t>(i);
      next = i + 1;
    }
    if (p != bytes) RecordError(stats, kIndexSectionSize);
  }
}

// ------------------------------------------------------------------------------------------
// Host side.

size_t KeptCount(double ratio, size_t n) {  // sparse_codecs.cc
  if (n == 0) return 0;
  return std::clamp<size_t>(static_cast<size_t>(std::ceil(ratio * static_cast<double>(n))), 1, n);
}

struct Settings {
  std::string codec;
  // codec parameters
  double ratio = 0.3;
  bool randomk_scale = false;
  uint32_t quantum_num = 127;
  size_t bucket = 128;
  float signum_momentum = 0.9f;
  int onebit_scaling = 0;  // 0 means, 1 l1, 2 none
  // memory
  MemoryKind memory = MemoryKind::kNone;
  float beta = 1.0f, gamma = 1.0f;  // residual
  float default_lr = 0.1f;          // efsignsgd
  float dgc_momentum = 0.9f;
};

CodecParamSpec Param(std::string name, CodecParamSpec::Type type, std::string default_value,
                     std::string help) {
  CodecParamSpec p;
  p.name = std::move(name);
  p.type = type;
  p.default_value = std::move(default_value);
  p.help = std::move(help);
  return p;
}

using PT = CodecParamSpec::Type;

std::vector<CodecParamSpec> CodecSpecs(absl::string_view codec) {
  if (codec == "topk" || codec == "dgc") {
    return {Param("ratio", PT::kDouble, "0.3", "fraction of elements kept")};
  }
  if (codec == "randomk") {
    return {Param("ratio", PT::kDouble, "0.3", "fraction of elements kept"),
            Param("scale", PT::kBool, "false", "multiply values by the stratum size")};
  }
  if (codec == "qsgd") {
    return {Param("quantum_num", PT::kInt, "127", "levels per sign, in [1, 32767]"),
            Param("bucket_size", PT::kInt, "128", "elements per norm")};
  }
  if (codec == "signum") return {Param("momentum", PT::kDouble, "0.9", "momentum, in [0, 1)")};
  if (codec == "onebit") {
    CodecParamSpec p = Param("scaling", PT::kString, "means", "means | l1 | none");
    p.choices = {"means", "l1", "none"};
    return {p};
  }
  return {};
}

std::vector<CodecParamSpec> MemorySpecs(absl::string_view memory) {
  if (memory == "residual") {
    return {Param("beta", PT::kDouble, "1.0", "weight of the residual"),
            Param("gamma", PT::kDouble, "1.0", "weight of the gradient")};
  }
  if (memory == "efsignsgd") return {Param("lr", PT::kDouble, "0.1", "learning rate, > 0")};
  if (memory == "dgc_momentum") return {Param("momentum", PT::kDouble, "0.9", "momentum")};
  return {};
}

class CudaCodecImpl final : public CudaCodec {
 public:
  explicit CudaCodecImpl(Settings s) : s_(std::move(s)) {}
  ~CudaCodecImpl() override {
    cudaFree(stats_);
    cudaFree(radix_);
  }

  absl::Status Init() {
    BC_CUDA_TRY(cudaMalloc(&stats_, sizeof(DeviceStats)));
    BC_CUDA_TRY(cudaMalloc(&radix_, sizeof(RadixState)));
    BC_ASSIGN(host_stats_, host_stats_buffer_.Reserve(sizeof(DeviceStats)));
    return absl::OkStatus();
  }

  absl::string_view name() const override { return s_.codec; }

  size_t MaxEncodedBytes(size_t n) const override {
    const std::string& c = s_.codec;
    if (c == "fp16" || c == "bf16") return 2 * n;
    if (c == "signsgd" || c == "signum") return 4 + (n + 7) / 8;
    if (c == "efsignsgd") return 8 + (n + 7) / 8;
    if (c == "onebit") return 12 + (n + 7) / 8;
    if (c == "qsgd") {
      return 4 + 4 * ((n + s_.bucket - 1) / s_.bucket) +
             (n * (BitsFor(s_.quantum_num) + 1) + 7) / 8;
    }
    if (c == "terngrad") return 8 + (n + 3) / 4;
    if (c == "natural") return 1 + n;
    if (c == "randomk") return kRandomkHeader + 4 * KeptCount(s_.ratio, n);
    if (c == "topk") return kSparseHeader + 8 * KeptCount(s_.ratio, n);
    return kSparseHeader + 8 * n;  // dgc
  }

  void ResetState() override { state_round_ = 0; }

  absl::StatusOr<size_t> Encode(const float* input, size_t n, const CodecContext& ctx,
                                uint8_t* out, size_t capacity, cudaStream_t stream) override {
    const size_t need = MaxEncodedBytes(n);
    if (capacity < need) {
      return absl::InvalidArgumentError(absl::StrCat("cuda codec '", s_.codec,
                                                      "': output buffer has ", capacity,
                                                      " bytes, encoding needs ", need));
    }
    if (n > static_cast<size_t>(INT_MAX)) {
      return absl::InvalidArgumentError(absl::StrCat("cuda codec '", s_.codec, "': ", n,
                                                     " elements exceed the 2^31-1 supported"));
    }
    // A new length restarts the state (momentum, residual), as the CPU's stateful codecs do.
    const float* x = input;
    Feedback fb;
    BC_ASSIGN(x, Compensate(input, n, ctx, stream, &fb));
    state_n_ = n;
    ++state_round_;

    const std::string& c = s_.codec;
    const bool signs = c == "efsignsgd" || c == "onebit";
    const bool squares = c == "terngrad";
    BC_CUDA_TRY(cudaMemsetAsync(stats_, 0, sizeof(DeviceStats), stream));
    if (signs) {
      ReduceStatsKernel<true, false><<<Blocks(n), kThreads, 0, stream>>>(x, n, stats_);
    } else if (squares) {
      ReduceStatsKernel<false, true><<<Blocks(n), kThreads, 0, stream>>>(x, n, stats_);
    } else {
      ReduceStatsKernel<false, false><<<Blocks(n), kThreads, 0, stream>>>(x, n, stats_);
    }
    DeviceStats st;
    BC_ASSIGN(st, ReadStats(stream));
    if (st.max_abs_bits >= 0x7f800000u) return NonFiniteError(x, n, stream);

    const CounterRandom random = MakeCounterRandom(ctx.seed, ctx.key, ctx.round, ctx.node);
    if (c == "fp16" || c == "bf16") {
      auto* dst = reinterpret_cast<uint16_t*>(out);
      if (c == "fp16") {
        HalfEncodeKernel<false><<<Blocks(n), kThreads, 0, stream>>>(x, n, dst, fb);
      } else {
        HalfEncodeKernel<true><<<Blocks(n), kThreads, 0, stream>>>(x, n, dst, fb);
      }
      return Launched(2 * n);
    }
    // The padded bit-packed formats lead with u32 n (sign codecs, qsgd, terngrad).
    if (c == "signsgd" || c == "signum") {
      BC_CUDA_TRY(WriteHeader(out, n, 0.0f, 0.0f, 0, stream));
      SignPackKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, out + 4, 1.0f, -1.0f, fb);
      return Launched(4 + (n + 7) / 8);
    }
    if (c == "efsignsgd") {
      const double sum_abs = st.non_negative_sum - st.negative_sum;
      const float scale = n == 0 ? 0.0f : static_cast<float>(sum_abs / n);
      BC_CUDA_TRY(WriteHeader(out, n, scale, 0.0f, 1, stream));
      SignPackKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, out + 8, scale, -scale, fb);
      return Launched(8 + (n + 7) / 8);
    }
    if (c == "onebit") {
      float clear_value = 1.0f, set_value = -1.0f;
      if (s_.onebit_scaling == 0) {
        const size_t non_negative_count = n - st.negative_count;
        clear_value = non_negative_count == 0
                          ? 0.0f
                          : static_cast<float>(st.non_negative_sum / non_negative_count);
        set_value = st.negative_count == 0
                        ? 0.0f
                        : static_cast<float>(st.negative_sum / st.negative_count);
      } else if (s_.onebit_scaling == 1) {
        clear_value =
            n == 0 ? 0.0f : static_cast<float>((st.non_negative_sum - st.negative_sum) / n);
        set_value = -clear_value;
      }
      BC_CUDA_TRY(WriteHeader(out, n, clear_value, set_value, 2, stream));
      SignPackKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, out + 12, clear_value, set_value,
                                                          fb);
      return Launched(12 + (n + 7) / 8);
    }
    if (c == "qsgd") {
      const size_t buckets = (n + s_.bucket - 1) / s_.bucket;
      float* norms = nullptr;
      BC_ASSIGN(norms, Scratch<float>(norms_, buckets));
      BC_CUDA_TRY(WriteHeader(out, n, 0.0f, 0.0f, 0, stream));
      QsgdNormKernel<<<Blocks(buckets * kThreads), kThreads, 0, stream>>>(x, n, s_.bucket, norms,
                                                                          out + 4);
      const uint32_t level_bits = BitsFor(s_.quantum_num);
      QsgdCodeKernel<<<Blocks((n + 7) / 8), kThreads, 0, stream>>>(
          x, n, s_.bucket, norms, s_.quantum_num, level_bits, random, out + 4 + 4 * buckets, fb);
      return Launched(MaxEncodedBytes(n));
    }
    if (c == "terngrad") {
      const double rms = n == 0 ? 0.0 : std::sqrt(st.sum_of_squares / n);
      const float clip = static_cast<float>(std::min(2.5 * rms, static_cast<double>(FLT_MAX)));
      const float scale = std::min(BitsToFloat(st.max_abs_bits), clip);
      BC_CUDA_TRY(WriteHeader(out, n, scale, 0.0f, 1, stream));
      TernEncodeKernel<<<Blocks((n + 3) / 4), kThreads, 0, stream>>>(x, n, clip, scale, random,
                                                                     out + 8, fb);
      return Launched(8 + (n + 3) / 4);
    }
    if (c == "natural") {
      const uint32_t exponent_low = NaturalExponentLow(st.max_abs_bits >> 23);
      const uint8_t low = static_cast<uint8_t>(exponent_low);
      BC_CUDA_TRY(cudaMemcpyAsync(out, host_byte(low), 1, cudaMemcpyHostToDevice, stream));
      NaturalEncodeKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, exponent_low, random, out + 1,
                                                              fb);
      return Launched(1 + n);
    }
    if (c == "randomk") return EncodeRandomk(x, n, ctx, out, fb, stream);
    if (c == "topk") return EncodeTopk(x, n, out, fb, stream);
    return EncodeDgc(x, n, ctx, out, fb, stream);
  }

  absl::Status Decode(const uint8_t* encoded, size_t bytes, const CodecContext& ctx,
                      float* output, size_t n, cudaStream_t stream) override {
    const std::string& c = s_.codec;
    auto malformed = [&](absl::string_view detail) {
      return absl::InvalidArgumentError(
          absl::StrCat("cuda codec '", c, "': malformed payload: ", detail));
    };
    auto size_is = [&](size_t expected) -> absl::Status {
      if (bytes == expected) return absl::OkStatus();
      return malformed(absl::StrCat(bytes, " bytes for ", n, " elements (expected ", expected, ")"));
    };
    BC_CUDA_TRY(cudaMemsetAsync(stats_, 0, sizeof(DeviceStats), stream));
    if (c == "fp16" || c == "bf16") {
      if (auto s = size_is(2 * n); !s.ok()) return s;
      const auto* src = reinterpret_cast<const uint16_t*>(encoded);
      if (c == "fp16") {
        HalfDecodeKernel<false><<<Blocks(n), kThreads, 0, stream>>>(src, n, output, stats_);
      } else {
        HalfDecodeKernel<true><<<Blocks(n), kThreads, 0, stream>>>(src, n, output, stats_);
      }
      return CheckDecode(stream);
    }
    // Formats leading with u32 n: check it against the output length first.
    auto check_n = [&](size_t header_bytes) -> absl::Status {
      BC_CUDA_TRY(cudaMemcpyAsync(host_stats_, encoded, header_bytes, cudaMemcpyDeviceToHost,
                                  stream));
      BC_CUDA_TRY(cudaStreamSynchronize(stream));
      const uint32_t msg_n = GetU32(static_cast<const uint8_t*>(host_stats_));
      if (msg_n != n) {
        return malformed(absl::StrCat("message holds ", msg_n, " elements, expected ", n));
      }
      return absl::OkStatus();
    };
    if (c == "signsgd" || c == "signum" || c == "efsignsgd" || c == "onebit") {
      const size_t floats = c == "efsignsgd" ? 1 : (c == "onebit" ? 2 : 0);
      const size_t header = 4 + 4 * floats;
      if (auto s = size_is(header + (n + 7) / 8); !s.ok()) return s;
      if (auto s = check_n(header); !s.ok()) return s;
      float values[2] = {1.0f, -1.0f};
      if (floats > 0) {
        std::memcpy(values, static_cast<const uint8_t*>(host_stats_) + 4, 4 * floats);
        if (floats == 1) values[1] = -values[0];
        if (!std::isfinite(values[0]) || values[0] < 0.0f || !std::isfinite(values[1]) ||
            -values[1] < 0.0f) {
          return malformed("a header value is not finite or has the wrong sign");
        }
      }
      SignPaddingKernel<<<1, 1, 0, stream>>>(encoded + header, n, stats_);
      SignUnpackKernel<<<Blocks(n), kThreads, 0, stream>>>(encoded + header, n, values[0],
                                                           values[1], output);
      return CheckDecode(stream);
    }
    if (c == "qsgd") {
      if (auto s = size_is(MaxEncodedBytes(n)); !s.ok()) return s;
      if (auto s = check_n(4); !s.ok()) return s;
      QsgdDecodeKernel<<<Blocks((n + 7) / 8), kThreads, 0, stream>>>(
          encoded + 4, n, s_.bucket, s_.quantum_num, BitsFor(s_.quantum_num), output, stats_);
      return CheckDecode(stream);
    }
    if (c == "terngrad") {
      if (auto s = size_is(8 + (n + 3) / 4); !s.ok()) return s;
      if (auto s = check_n(8); !s.ok()) return s;
      float scale;
      std::memcpy(&scale, static_cast<const uint8_t*>(host_stats_) + 4, 4);
      if (!std::isfinite(scale) || scale < 0.0f) return malformed("scale is not finite or negative");
      TernDecodeKernel<<<Blocks((n + 3) / 4), kThreads, 0, stream>>>(encoded + 8, n, scale,
                                                                      output, stats_);
      return CheckDecode(stream);
    }
    if (c == "natural") {
      if (auto s = size_is(1 + n); !s.ok()) return s;
      BC_CUDA_TRY(cudaMemcpyAsync(host_stats_, encoded, 1, cudaMemcpyDeviceToHost, stream));
      BC_CUDA_TRY(cudaStreamSynchronize(stream));
      {
        const uint32_t exponent_low = *static_cast<uint8_t*>(host_stats_);
        if (exponent_low < 1 || exponent_low > 254) {
          return malformed(absl::StrCat("exponent_low ", exponent_low, " outside 1..254"));
        }
        NaturalDecodeKernel<<<Blocks(n), kThreads, 0, stream>>>(encoded + 1, n, exponent_low,
                                                                output, stats_);
      }
      return CheckDecode(stream);
    }
    if (c == "randomk") {
      const size_t k = KeptCount(s_.ratio, n);
      if (auto s = size_is(kRandomkHeader + 4 * k); !s.ok()) return s;
      BC_CUDA_TRY(cudaMemcpyAsync(host_stats_, encoded, 8, cudaMemcpyDeviceToHost, stream));
      BC_CUDA_TRY(cudaStreamSynchronize(stream));
      uint32_t header[2];
      std::memcpy(header, host_stats_, 8);
      if (header[0] != n || header[1] != k) {
        return malformed(absl::StrCat("header says n = ", header[0], ", k = ", header[1],
                                      "; expected n = ", n, ", k = ", k));
      }
      uint32_t* idx = nullptr;
      BC_ASSIGN(idx, UploadRandomIndices(n, k, ctx, stream, nullptr));
      BC_CUDA_TRY(cudaMemsetAsync(output, 0, 4 * n, stream));
      ScatterValuesKernel<<<Blocks(k), kThreads, 0, stream>>>(encoded + kRandomkHeader, idx, k,
                                                             output, stats_);
      return CheckDecode(stream);
    }
    // topk, dgc: the sparse message.
    if (bytes < kSparseHeader) return malformed(absl::StrCat(bytes, " bytes, shorter than the header"));
    BC_CUDA_TRY(cudaMemcpyAsync(host_stats_, encoded, kSparseHeader, cudaMemcpyDeviceToHost, stream));
    BC_CUDA_TRY(cudaStreamSynchronize(stream));
    const auto* h = static_cast<const uint8_t*>(host_stats_);
    const uint32_t msg_n = GetU32(h + 4), k = GetU32(h + 8), index_bytes = GetU32(h + 12);
    if (h[0] != 1) return malformed(absl::StrCat("unknown version ", h[0]));
    if (msg_n != n) return malformed(absl::StrCat("message holds ", msg_n, " elements, expected ", n));
    if (k > n) return malformed(absl::StrCat("k = ", k, " > n = ", n));
    if (c == "topk" && k != KeptCount(s_.ratio, n)) {
      return malformed(absl::StrCat("k = ", k, ", expected ", KeptCount(s_.ratio, n)));
    }
    if (bytes != kSparseHeader + 4ull * k + index_bytes) {
      return malformed(absl::StrCat(bytes, " bytes, header says ", kSparseHeader + 4ull * k + index_bytes));
    }
    const uint8_t encoding = h[1], width = h[2];
    if (encoding > 2) return malformed(absl::StrCat("unknown index encoding ", encoding));
    if (encoding == 0 && index_bytes != 4ull * k) return malformed("raw index section size");
    if (encoding == 1 && (width > 32 || index_bytes != PackedBytes(k, width))) {
      return malformed("bit-packed index section size or width");
    }
    uint32_t* idx = nullptr;
    BC_ASSIGN(idx, Scratch<uint32_t>(indices_, std::max<size_t>(k, 1)));
    ReadIndicesKernel<<<1, 1, 0, stream>>>(encoded + kSparseHeader + 4ull * k, index_bytes, k, n,
                                           encoding, width, idx, stats_);
    BC_CUDA_TRY(cudaMemsetAsync(output, 0, 4 * n, stream));
    ScatterValuesKernel<<<Blocks(k), kThreads, 0, stream>>>(encoded + kSparseHeader, idx, k,
                                                           output, stats_);
    return CheckDecode(stream);
  }

 private:
  template <typename U>
  absl::StatusOr<U*> Scratch(DeviceBuffer& buffer, size_t count) {
    void* p = nullptr;
    BC_ASSIGN(p, buffer.Reserve(std::max<size_t>(count, 1) * sizeof(U)));
    return static_cast<U*>(p);
  }

  const uint8_t* host_byte(uint8_t v) {
    header_scratch_[0] = v;
    return header_scratch_;
  }

  // Writes u32 n and `floats` floats (0..2) at out. The source is pageable, so cudaMemcpyAsync
  // has staged it before returning and the scratch may be reused at once.
  cudaError_t WriteHeader(uint8_t* out, size_t n, float a, float b, int floats,
                          cudaStream_t stream) {
    PutU32(header_scratch_, static_cast<uint32_t>(n));
    std::memcpy(header_scratch_ + 4, &a, 4);
    std::memcpy(header_scratch_ + 8, &b, 4);
    return cudaMemcpyAsync(out, header_scratch_, 4 + 4 * floats, cudaMemcpyHostToDevice, stream);
  }

  absl::StatusOr<size_t> Launched(size_t bytes) {
    BC_CUDA_TRY(cudaGetLastError());
    return bytes;
  }

  absl::StatusOr<DeviceStats> ReadStats(cudaStream_t stream) {
    BC_CUDA_TRY(cudaGetLastError());
    BC_CUDA_TRY(cudaMemcpyAsync(host_stats_, stats_, sizeof(DeviceStats), cudaMemcpyDeviceToHost,
                                stream));
    BC_CUDA_TRY(cudaStreamSynchronize(stream));
    DeviceStats st;
    std::memcpy(&st, host_stats_, sizeof(st));
    return st;
  }

  absl::Status CheckDecode(cudaStream_t stream) {
    DeviceStats st;
    BC_ASSIGN(st, ReadStats(stream));
    if (st.error != kFine) {
      return absl::InvalidArgumentError(absl::StrCat("cuda codec '", s_.codec,
                                                     "': malformed payload: ",
                                                     DecodeErrorText(st.error)));
    }
    return absl::OkStatus();
  }

  absl::Status NonFiniteError(const float* x, size_t n, cudaStream_t stream) {
    const unsigned int none = UINT_MAX;
    BC_CUDA_TRY(cudaMemcpyAsync(&stats_->first_bad, &none, sizeof(none), cudaMemcpyHostToDevice,
                                stream));
    FirstNonFiniteKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, stats_);
    DeviceStats st;
    BC_ASSIGN(st, ReadStats(stream));
    return absl::InvalidArgumentError(absl::StrCat("codec '", s_.codec, "' input element ",
                                                   st.first_bad, " of ", n,
                                                   " is NaN or Inf"));
  }

  // Runs the fused memory's compensation; returns the buffer to encode.
  absl::StatusOr<const float*> Compensate(const float* g, size_t n, const CodecContext& ctx,
                                          cudaStream_t stream, Feedback* fb) {
    const bool first = state_round_ == 0 || state_n_ != n;
    const unsigned blocks = Blocks(n);
    if (s_.codec == "signum") {
      float* m = nullptr;
      BC_ASSIGN(m, Scratch<float>(state_a_, n));
      SignumBlendKernel<<<blocks, kThreads, 0, stream>>>(g, m, n, 1.0f - s_.signum_momentum,
                                                        s_.signum_momentum, first);
      return m;
    }
    switch (s_.memory) {
      case MemoryKind::kNone:
        return g;
      case MemoryKind::kResidual: {
        float* r = nullptr;
        BC_ASSIGN(r, Scratch<float>(state_a_, n));
        if (first) BC_CUDA_TRY(cudaMemsetAsync(r, 0, 4 * n, stream));
        ResidualCompensateKernel<<<blocks, kThreads, 0, stream>>>(g, r, n, s_.beta, s_.gamma);
        fb->kind = MemoryKind::kResidual;
        fb->state = r;
        return r;
      }
      case MemoryKind::kEfSignSgd: {
        float* e = nullptr;
        BC_ASSIGN(e, Scratch<float>(state_a_, n));
        const float lr = ctx.learning_rate > 0.0f ? ctx.learning_rate : s_.default_lr;
        EfSignCompensateKernel<<<blocks, kThreads, 0, stream>>>(g, e, n, 1.0f / lr, first);
        fb->kind = MemoryKind::kEfSignSgd;
        fb->state = e;
        fb->lr = lr;
        return e;
      }
      case MemoryKind::kDgcMomentum: {
        float *u = nullptr, *v = nullptr;
        BC_ASSIGN(u, Scratch<float>(state_a_, n));
        BC_ASSIGN(v, Scratch<float>(state_b_, n));
        if (first) {
          BC_CUDA_TRY(cudaMemsetAsync(u, 0, 4 * n, stream));
          BC_CUDA_TRY(cudaMemsetAsync(v, 0, 4 * n, stream));
        }
        DgcMomentumKernel<<<blocks, kThreads, 0, stream>>>(g, u, v, n, s_.dgc_momentum);
        return v;
      }
    }
    return g;
  }

  // The randomk indices of (n, k, ctx), drawn on the host exactly as sparse_codecs.cc does.
  absl::StatusOr<uint32_t*> UploadRandomIndices(size_t n, size_t k, const CodecContext& ctx,
                                                cudaStream_t stream, uint32_t** sizes_out) {
    void* host = nullptr;
    BC_ASSIGN(host, host_indices_.Reserve(8 * std::max<size_t>(k, 1)));
    auto* idx = static_cast<uint32_t*>(host);
    uint32_t* sizes = idx + k;
    RandomkIndices(n, k, ctx, idx, sizes);
    uint32_t* d = nullptr;
    BC_ASSIGN(d, Scratch<uint32_t>(indices_, 2 * k));
    BC_CUDA_TRY(cudaMemcpyAsync(d, idx, 8 * k, cudaMemcpyHostToDevice, stream));
    if (sizes_out != nullptr) *sizes_out = d + k;
    return d;
  }

  absl::StatusOr<size_t> EncodeRandomk(const float* x, size_t n, const CodecContext& ctx,
                                       uint8_t* out, Feedback fb, cudaStream_t stream) {
    const size_t k = KeptCount(s_.ratio, n);
    WriteU32PairKernel<<<1, 1, 0, stream>>>(out, static_cast<uint32_t>(n),
                                            static_cast<uint32_t>(k));
    if (k > 0) {
      uint32_t* sizes = nullptr;
      uint32_t* idx = nullptr;
      BC_ASSIGN(idx, UploadRandomIndices(n, k, ctx, stream, &sizes));
      BC_CUDA_TRY(cudaMemsetAsync(stats_, 0, sizeof(DeviceStats), stream));
      RandomkGatherKernel<<<Blocks(k), kThreads, 0, stream>>>(x, idx, sizes, k, s_.randomk_scale,
                                                             out + kRandomkHeader, fb, stats_);
      // Also waits for the index upload, whose host buffer the next call reuses.
      DeviceStats st;
      BC_ASSIGN(st, ReadStats(stream));
      if (st.error != kFine) {
        return absl::InvalidArgumentError(
            "codec 'randomk': a value times its scale n/k overflows fp32 (|x| near 3.4e38)");
      }
    }
    return Launched(kRandomkHeader + 4 * k);
  }

  // Compacts the flagged elements of x into out (values) and writes the header and index
  // section; k is the number of flags set.
  absl::StatusOr<size_t> FinishSparse(const float* x, size_t n, size_t k, uint32_t* flags,
                                      uint8_t* out, Feedback fb, float* dgc_u, float* dgc_v,
                                      cudaStream_t stream) {
    uint32_t *pos = nullptr, *idx = nullptr, *lens = nullptr;
    BC_ASSIGN(pos, Scratch<uint32_t>(scan_, n));
    BC_ASSIGN(idx, Scratch<uint32_t>(indices_, std::max<size_t>(k, 1)));
    BC_ASSIGN(lens, Scratch<uint32_t>(lengths_, std::max<size_t>(k, 1)));
    BC_CUDA_TRY(ExclusiveSum(flags, pos, n, stream));
    CompactKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, flags, pos, out + kSparseHeader, idx,
                                                      fb, dgc_u, dgc_v);
    BC_CUDA_TRY(cudaMemsetAsync(stats_, 0, sizeof(DeviceStats), stream));
    DeltaStatsKernel<<<Blocks(k), kThreads, 0, stream>>>(idx, k, lens, stats_);
    DeviceStats st;
    BC_ASSIGN(st, ReadStats(stream));
    // The plan: the smallest of raw, bit-packed, varint; ties to the earlier (sparse_format.cc).
    const IndexSectionPlan plan =
        ChooseIndexPlan(k, st.max_abs_bits, static_cast<size_t>(st.negative_count));
    const uint8_t encoding = plan.encoding, plan_width = plan.width;
    const uint32_t width = plan.width;
    const size_t index_bytes = plan.bytes;
    uint8_t* section = out + kSparseHeader + 4 * k;
    if (encoding == 0) {
      BC_CUDA_TRY(cudaMemcpyAsync(section, idx, 4 * k, cudaMemcpyDeviceToDevice, stream));
    } else if (encoding == 1) {
      BC_CUDA_TRY(cudaMemsetAsync(section, 0, (index_bytes + 3) / 4 * 4, stream));
      if (width > 0) {
        BitPackDeltasKernel<<<Blocks(k), kThreads, 0, stream>>>(
            idx, k, width, reinterpret_cast<uint32_t*>(section));
      }
    } else {
      BC_CUDA_TRY(ExclusiveSum(lens, pos, k, stream));  // pos is free again: k <= n
      VarintDeltasKernel<<<Blocks(k), kThreads, 0, stream>>>(idx, k, pos, section);
    }
    WriteSparseHeaderKernel<<<1, 1, 0, stream>>>(out, encoding, plan_width,
                                                 static_cast<uint32_t>(n),
                                                 static_cast<uint32_t>(k),
                                                 static_cast<uint32_t>(index_bytes));
    return Launched(kSparseHeader + 4 * k + index_bytes);
  }

  cudaError_t ExclusiveSum(const uint32_t* in, uint32_t* out, size_t count, cudaStream_t stream) {
    if (count == 0) return cudaSuccess;
    size_t temp_bytes = 0;
    cudaError_t rc = cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, in, out,
                                                   static_cast<int>(count), stream);
    if (rc != cudaSuccess) return rc;
    auto temp = cub_temp_.Reserve(temp_bytes);
    if (!temp.ok()) return cudaErrorMemoryAllocation;
    return cub::DeviceScan::ExclusiveSum(*temp, temp_bytes, in, out, static_cast<int>(count),
                                         stream);
  }

  absl::StatusOr<size_t> EncodeTopk(const float* x, size_t n, uint8_t* out, Feedback fb,
                                    cudaStream_t stream) {
    const size_t k = KeptCount(s_.ratio, n);
    if (k == 0) {
      WriteSparseHeaderKernel<<<1, 1, 0, stream>>>(out, 0, 0, 0, 0, 0);
      return Launched(kSparseHeader);
    }
    uint32_t *hist = nullptr, *flags = nullptr, *ranks = nullptr;
    BC_ASSIGN(hist, Scratch<uint32_t>(hist_, 256));
    BC_ASSIGN(flags, Scratch<uint32_t>(flags_, n));
    BC_ASSIGN(ranks, Scratch<uint32_t>(ranks_, n));
    const RadixState initial{0u, static_cast<uint32_t>(k)};
    std::memcpy(header_scratch_, &initial, sizeof(initial));
    BC_CUDA_TRY(cudaMemcpyAsync(radix_, header_scratch_, sizeof(initial), cudaMemcpyHostToDevice,
                                stream));
    for (int shift = 24; shift >= 0; shift -= 8) {
      BC_CUDA_TRY(cudaMemsetAsync(hist, 0, 256 * sizeof(uint32_t), stream));
      RadixHistogramKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, shift, radix_, hist);
      RadixSelectDigitKernel<<<1, 1, 0, stream>>>(hist, shift, radix_);
    }
    // Ties at the threshold: rank them in index order, keep the first `need`.
    TopkFlagsKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, radix_, nullptr, flags, true);
    BC_CUDA_TRY(ExclusiveSum(flags, ranks, n, stream));
    TopkFlagsKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, radix_, ranks, flags, false);
    return FinishSparse(x, n, k, flags, out, fb, nullptr, nullptr, stream);
  }

  absl::StatusOr<size_t> EncodeDgc(const float* x, size_t n, const CodecContext& ctx,
                                   uint8_t* out, Feedback fb, cudaStream_t stream) {
    if (n == 0) {
      WriteSparseHeaderKernel<<<1, 1, 0, stream>>>(out, 0, 0, 0, 0, 0);
      return Launched(kSparseHeader);
    }
    // The sample: the same positions as sparse_codecs.cc's SampleAbs.
    const std::vector<uint32_t> positions = DgcSamplePositions(n, ctx);
    const size_t s = positions.size();
    void* host = nullptr;
    BC_ASSIGN(host, host_indices_.Reserve(8 * s));
    auto* sample_idx = static_cast<uint32_t*>(host);
    auto* sample = sample_idx + s;
    std::copy(positions.begin(), positions.end(), sample_idx);
    uint32_t* d = nullptr;
    BC_ASSIGN(d, Scratch<uint32_t>(indices_, 2 * s));
    BC_CUDA_TRY(cudaMemcpyAsync(d, sample_idx, 4 * s, cudaMemcpyHostToDevice, stream));
    GatherAbsBitsKernel<<<Blocks(s), kThreads, 0, stream>>>(x, d, s, d + s);
    BC_CUDA_TRY(cudaMemcpyAsync(sample, d + s, 4 * s, cudaMemcpyDeviceToHost, stream));
    BC_CUDA_TRY(cudaStreamSynchronize(stream));
    std::vector<uint32_t> values(sample, sample + s);
    const size_t m = KeptCount(s_.ratio, s);
    std::nth_element(values.begin(), values.begin() + (m - 1), values.end(), std::greater<>());
    float threshold = BitsToFloat(values[m - 1]);
    const float kMinPositive = std::numeric_limits<float>::denorm_min();
    threshold = std::max(threshold, kMinPositive);
    const double target = s_.ratio * static_cast<double>(n);
    size_t count = 0;
    BC_ASSIGN(count, CountAtLeast(x, n, threshold, stream));
    for (int step = 0; step < 10; ++step) {
      if (count > 1.3 * target) {
        threshold *= 1.3f;
      } else if (count < 0.7 * target) {
        threshold = std::max(threshold * 0.7f, kMinPositive);
      } else {
        break;
      }
      BC_ASSIGN(count, CountAtLeast(x, n, threshold, stream));
    }
    uint32_t* flags = nullptr;
    BC_ASSIGN(flags, Scratch<uint32_t>(flags_, n));
    ThresholdFlagsKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, FloatBits(threshold) & 0x7fffffffu,
                                                             flags);
    float* u = s_.memory == MemoryKind::kDgcMomentum ? state_a_.as<float>() : nullptr;
    float* v = s_.memory == MemoryKind::kDgcMomentum ? state_b_.as<float>() : nullptr;
    return FinishSparse(x, n, count, flags, out, fb, u, v, stream);
  }

  absl::StatusOr<size_t> CountAtLeast(const float* x, size_t n, float threshold,
                                      cudaStream_t stream) {
    BC_CUDA_TRY(cudaMemsetAsync(stats_, 0, sizeof(DeviceStats), stream));
    CountAtLeastKernel<<<Blocks(n), kThreads, 0, stream>>>(
        x, n, FloatBits(threshold) & 0x7fffffffu, &stats_->negative_count);
    DeviceStats st;
    BC_ASSIGN(st, ReadStats(stream));
    return static_cast<size_t>(st.negative_count);
  }

  Settings s_;
  DeviceStats* stats_ = nullptr;
  RadixState* radix_ = nullptr;
  HostBuffer host_stats_buffer_;
  void* host_stats_ = nullptr;
  HostBuffer host_indices_;
  uint8_t header_scratch_[16] = {};
  DeviceBuffer state_a_, state_b_, norms_, indices_, lengths_, scan_, flags_, ranks_, hist_,
      cub_temp_;
  size_t state_n_ = 0;
  uint64_t state_round_ = 0;
};

}  // namespace

std::vector<std::string> CudaCodecNames() { return GpuCodecNames(); }

bool CudaMemorySupported(absl::string_view codec, absl::string_view memory) {
  return GpuMemorySupported(codec, memory);
}

CudaCodec::~CudaCodec() = default;

absl::StatusOr<std::unique_ptr<CudaCodec>> CudaCodec::Create(absl::string_view codec,
                                                             const CodecParams& params,
                                                             absl::string_view memory,
                                                             const CodecParams& memory_params) {
  const std::vector<std::string> names = CudaCodecNames();
  if (std::find(names.begin(), names.end(), codec) == names.end()) {
    return absl::NotFoundError(absl::StrCat("no CUDA kernels for codec '", codec,
                                            "'; GPU codecs: fp16, bf16, signsgd, efsignsgd, "
                                            "signum, onebit, topk, randomk, qsgd, terngrad, "
                                            "natural, dgc"));
  }
  if (!CudaMemorySupported(codec, memory)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CUDA codec '", codec, "' cannot fuse memory '", memory,
        "' (residual: any codec but signum and dgc; efsignsgd: efsignsgd; dgc_momentum: dgc)"));
  }
  auto p = ValidateParams(absl::StrCat("codec '", codec, "'"), CodecSpecs(codec), params);
  if (!p.ok()) return p.status();
  auto mp = ValidateParams(absl::StrCat("memory '", memory, "'"), MemorySpecs(memory),
                           memory_params);
  if (!mp.ok()) return mp.status();

  Settings s;
  s.codec = std::string(codec);
  ParamReader r(*p);
  if (codec == "topk" || codec == "dgc" || codec == "randomk") s.ratio = r.Double("ratio");
  if (codec == "randomk") s.randomk_scale = r.Bool("scale");
  if (codec == "qsgd") {
    s.quantum_num = static_cast<uint32_t>(r.Int("quantum_num"));
    s.bucket = static_cast<size_t>(r.Int("bucket_size"));
  }
  if (codec == "signum") s.signum_momentum = static_cast<float>(r.Double("momentum"));
  if (codec == "onebit") {
    const std::string scaling = r.String("scaling");
    s.onebit_scaling = scaling == "l1" ? 1 : (scaling == "none" ? 2 : 0);
  }
  if (!r.ok()) return r.status();
  if (!(s.ratio > 0.0 && s.ratio <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("codec '", codec, "': ratio ", s.ratio,
                                                   " is outside (0, 1]"));
  }
  if (s.quantum_num < 1 || s.quantum_num > 32767 || s.bucket < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "codec 'qsgd': quantum_num must be in [1, 32767] and bucket_size >= 1"));
  }
  ParamReader mr(*mp);
  if (memory == "residual") {
    s.memory = MemoryKind::kResidual;
    s.beta = static_cast<float>(mr.Double("beta"));
    s.gamma = static_cast<float>(mr.Double("gamma"));
  } else if (memory == "efsignsgd") {
    s.memory = MemoryKind::kEfSignSgd;
    s.default_lr = static_cast<float>(mr.Double("lr"));
    if (!(s.default_lr > 0.0f)) return absl::InvalidArgumentError("memory 'efsignsgd': lr must be > 0");
  } else if (memory == "dgc_momentum") {
    s.memory = MemoryKind::kDgcMomentum;
    s.dgc_momentum = static_cast<float>(mr.Double("momentum"));
  }
  if (!mr.ok()) return mr.status();
  auto impl = std::make_unique<CudaCodecImpl>(std::move(s));
  if (absl::Status st = impl->Init(); !st.ok()) return st;
  return std::unique_ptr<CudaCodec>(std::move(impl));
}

}  // namespace bytecomp::compress::cuda
