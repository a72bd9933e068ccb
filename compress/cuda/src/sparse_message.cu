// The sparse message on the GPU (sparse_message.h): the writer's kernels (compaction, the
// deltas' statistics, the bit-packed and varint sections, the header) and the reader's.
#include "sparse_message.h"

#include <thrust/iterator/counting_iterator.h>
#include <cub/block/block_reduce.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/dgc_threshold.h"
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

__global__ void GatherBitsKernel(const float* __restrict__ x, const uint32_t* __restrict__ idx,
                                 size_t s, uint32_t* __restrict__ out) {
  for (size_t j = GridStart(); j < s; j += GridStride()) out[j] = FloatBits(x[idx[j]]);
}

// Whether element i's |x| bit pattern is at least from_bits: what CountAtLeast counts and
// FinishMessageAtLeast selects (cub::DeviceSelect::If over the indices keeps index order).
struct AtLeastBits {
  const float* x;
  uint32_t from_bits;
  __device__ bool operator()(uint32_t i) const {
    return (FloatBits(x[i]) & 0x7fffffffu) >= from_bits;
  }
};

__global__ void CountAtLeastKernel(const float* __restrict__ x, size_t n, uint32_t from_bits,
                                   unsigned long long* count) {
  using BlockReduceL = cub::BlockReduce<unsigned long long, kThreads>;
  __shared__ typename BlockReduceL::TempStorage temp;
  const AtLeastBits at_least{x, from_bits};
  unsigned long long c = 0;
  for (size_t i = GridStart(); i < n; i += GridStride()) c += at_least(i) ? 1u : 0u;
  const unsigned long long total = BlockReduceL(temp).Sum(c);
  if (threadIdx.x == 0) atomicAdd(count, total);
}

