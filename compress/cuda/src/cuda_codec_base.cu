// CudaCodecBase (cuda_codec_base.h): the shared encode steps and the readbacks.
#include "cuda_codec_base.h"

#include <cub/block/block_reduce.cuh>

#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/elementwise.h"

namespace bytecomp::compress::cuda {
namespace {

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
  ForEachLoaded(x, n, [&](size_t, float v) {
    const unsigned int a = FloatBits(v) & 0x7fffffffu;
    max_bits = a > max_bits ? a : max_bits;
    if constexpr (kSigns) AddSignSums(v, &pos, &neg, &neg_count);
    if constexpr (kSquares) {
      const double d = static_cast<double>(v);
      squares += d * d;
    }
  });
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
      atomicAdd(&stats->count, c);
    }
  }
  if constexpr (kSquares) {
    __syncthreads();
    const double s = BlockReduceD(temp.d).Sum(squares);
    if (threadIdx.x == 0) atomicAdd(&stats->sum_of_squares, s);
  }
}

__global__ void FirstNonFiniteKernel(const float* __restrict__ x, size_t n, DeviceStats* stats) {
  for (size_t i = GridStart(); i < n; i += GridStride()) {
    if (!IsFiniteFloat(x[i])) atomicMin(&stats->first_bad, static_cast<unsigned int>(i));
  }
}

}  // namespace

CudaCodecBase::~CudaCodecBase() { cudaFree(stats_); }

absl::Status CudaCodecBase::Init() {
  BC_CUDA_TRY(cudaMalloc(&stats_, sizeof(DeviceStats)));
  return host_stats_.Reserve(sizeof(DeviceStats)).status();
}

absl::StatusOr<const float*> CudaCodecBase::Compensate(const float* g, size_t n,
                                                       const CodecContext& ctx, bool first,
                                                       cudaStream_t stream, Feedback* fb) {
  return memory_.Compensate(g, n, ctx, first, stream, fb);
}

absl::StatusOr<size_t> CudaCodecBase::Encode(const float* input, size_t n, const CodecContext& ctx,
                                             uint8_t* out, size_t capacity, cudaStream_t stream) {
  PreparedInput p;
  BC_ASSIGN(p, PrepareInput(input, n, ctx, capacity, MaxEncodedBytes(n), stream, true));
  return EncodeChecked(p.x, n, ctx, p.stats, p.fb, out, stream);
}

absl::StatusOr<const float*> CudaCodecBase::KeepInput(const PreparedInput& p, size_t n,
                                                      DeviceBuffer& copy, cudaStream_t stream) {
  if (p.fb.state != nullptr) return p.x;
  float* kept = nullptr;
  BC_ASSIGN(kept, copy.Reserve<float>(n));
  BC_CUDA_TRY(cudaMemcpyAsync(kept, p.x, 4 * n, cudaMemcpyDeviceToDevice, stream));
  return kept;
}

absl::Status CudaCodecBase::FinishFusedPass(const float* x, size_t n, cudaStream_t stream) {
  if (!fused_pass_) return absl::OkStatus();
  DeviceStats st;
  BC_ASSIGN(st, ReadStats(stream));
  return CheckFusedStats(st, x, n, stream);
}

absl::Status CudaCodecBase::CheckFusedStats(const DeviceStats& st, const float* x, size_t n,
                                            cudaStream_t stream) {
  if (!fused_pass_ || st.max_abs_bits < 0x7f800000u) return absl::OkStatus();
  return NonFiniteError(x, n, stream);
}

absl::StatusOr<CudaCodecBase::PreparedInput> CudaCodecBase::PrepareInput(
    const float* input, size_t n, const CodecContext& ctx, size_t capacity, size_t need,
    cudaStream_t stream, bool fuse) {
  if (auto s = CheckCapacity(capacity, need); !s.ok()) return s;
  if (n > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda codec '", name_, "': ", n, " elements exceed the 2^31-1 supported"));
  }
  // A new length restarts the state (momentum, residual), as the CPU's stateful codecs do.
  const bool first = rounds_ == 0 || state_n_ != n;
  PreparedInput p;
  BC_ASSIGN(p.x, Compensate(input, n, ctx, first, stream, &p.fb));
  state_n_ = n;
  ++rounds_;

  BC_CUDA_TRY(cudaMemsetAsync(stats_, 0, sizeof(DeviceStats), stream));
  fused_pass_ =
      fuse && FusesReduction() && (p.fb.kind == MemoryKind::kNone || ChecksBeforeMemoryUpdates());
  if (fused_pass_) return p;  // the encode kernels record into the zeroed statistics
  switch (reduction()) {
    case Reduction::kSigns:
      ReduceStatsKernel<true, false><<<ReduceBlocks(n), kThreads, 0, stream>>>(p.x, n, stats_);
      break;
    case Reduction::kSquares:
      ReduceStatsKernel<false, true><<<ReduceBlocks(n), kThreads, 0, stream>>>(p.x, n, stats_);
      break;
    case Reduction::kMaxAbs:
      ReduceStatsKernel<false, false><<<ReduceBlocks(n), kThreads, 0, stream>>>(p.x, n, stats_);
      break;
  }
  BC_ASSIGN(p.stats, ReadStats(stream));
  if (p.stats.max_abs_bits >= 0x7f800000u) return NonFiniteError(p.x, n, stream);
  return p;
}

