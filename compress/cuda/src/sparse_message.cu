// The sparse message on the GPU (sparse_message.h): the writer's kernels (compaction, the
// deltas' statistics, the bit-packed and varint sections, the header) and the reader's.
#include "sparse_message.h"

#include <cub/block/block_reduce.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>

#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/little_endian.h"
#include "bytecomp/compress/format/sparse_format.h"

namespace bytecomp::compress::cuda {
namespace {

// Writes kept values and indices in index order; the memory forgets what was sent: residual
// r = c - c = 0, dgc_momentum u = v = 0 at sent coordinates.
__global__ void CompactKernel(const float* __restrict__ x, size_t n,
                              const uint32_t* __restrict__ flags, const uint32_t* __restrict__ pos,
                              uint8_t* __restrict__ values, uint32_t* __restrict__ idx, Feedback fb,
                              float* __restrict__ dgc_u, float* __restrict__ dgc_v) {
  for (size_t i = GridStart(); i < n; i += GridStride()) {
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

// The largest delta (into max_abs_bits) and the varint section's size (into count), and each
// delta's varint length.
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
  for (size_t j = GridStart(); j < k; j += GridStride()) {
    const uint32_t d = sparse::IndexDelta(idx, j);
    max_delta = d > max_delta ? d : max_delta;
    const uint32_t len = sparse::VarintLength(d);
    varint_len[j] = len;
    bytes += len;
  }
  const unsigned int m = BlockReduceU(temp.u).Reduce(max_delta, MaxOp());
  __syncthreads();
  const unsigned long long b = BlockReduceL(temp.l).Sum(bytes);
  if (threadIdx.x == 0) {
    atomicMax(&stats->max_abs_bits, m);
    atomicAdd(&stats->count, b);
  }
}

__global__ void BitPackDeltasKernel(const uint32_t* __restrict__ idx, size_t k, uint32_t width,
                                    uint32_t* __restrict__ words) {
  for (size_t j = GridStart(); j < k; j += GridStride()) {
    size_t word;
    uint32_t low, high;
    sparse::BitPackDeltaWords(j, width, sparse::IndexDelta(idx, j), &word, &low, &high);
    atomicOr(&words[word], low);
    if (high != 0) atomicOr(&words[word + 1], high);
  }
}

__global__ void VarintDeltasKernel(const uint32_t* __restrict__ idx, size_t k,
                                   const uint32_t* __restrict__ offsets,
                                   uint8_t* __restrict__ out) {
  for (size_t j = GridStart(); j < k; j += GridStride()) {
    sparse::WriteVarint(out + offsets[j], sparse::IndexDelta(idx, j));
  }
}

__global__ void WriteHeaderKernel(uint8_t* out, uint32_t n, uint32_t k, sparse::IndexPlan plan) {
  sparse::WriteHeader(out, n, k, plan);
}

// Reads an index section in one thread (sequential by nature for varints; k is small for
// sparse codecs), with the CPU decoder's checks.
__global__ void ReadIndicesKernel(const uint8_t* __restrict__ data, size_t bytes, size_t k,
                                  size_t n, uint8_t encoding, uint8_t width,
                                  uint32_t* __restrict__ idx, DeviceStats* stats) {
  RecordError(stats, sparse::ReadIndexSection(data, bytes, k, n, encoding, width, idx));
}

__global__ void ScatterValuesKernel(const uint8_t* __restrict__ values,
                                    const uint32_t* __restrict__ idx, size_t k,
                                    float* __restrict__ out, DeviceStats* stats) {
  if (stats->error_code != 0) return;
  for (size_t j = GridStart(); j < k; j += GridStride()) {
    const float v = GetF32(values + 4 * j);
    if (!IsFiniteFloat(v)) RecordError(stats, MakeFormatError(FormatErrorCode::kValuesNotFinite));
    out[idx[j]] = v;
  }
}

}  // namespace

void LaunchScatterValues(const uint8_t* values, const uint32_t* idx, size_t k, float* output,
                         DeviceStats* stats, cudaStream_t stream) {
  ScatterValuesKernel<<<Blocks(k), kThreads, 0, stream>>>(values, idx, k, output, stats);
}

absl::StatusOr<size_t> SparseMessageCudaCodec::EmptyMessage(uint8_t* out, size_t n,
                                                            cudaStream_t stream) {
  WriteHeaderKernel<<<1, 1, 0, stream>>>(out, static_cast<uint32_t>(n), 0, sparse::IndexPlan());
  return Launched(sparse::kHeaderBytes);
}

absl::StatusOr<size_t> SparseMessageCudaCodec::FinishMessage(const float* x, size_t n, size_t k,
                                                             const uint32_t* flags, uint8_t* out,
                                                             const Feedback& fb,
                                                             cudaStream_t stream) {
  uint32_t *pos = nullptr, *idx = nullptr, *lens = nullptr;
  BC_ASSIGN(pos, scan_.Reserve<uint32_t>(n));
  BC_ASSIGN(idx, indices_.Reserve<uint32_t>(k));
  BC_ASSIGN(lens, lengths_.Reserve<uint32_t>(k));
  BC_CUDA_TRY(ExclusiveSum(flags, pos, n, stream));
  CompactKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, flags, pos, out + sparse::kHeaderBytes,
                                                    idx, fb, memory().dgc_u(), memory().dgc_v());
  if (auto s = ResetStats(stream); !s.ok()) return s;
  DeltaStatsKernel<<<Blocks(k), kThreads, 0, stream>>>(idx, k, lens, stats());
  DeviceStats st;
  BC_ASSIGN(st, ReadStats(stream));
  const sparse::IndexPlan plan =
      sparse::ChooseIndexPlan(k, st.max_abs_bits, static_cast<size_t>(st.count));
  uint8_t* section = out + sparse::kHeaderBytes + 4 * k;
  if (plan.encoding == sparse::kRaw) {
    BC_CUDA_TRY(cudaMemcpyAsync(section, idx, 4 * k, cudaMemcpyDeviceToDevice, stream));
  } else if (plan.encoding == sparse::kBitPack) {
    BC_CUDA_TRY(cudaMemsetAsync(section, 0, (plan.bytes + 3) / 4 * 4, stream));
    if (plan.width > 0) {
      BitPackDeltasKernel<<<Blocks(k), kThreads, 0, stream>>>(idx, k, plan.width,
                                                              reinterpret_cast<uint32_t*>(section));
    }
  } else {
    BC_CUDA_TRY(ExclusiveSum(lens, pos, k, stream));  // pos is free again: k <= n
    VarintDeltasKernel<<<Blocks(k), kThreads, 0, stream>>>(idx, k, pos, section);
  }
  WriteHeaderKernel<<<1, 1, 0, stream>>>(out, static_cast<uint32_t>(n), static_cast<uint32_t>(k),
                                         plan);
  return Launched(sparse::kHeaderBytes + 4 * k + plan.bytes);
}

cudaError_t SparseMessageCudaCodec::ExclusiveSum(const uint32_t* in, uint32_t* out, size_t count,
                                                 cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  size_t temp_bytes = 0;
  cudaError_t rc =
      cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, in, out, static_cast<int>(count), stream);
  if (rc != cudaSuccess) return rc;
  auto temp = cub_temp_.Reserve(temp_bytes);
  if (!temp.ok()) return cudaErrorMemoryAllocation;
  return cub::DeviceScan::ExclusiveSum(*temp, temp_bytes, in, out, static_cast<int>(count), stream);
}

absl::Status SparseMessageCudaCodec::Decode(const uint8_t* encoded, size_t bytes,
                                            const CodecContext&, float* output, size_t n,
                                            cudaStream_t stream) {
  const uint8_t* h = nullptr;
  BC_ASSIGN(h, ReadHeader(encoded, bytes, sparse::kHeaderBytes, stream));
  if (auto s = Malformed(sparse::CheckHeader(h, bytes, n, RequiredK(n))); !s.ok()) return s;
  const sparse::Header header = sparse::ReadHeader(h);
  const size_t k = header.k;
  uint32_t* idx = nullptr;
  BC_ASSIGN(idx, indices_.Reserve<uint32_t>(k));
  if (auto s = ResetStats(stream); !s.ok()) return s;
  ReadIndicesKernel<<<1, 1, 0, stream>>>(encoded + sparse::kHeaderBytes + 4 * k, header.index_bytes,
                                         k, n, header.encoding, header.width, idx, stats());
  BC_CUDA_TRY(cudaMemsetAsync(output, 0, 4 * n, stream));
  LaunchScatterValues(encoded + sparse::kHeaderBytes, idx, k, output, stats(), stream);
  return CheckDecode(stream);
}

}  // namespace bytecomp::compress::cuda