// Gathers the values of the k selected indices (in index order); the memory forgets what is
// sent, as CompactKernel does.
__global__ void GatherSelectedKernel(const float* __restrict__ x, const uint32_t* __restrict__ idx,
                                     size_t k, uint8_t* __restrict__ values, Feedback fb,
                                     float* __restrict__ dgc_u, float* __restrict__ dgc_v) {
  for (size_t j = GridStart(); j < k; j += GridStride()) {
    const uint32_t i = idx[j];
    const float c = x[i];
    reinterpret_cast<float*>(values)[j] = c;
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

// ---- the index section's reader: a thread per index (sparse_format.h's parallel reader), the
// indices the prefix sums of the steps d_j + 1; where it doubts (stats->suspect), the serial
// reader reads the section again with the CPU decoder's checks and errors.

// Raw indices: each checked against its predecessor and n.
__global__ void RawIndicesKernel(const uint8_t* __restrict__ data, size_t k, size_t n,
                                 uint32_t* __restrict__ idx, DeviceStats* stats) {
  for (size_t j = GridStart(); j < k; j += GridStride()) {
    const uint32_t i = GetU32(data + 4 * j);
    idx[j] = i;
    if (i >= n || (j > 0 && GetU32(data + 4 * (j - 1)) >= i)) stats->suspect = 1u;
  }
}

__global__ void BitPackedStepsKernel(const uint8_t* __restrict__ data, size_t bytes, size_t k,
                                     int width, uint64_t* __restrict__ steps) {
  for (size_t j = GridStart(); j < k; j += GridStride()) {
    steps[j] = static_cast<uint64_t>(sparse::BitPackedDelta(data, bytes, j, width)) + 1u;
  }
}

// last[b] = 1 where byte b ends a varint (its high bit clear).
__global__ void VarintEndsKernel(const uint8_t* __restrict__ data, size_t bytes,
                                 uint32_t* __restrict__ last) {
  for (size_t b = GridStart(); b < bytes; b += GridStride()) last[b] = (data[b] & 0x80u) ? 0u : 1u;
}

// The varint that begins at byte b is number ordinal[b] (the varints ended before b). Exactly
// k varints, the last ending at the last byte, each at most 5 bytes; else a doubt.
__global__ void VarintStepsKernel(const uint8_t* __restrict__ data, size_t bytes, size_t k,
                                  const uint32_t* __restrict__ ordinal,
                                  uint64_t* __restrict__ steps, DeviceStats* stats) {
  for (size_t b = GridStart(); b < bytes; b += GridStride()) {
    if (b == bytes - 1 && ((data[b] & 0x80u) != 0 || ordinal[b] + 1u != k)) stats->suspect = 1u;
    if (!sparse::BeginsVarint(data, b)) continue;
    const uint32_t j = ordinal[b];
    uint64_t d = 0;
    if (j >= k || !sparse::VarintAt(data, bytes, b, &d)) {
      stats->suspect = 1u;
      continue;
    }
    steps[j] = d + 1u;
  }
}

// idx[j] = the inclusive prefix sum of the steps, minus one; the last must be below n.
__global__ void IndicesFromStepsKernel(const uint64_t* __restrict__ sums, size_t k, size_t n,
                                       uint32_t* __restrict__ idx, DeviceStats* stats) {
  for (size_t j = GridStart(); j < k; j += GridStride()) {
    idx[j] = static_cast<uint32_t>(sums[j] - 1u);
    if (j == k - 1 && sums[j] - 1u >= n) stats->suspect = 1u;
  }
}

// The serial reader (sparse_format.h's, in one thread), where a parallel reader doubted.
__global__ void ReadIndicesKernel(const uint8_t* __restrict__ data, size_t bytes, size_t k,
                                  size_t n, uint8_t encoding, uint8_t width,
                                  uint32_t* __restrict__ idx, DeviceStats* stats) {
  if (stats->suspect == 0u) return;
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

absl::StatusOr<std::vector<uint32_t>> DeviceSample::Read(const float* x, size_t n, uint64_t seed,
                                                         cudaStream_t stream) {
  const size_t s = dgc::SampleSize(n);
  void* host = nullptr;
  BC_ASSIGN(host, host_.Reserve(8 * std::max<size_t>(s, 1)));
  auto* positions = static_cast<uint32_t*>(host);
  uint32_t* sampled = positions + s;
  dgc::ForEachSamplePosition(n, seed,
                             [&](size_t j, size_t i) { positions[j] = static_cast<uint32_t>(i); });
  uint32_t* d = nullptr;
  BC_ASSIGN(d, device_.Reserve<uint32_t>(2 * s));
  if (s > 0) {
    BC_CUDA_TRY(cudaMemcpyAsync(d, positions, 4 * s, cudaMemcpyHostToDevice, stream));
    GatherBitsKernel<<<Blocks(s), kThreads, 0, stream>>>(x, d, s, d + s);
    BC_CUDA_TRY(cudaMemcpyAsync(sampled, d + s, 4 * s, cudaMemcpyDeviceToHost, stream));
  }
  BC_CUDA_TRY(cudaStreamSynchronize(stream));
  return std::vector<uint32_t>(sampled, sampled + s);
}

absl::StatusOr<sparse::IndexPlan> IndexSectionCudaCodec::WriteIndexSection(const uint32_t* idx,
                                                                           size_t k,
                                                                           uint8_t* section,
                                                                           cudaStream_t stream) {
  if (k == 0) return sparse::IndexPlan();  // ChooseIndexPlan's plan for no index: no bytes
  uint32_t* lens = nullptr;
  BC_ASSIGN(lens, lengths_.Reserve<uint32_t>(k));
  if (auto s = ResetStats(stream); !s.ok()) return s;
  DeltaStatsKernel<<<ReduceBlocks(k), kThreads, 0, stream>>>(idx, k, lens, stats());
  DeviceStats st;
  BC_ASSIGN(st, ReadStats(stream));
  const sparse::IndexPlan plan =
      sparse::ChooseIndexPlan(k, st.max_abs_bits, static_cast<size_t>(st.count));
  if (plan.encoding == sparse::kRaw) {
    BC_CUDA_TRY(cudaMemcpyAsync(section, idx, 4 * k, cudaMemcpyDeviceToDevice, stream));
  } else if (plan.encoding == sparse::kBitPack) {
    // The threads OR their bits into 32-bit words: in place when the section is aligned,
    // else in a scratch copied behind.
    const size_t words = (plan.bytes + 3) / 4;
    const bool aligned = reinterpret_cast<uintptr_t>(section) % 4 == 0;
    uint32_t* packed = reinterpret_cast<uint32_t*>(section);
    if (!aligned) BC_ASSIGN(packed, packed_.Reserve<uint32_t>(words));
    BC_CUDA_TRY(cudaMemsetAsync(packed, 0, 4 * words, stream));
    if (plan.width > 0) {
      BitPackDeltasKernel<<<Blocks(k), kThreads, 0, stream>>>(idx, k, plan.width, packed);
    }
    if (!aligned) {
      BC_CUDA_TRY(cudaMemcpyAsync(section, packed, plan.bytes, cudaMemcpyDeviceToDevice, stream));
    }
  } else {
    uint32_t* offsets = nullptr;
    BC_ASSIGN(offsets, offsets_.Reserve<uint32_t>(k));
    BC_CUDA_TRY(ExclusiveSum(lens, offsets, k, stream));
    VarintDeltasKernel<<<Blocks(k), kThreads, 0, stream>>>(idx, k, offsets, section);
  }
  return plan;
}

absl::Status IndexSectionCudaCodec::LaunchReadIndexSection(const uint8_t* section, size_t bytes,
                                                           size_t k, size_t n, uint8_t encoding,
                                                           uint8_t width, uint32_t* idx,
                                                           cudaStream_t stream) {
  // What the host sees from the header alone (a size, a width) goes straight to the serial
  // reader, as does a section too long for CUB's int counts.
  const bool sizes_fit =
      (encoding == sparse::kRaw && bytes == 4 * k) ||
      (encoding == sparse::kBitPack && width <= 32 && bytes == PackedBytes(k, width)) ||
      (encoding == sparse::kVarint && (bytes == 0) == (k == 0));
  const bool doubt = !sizes_fit || bytes > static_cast<size_t>(INT_MAX);
  BC_CUDA_TRY(cudaMemsetAsync(&stats()->suspect, doubt ? 1 : 0, sizeof(unsigned), stream));
  if (!doubt && k > 0) {
    if (encoding == sparse::kRaw) {
      RawIndicesKernel<<<Blocks(k), kThreads, 0, stream>>>(section, k, n, idx, stats());
    } else {
      uint64_t* steps = nullptr;
      BC_ASSIGN(steps, steps_.Reserve<uint64_t>(k));
      if (encoding == sparse::kBitPack) {
        BitPackedStepsKernel<<<Blocks(k), kThreads, 0, stream>>>(section, bytes, k, width, steps);
      } else {
        uint32_t *last = nullptr, *ordinal = nullptr;
        BC_ASSIGN(last, lengths_.Reserve<uint32_t>(bytes));
        BC_ASSIGN(ordinal, offsets_.Reserve<uint32_t>(bytes));
        VarintEndsKernel<<<Blocks(bytes), kThreads, 0, stream>>>(section, bytes, last);
        BC_CUDA_TRY(ExclusiveSum(last, ordinal, bytes, stream));
        VarintStepsKernel<<<Blocks(bytes), kThreads, 0, stream>>>(section, bytes, k, ordinal, steps,
                                                                  stats());
      }
      BC_CUDA_TRY(prefix_sums_.InclusiveSum(steps, steps, k, stream));
      IndicesFromStepsKernel<<<Blocks(k), kThreads, 0, stream>>>(steps, k, n, idx, stats());
    }
  }
  ReadIndicesKernel<<<1, 1, 0, stream>>>(section, bytes, k, n, encoding, width, idx, stats());
  BC_CUDA_TRY(cudaGetLastError());
  return absl::OkStatus();
}

// CUB's two calls around the scratch kept here: the scratch's size, then the scan.
template <typename Scan>
cudaError_t PrefixSums::WithScratch(Scan scan) {
  size_t temp_bytes = 0;
  cudaError_t rc = scan(nullptr, temp_bytes);
  if (rc != cudaSuccess) return rc;
  auto temp = temp_.Reserve(temp_bytes);
  if (!temp.ok()) return cudaErrorMemoryAllocation;
  return scan(*temp, temp_bytes);
}

cudaError_t PrefixSums::ExclusiveSum(const uint32_t* in, uint32_t* out, size_t count,
                                     cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  return WithScratch([&](void* temp, size_t& bytes) {
    return cub::DeviceScan::ExclusiveSum(temp, bytes, in, out, static_cast<int>(count), stream);
  });
}

cudaError_t PrefixSums::InclusiveSum(const uint64_t* in, uint64_t* out, size_t count,
                                     cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  return WithScratch([&](void* temp, size_t& bytes) {
    return cub::DeviceScan::InclusiveSum(temp, bytes, in, out, static_cast<int>(count), stream);
  });
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
  uint32_t *pos = nullptr, *idx = nullptr;
  BC_ASSIGN(pos, scan_.Reserve<uint32_t>(n));
  BC_ASSIGN(idx, indices_.Reserve<uint32_t>(k));
  BC_CUDA_TRY(ExclusiveSum(flags, pos, n, stream));
  CompactKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, flags, pos, out + sparse::kHeaderBytes,
                                                    idx, fb, memory().dgc_u(), memory().dgc_v());
  return FinishIndexSectionAndHeader(idx, n, k, out, stream);
}

absl::StatusOr<size_t> SparseMessageCudaCodec::FinishIndexSectionAndHeader(const uint32_t* idx,
                                                                           size_t n, size_t k,
                                                                           uint8_t* out,
                                                                           cudaStream_t stream) {
  sparse::IndexPlan plan;
  BC_ASSIGN(plan, WriteIndexSection(idx, k, out + sparse::kHeaderBytes + 4 * k, stream));
  WriteHeaderKernel<<<1, 1, 0, stream>>>(out, static_cast<uint32_t>(n), static_cast<uint32_t>(k),
                                         plan);
  return Launched(sparse::kHeaderBytes + 4 * k + plan.bytes);
}

absl::StatusOr<size_t> SparseMessageCudaCodec::CountAtLeast(const float* x, size_t n,
                                                            uint32_t from_bits,
                                                            cudaStream_t stream) {
  if (auto s = ResetStats(stream); !s.ok()) return s;
  CountAtLeastKernel<<<ReduceBlocks(n), kThreads, 0, stream>>>(x, n, from_bits, &stats()->count);
  DeviceStats st;
  BC_ASSIGN(st, ReadStats(stream));
  return static_cast<size_t>(st.count);
}

absl::StatusOr<size_t> SparseMessageCudaCodec::FinishMessageAtLeast(const float* x, size_t n,
                                                                    size_t k, uint32_t from_bits,
                                                                    uint8_t* out,
                                                                    const Feedback& fb,
                                                                    cudaStream_t stream) {
  // One pass over x: the selected indices in index order, straight from the predicate.
  uint32_t* idx = nullptr;
  int64_t* selected = nullptr;
  BC_ASSIGN(idx, indices_.Reserve<uint32_t>(k));
  BC_ASSIGN(selected, selected_.Reserve<int64_t>(1));
  const thrust::counting_iterator<uint32_t> all(0);
  const AtLeastBits keep{x, from_bits};
  size_t temp_bytes = 0;
  BC_CUDA_TRY(cub::DeviceSelect::If(nullptr, temp_bytes, all, idx, selected,
                                    static_cast<int64_t>(n), keep, stream));
  void* temp = nullptr;
  BC_ASSIGN(temp, select_temp_.Reserve(temp_bytes));
  BC_CUDA_TRY(cub::DeviceSelect::If(temp, temp_bytes, all, idx, selected, static_cast<int64_t>(n),
                                    keep, stream));
  LaunchGatherSelected(x, idx, k, out + sparse::kHeaderBytes, fb, stream);
  return FinishIndexSectionAndHeader(idx, n, k, out, stream);
}

void SparseMessageCudaCodec::LaunchGatherSelected(const float* x, const uint32_t* idx, size_t k,
                                                  uint8_t* values, const Feedback& fb,
                                                  cudaStream_t stream) {
  GatherSelectedKernel<<<Blocks(k), kThreads, 0, stream>>>(x, idx, k, values, fb, memory().dgc_u(),
                                                           memory().dgc_v());
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
  if (auto s = LaunchReadIndexSection(encoded + sparse::kHeaderBytes + 4 * k, header.index_bytes, k,
                                      n, header.encoding, header.width, idx, stream);
      !s.ok()) {
    return s;
  }
  BC_CUDA_TRY(cudaMemsetAsync(output, 0, 4 * n, stream));
  LaunchScatterValues(encoded + sparse::kHeaderBytes, idx, k, output, stats(), stream);
  return CheckDecode(stream);
}

}  // namespace bytecomp::compress::cuda