absl::Status CudaCodecBase::CheckCapacity(size_t capacity, size_t need) const {
  if (capacity >= need) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("cuda codec '", name_, "': output buffer has ",
                                                 capacity, " bytes, encoding needs ", need));
}

absl::StatusOr<size_t> CudaCodecBase::Launched(size_t bytes) {
  BC_CUDA_TRY(cudaGetLastError());
  return bytes;
}

absl::Status CudaCodecBase::ResetStats(cudaStream_t stream) {
  BC_CUDA_TRY(cudaMemsetAsync(stats_, 0, sizeof(DeviceStats), stream));
  return absl::OkStatus();
}

absl::StatusOr<DeviceStats> CudaCodecBase::ReadStats(cudaStream_t stream) {
  BC_CUDA_TRY(cudaGetLastError());
  BC_CUDA_TRY(cudaMemcpyAsync(host_stats_.as<void>(), stats_, sizeof(DeviceStats),
                              cudaMemcpyDeviceToHost, stream));
  BC_CUDA_TRY(cudaStreamSynchronize(stream));
  DeviceStats st;
  std::memcpy(&st, host_stats_.as<void>(), sizeof(st));
  return st;
}

absl::Status CudaCodecBase::CheckDecode(cudaStream_t stream) {
  DeviceStats st;
  BC_ASSIGN(st, ReadStats(stream));
  return st.error_code == 0 ? absl::OkStatus() : Malformed(st.error);
}

absl::StatusOr<const uint8_t*> CudaCodecBase::ReadHeader(const uint8_t* encoded, size_t bytes,
                                                         size_t header_bytes, cudaStream_t stream) {
  void* host = nullptr;
  BC_ASSIGN(host, host_stats_.Reserve(std::max(header_bytes, sizeof(DeviceStats))));
  const size_t copy = std::min(bytes, header_bytes);
  if (copy > 0) {
    BC_CUDA_TRY(cudaMemcpyAsync(host, encoded, copy, cudaMemcpyDeviceToHost, stream));
  }
  BC_CUDA_TRY(cudaStreamSynchronize(stream));
  return static_cast<const uint8_t*>(host);
}

absl::StatusOr<const uint8_t*> CudaCodecBase::ReadCountedHeader(const uint8_t* encoded,
                                                                size_t bytes, size_t header_bytes,
                                                                size_t n, cudaStream_t stream) {
  const uint8_t* header = nullptr;
  BC_ASSIGN(header, ReadHeader(encoded, bytes, header_bytes, stream));
  if (auto s = Malformed(CheckSizeAndCount(header, bytes, MaxEncodedBytes(n), n)); !s.ok()) {
    return s;
  }
  return header;
}

absl::StatusOr<float> CudaCodecBase::ReadCountedHeaderValue(const uint8_t* encoded, size_t bytes,
                                                            size_t header_bytes, size_t n,
                                                            HeaderValue what, cudaStream_t stream) {
  const uint8_t* header = nullptr;
  BC_ASSIGN(header, ReadCountedHeader(encoded, bytes, header_bytes, n, stream));
  const float value = GetF32(header + 4);
  if (auto s = Malformed(CheckHeaderValue(value, what, true)); !s.ok()) return s;
  return value;
}

cudaError_t CudaCodecBase::WriteHeader(uint8_t* out, size_t bytes, cudaStream_t stream) {
  return cudaMemcpyAsync(out, header_scratch_, bytes, cudaMemcpyHostToDevice, stream);
}

absl::Status CudaCodecBase::NonFiniteError(const float* x, size_t n, cudaStream_t stream) {
  const unsigned int none = UINT_MAX;
  BC_CUDA_TRY(
      cudaMemcpyAsync(&stats_->first_bad, &none, sizeof(none), cudaMemcpyHostToDevice, stream));
  FirstNonFiniteKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, stats_);
  DeviceStats st;
  BC_ASSIGN(st, ReadStats(stream));
  return absl::InvalidArgumentError(absl::StrCat("codec '", name_, "' input element ", st.first_bad,
                                                 " of ", n, " is NaN or Inf"));
}

}  // namespace bytecomp::compress::cuda
