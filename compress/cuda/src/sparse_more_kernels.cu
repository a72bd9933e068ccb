// More sparsification codecs on the GPU: threshold (every |x| above a fixed threshold:
// sparse_format.h's ThresholdKeptFromBits; the sparse message, sparse_message.h), adaq
// (format/adaq_format.h: the host-drawn sample split by sign, a threshold per sign, the kept
// indices of each sign in two index sections and one mean per sign) and blocksparse
// (format/blocksparse_format.h: the blocks holding some |x| above the threshold, their
// positions as an index list or a bitmap, their values).
#include <cub/block/block_reduce.cuh>

#include <cstring>
#include <vector>

#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/adaq_format.h"
#include "bytecomp/compress/format/blocksparse_format.h"
#include "bytecomp/compress/format/dgc_threshold.h"
#include "bytecomp/compress/format/sparse_format.h"
#include "bytecomp/compress/params.h"
#include "cuda_registry.h"
#include "sparse_message.h"

namespace bytecomp::compress::cuda {
namespace {

// ---- threshold

class ThresholdCudaCodec final : public SparseMessageCudaCodec {
 public:
  ThresholdCudaCodec(FusedMemorySettings memory, double threshold)
      : SparseMessageCudaCodec("threshold", memory),
        kept_from_bits_(sparse::ThresholdKeptFromBits(threshold)) {}

  size_t MaxEncodedBytes(size_t n) const override { return sparse::MaxMessageBytes(n); }

 protected:
  absl::StatusOr<size_t> EncodeChecked(const float* x, size_t n, const CodecContext&,
                                       const DeviceStats& st, const Feedback& fb, uint8_t* out,
                                       cudaStream_t stream) override {
    // Nothing above the threshold (the reduction pass's largest |x| says so): the header
    // alone, as the CPU writes it for k = 0; the residual keeps the whole input.
    if (st.max_abs_bits < kept_from_bits_) return EmptyMessage(out, n, stream);
    size_t k = 0;
    BC_ASSIGN(k, CountAtLeast(x, n, kept_from_bits_, stream));
    return FinishMessageAtLeast(x, n, k, kept_from_bits_, out, fb, stream);
  }

 private:
  uint32_t kept_from_bits_;
};

// ---- adaq

// What the flags pass reduces: each sign's kept count and the sum of its kept values.
struct AdaqSums {
  unsigned long long k_pos, k_neg;
  double sum_pos, sum_neg;
};

// Flags the kept elements of each sign (adaq_format.h step 3) and sums their counts and values
// (step 4's sums, in double, in the GPU's order).
__global__ void AdaqFlagsKernel(const float* __restrict__ x, size_t n, adaq::BitRange pos,
                                adaq::BitRange neg, uint32_t* __restrict__ pos_flags,
                                uint32_t* __restrict__ neg_flags, AdaqSums* sums) {
  using BlockReduceL = cub::BlockReduce<unsigned long long, kThreads>;
  using BlockReduceD = cub::BlockReduce<double, kThreads>;
  __shared__ union {
    typename BlockReduceL::TempStorage l;
    typename BlockReduceD::TempStorage d;
  } temp;
  unsigned long long kp = 0, kn = 0;
  double sp = 0.0, sn = 0.0;
  for (size_t i = GridStart(); i < n; i += GridStride()) {
    const float v = x[i];
    const uint32_t bits = FloatBits(v);
    const bool p = adaq::InRange(bits, pos);
    const bool q = adaq::InRange(bits, neg);
    pos_flags[i] = p ? 1u : 0u;
    neg_flags[i] = q ? 1u : 0u;
    if (p) {
      ++kp;
      sp += static_cast<double>(v);
    }
    if (q) {
      ++kn;
      sn += static_cast<double>(v);
    }
  }
  const unsigned long long block_kp = BlockReduceL(temp.l).Sum(kp);
  __syncthreads();
  const unsigned long long block_kn = BlockReduceL(temp.l).Sum(kn);
  __syncthreads();
  const double block_sp = BlockReduceD(temp.d).Sum(sp);
  __syncthreads();
  const double block_sn = BlockReduceD(temp.d).Sum(sn);
  if (threadIdx.x == 0) {
    atomicAdd(&sums->k_pos, block_kp);
    atomicAdd(&sums->k_neg, block_kn);
    atomicAdd(&sums->sum_pos, block_sp);
    atomicAdd(&sums->sum_neg, block_sn);
  }
}

// The flagged elements' indices in index order (pos: the flags' exclusive sums); the residual
// keeps each one's error against its sign's mean, which decoding gives it.
__global__ void AdaqIndicesKernel(const float* __restrict__ x, size_t n,
                                  const uint32_t* __restrict__ flags,
                                  const uint32_t* __restrict__ pos, float mean,
                                  uint32_t* __restrict__ idx, Feedback fb) {
  for (size_t i = GridStart(); i < n; i += GridStride()) {
    if (!flags[i]) continue;
    idx[pos[i]] = static_cast<uint32_t>(i);
    fb.Update(i, x[i], mean);
  }
}

__global__ void WriteAdaqHeaderKernel(uint8_t* out, adaq::Header h) { adaq::WriteHeader(out, h); }

// The decoder's last check, in one thread, after both sections were read (not when one was bad).
// Each negative index looked up among the positive ones (both increasing once read): one found
// is a doubt, which the serial check (AdaqDisjointKernel) turns into its error.
__global__ void AdaqSharedIndexKernel(const uint32_t* __restrict__ pos, size_t k_pos,
                                      const uint32_t* __restrict__ neg, size_t k_neg,
                                      DeviceStats* stats) {
  if (stats->error_code != 0) return;
  for (size_t j = GridStart(); j < k_neg; j += GridStride()) {
    const uint32_t i = neg[j];
    size_t lo = 0, hi = k_pos;
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      if (pos[mid] < i) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    if (lo < k_pos && pos[lo] == i) stats->suspect = 1u;
  }
}

// The merge of the CPU decoder (its error names the first shared index), where a doubt was.
__global__ void AdaqDisjointKernel(const uint32_t* __restrict__ pos, size_t k_pos,
                                   const uint32_t* __restrict__ neg, size_t k_neg,
                                   DeviceStats* stats) {
  if (stats->error_code != 0 || stats->suspect == 0u) return;
  RecordError(stats, adaq::CheckDisjoint(pos, k_pos, neg, k_neg));
}

// output[idx[j]] = mean for j < k, unless a check failed.
__global__ void AdaqScatterKernel(const uint32_t* __restrict__ idx, size_t k, float mean,
                                  float* __restrict__ out, const DeviceStats* stats) {
  if (stats->error_code != 0) return;
  for (size_t j = GridStart(); j < k; j += GridStride()) out[idx[j]] = mean;
}

class AdaqCudaCodec final : public IndexSectionCudaCodec {
 public:
  AdaqCudaCodec(FusedMemorySettings memory, double ratio)
      : IndexSectionCudaCodec("adaq", memory), ratio_(ratio) {}

  size_t MaxEncodedBytes(size_t n) const override { return adaq::kHeaderBytes + 4 * n; }

  absl::Status Decode(const uint8_t* encoded, size_t bytes, const CodecContext&, float* output,
                      size_t n, cudaStream_t stream) override {
    const uint8_t* p = nullptr;
    BC_ASSIGN(p, ReadHeader(encoded, bytes, adaq::kHeaderBytes, stream));
    if (auto s = Malformed(adaq::CheckHeader(p, bytes, n)); !s.ok()) return s;
    const adaq::Header h = adaq::ReadHeader(p);
    uint32_t *pos = nullptr, *neg = nullptr;
    BC_ASSIGN(pos, pos_indices_.Reserve<uint32_t>(h.k_pos));
    BC_ASSIGN(neg, neg_indices_.Reserve<uint32_t>(h.k_neg));
    if (auto s = ResetStats(stream); !s.ok()) return s;
    const uint8_t* pos_section = encoded + adaq::kHeaderBytes;
    // The CPU's check order: the positive section, the negative one, then disjointness (the
    // first error recorded is reported).
    if (auto s = LaunchReadIndexSection(pos_section, h.pos.bytes, h.k_pos, n, h.pos.encoding,
                                        h.pos.width, pos, stream);
        !s.ok()) {
      return s;
    }
    if (auto s = LaunchReadIndexSection(pos_section + h.pos.bytes, h.neg.bytes, h.k_neg, n,
                                        h.neg.encoding, h.neg.width, neg, stream);
        !s.ok()) {
      return s;
    }
    BC_CUDA_TRY(cudaMemsetAsync(&stats()->suspect, 0, sizeof(unsigned), stream));
    AdaqSharedIndexKernel<<<Blocks(h.k_neg), kThreads, 0, stream>>>(pos, h.k_pos, neg, h.k_neg,
                                                                    stats());
    AdaqDisjointKernel<<<1, 1, 0, stream>>>(pos, h.k_pos, neg, h.k_neg, stats());
    BC_CUDA_TRY(cudaMemsetAsync(output, 0, 4 * n, stream));
    AdaqScatterKernel<<<Blocks(h.k_pos), kThreads, 0, stream>>>(pos, h.k_pos, h.mean_pos, output,
                                                                stats());
    AdaqScatterKernel<<<Blocks(h.k_neg), kThreads, 0, stream>>>(neg, h.k_neg, h.mean_neg, output,
                                                                stats());
    return CheckDecode(stream);
  }

 protected:
  absl::StatusOr<size_t> EncodeChecked(const float* x, size_t n, const CodecContext& ctx,
                                       const DeviceStats&, const Feedback& fb, uint8_t* out,
                                       cudaStream_t stream) override {
    // Steps 1 and 2: the sample read back, split by sign, a threshold per sign.
    uint32_t pos_t = adaq::kKeepNone, neg_t = adaq::kKeepNone;
    if (n > 0) {
      std::vector<uint32_t> sample;
      BC_ASSIGN(sample, sample_.Read(x, n, NodeSeed(ctx, adaq::kAdaqSalt), stream));
      pos_sample_.clear();
      neg_sample_.clear();
      for (uint32_t bits : sample) adaq::AddSampled(BitsToFloat(bits), pos_sample_, neg_sample_);
      pos_t = adaq::SignThreshold(pos_sample_, ratio_);
      neg_t = adaq::SignThreshold(neg_sample_, ratio_);
    }
    // Steps 3 and 4: the flags, counts and sums, read back.
    uint32_t *flags = nullptr, *scan = nullptr;
    AdaqSums* sums = nullptr;
    BC_ASSIGN(flags, flags_.Reserve<uint32_t>(2 * n));
    BC_ASSIGN(scan, scan_.Reserve<uint32_t>(n));
    BC_ASSIGN(sums, sums_.Reserve<AdaqSums>(1));
    BC_CUDA_TRY(cudaMemsetAsync(sums, 0, sizeof(AdaqSums), stream));
    AdaqFlagsKernel<<<ReduceBlocks(n), kThreads, 0, stream>>>(
        x, n, adaq::PositiveRange(pos_t), adaq::NegativeRange(neg_t), flags, flags + n, sums);
    void* host = nullptr;
    BC_ASSIGN(host, host_sums_.Reserve(sizeof(AdaqSums)));
    BC_CUDA_TRY(cudaMemcpyAsync(host, sums, sizeof(AdaqSums), cudaMemcpyDeviceToHost, stream));
    BC_CUDA_TRY(cudaStreamSynchronize(stream));
    AdaqSums got;
    std::memcpy(&got, host, sizeof(got));
    adaq::Header h;
    h.n = static_cast<uint32_t>(n);
    h.k_pos = static_cast<uint32_t>(got.k_pos);
    h.k_neg = static_cast<uint32_t>(got.k_neg);
    h.mean_pos = adaq::Mean(got.sum_pos, got.k_pos);
    h.mean_neg = adaq::Mean(got.sum_neg, got.k_neg);
    // Step 5: each sign's indices, then its section behind the header and the one before it.
    uint8_t* section = out + adaq::kHeaderBytes;
    BC_ASSIGN(h.pos, WriteSignSection(x, n, flags, scan, h.k_pos, h.mean_pos, fb, &pos_indices_,
                                      section, stream));
    BC_ASSIGN(h.neg, WriteSignSection(x, n, flags + n, scan, h.k_neg, h.mean_neg, fb, &neg_indices_,
                                      section + h.pos.bytes, stream));
    WriteAdaqHeaderKernel<<<1, 1, 0, stream>>>(out, h);
    return Launched(adaq::kHeaderBytes + h.pos.bytes + h.neg.bytes);
  }

 private:
  // The k flagged indices of one sign into *indices (scan: n words of scratch), their residual
  // against mean, and their section at `section`.
  absl::StatusOr<sparse::IndexPlan> WriteSignSection(const float* x, size_t n,
                                                     const uint32_t* flags, uint32_t* scan,
                                                     size_t k, float mean, const Feedback& fb,
                                                     DeviceBuffer* indices, uint8_t* section,
                                                     cudaStream_t stream) {
    uint32_t* idx = nullptr;
    BC_ASSIGN(idx, indices->Reserve<uint32_t>(k));
    if (k > 0) {
      BC_CUDA_TRY(ExclusiveSum(flags, scan, n, stream));
      AdaqIndicesKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, flags, scan, mean, idx, fb);
    }
    return WriteIndexSection(idx, k, section, stream);
  }

  double ratio_;
  DeviceSample sample_;
  std::vector<uint32_t> pos_sample_, neg_sample_;
  DeviceBuffer flags_, scan_, sums_, pos_indices_, neg_indices_;
  HostBuffer host_sums_;
};

// ---- blocksparse

// Marks the blocks that hold some |x| blocksparse::Carries (flags zeroed before: any element
// may write its block's 1).
__global__ void MarkCarriedBlocksKernel(const float* __restrict__ x, size_t n, uint32_t block,
                                        uint32_t kept_from, uint32_t* __restrict__ flags) {
  for (size_t i = GridStart(); i < n; i += GridStride()) {
    if (blocksparse::Carries(FloatBits(x[i]) & 0x7fffffffu, kept_from)) flags[i / block] = 1u;
  }
}

// The positions section of the carried blocks (rank: the flags' exclusive sums): their indices,
// or their bits ORed into the zeroed bitmap (4-aligned: it follows the 16-byte header).
__global__ void WritePositionsKernel(const uint32_t* __restrict__ flags,
                                     const uint32_t* __restrict__ rank, size_t blocks, bool bitmap,
                                     uint8_t* __restrict__ section) {
  for (size_t b = GridStart(); b < blocks; b += GridStride()) {
    if (!flags[b]) continue;
    const auto block_index = static_cast<uint32_t>(b);
    if (bitmap) {
      atomicOr(reinterpret_cast<uint32_t*>(section) + blocksparse::BitmapWord(block_index),
               blocksparse::BitmapBit(block_index));
    } else {
      blocksparse::WriteListedPosition(section, rank[b], block_index);
    }
  }
}

// The carried blocks' values in block order; the residual forgets what is sent.
__global__ void CarriedValuesKernel(const float* __restrict__ x, size_t n, uint32_t block,
                                    const uint32_t* __restrict__ flags,
                                    const uint32_t* __restrict__ rank, float* __restrict__ values,
                                    Feedback fb) {
  for (size_t i = GridStart(); i < n; i += GridStride()) {
    const size_t b = i / block;
    if (!flags[b]) continue;
    const float c = x[i];
    values[blocksparse::CarriedValueIndex(rank[b], block, i - b * block)] = c;
    fb.Update(i, c, c);
  }
}

// The decoder's position check in one thread (O(m), or O(B / 32 + m) for a bitmap).
__global__ void ReadPositionsKernel(const uint8_t* __restrict__ p, size_t bytes,
                                    blocksparse::Header h, uint32_t* __restrict__ carried,
                                    DeviceStats* stats) {
  RecordError(stats, blocksparse::ReadPositions(p, bytes, h, carried));
}

// After the positions: the values are finite (sparse::ValuesFinite, a value a thread).
__global__ void CheckValuesKernel(const uint8_t* __restrict__ values, size_t count,
                                  DeviceStats* stats) {
  if (stats->error_code != 0) return;
  for (size_t v = GridStart(); v < count; v += GridStride()) {
    if (!sparse::ValuesFinite(values + 4 * v, 1)) {
      RecordError(stats, MakeFormatError(FormatErrorCode::kValuesNotFinite));
    }
  }
}

// The carried values into the zeroed output, unless a check failed.
__global__ void ScatterBlocksKernel(const uint8_t* __restrict__ values, size_t count,
                                    uint32_t block, const uint32_t* __restrict__ carried,
                                    float* __restrict__ out, const DeviceStats* stats) {
  if (stats->error_code != 0) return;
  for (size_t v = GridStart(); v < count; v += GridStride()) {
    out[blocksparse::ElementOfValue(v, block, carried)] = GetF32(values + 4 * v);
  }
}

class BlocksparseCudaCodec final : public CudaCodecBase {
 public:
  BlocksparseCudaCodec(FusedMemorySettings memory, uint32_t block, double threshold)
      : CudaCodecBase("blocksparse", memory),
        block_(block),
        kept_from_bits_(sparse::ThresholdKeptFromBits(threshold)) {}

  size_t MaxEncodedBytes(size_t n) const override {
    return blocksparse::MaxPayloadBytes(n, block_);
  }

  absl::Status Decode(const uint8_t* encoded, size_t bytes, const CodecContext&, float* output,
                      size_t n, cudaStream_t stream) override {
    const uint8_t* p = nullptr;
    BC_ASSIGN(p, ReadHeader(encoded, bytes, blocksparse::kHeaderBytes, stream));
    blocksparse::Header h;
    if (auto s = Malformed(blocksparse::CheckHeader(p, bytes, n, block_, &h)); !s.ok()) return s;
    uint32_t* carried = nullptr;
    BC_ASSIGN(carried, carried_.Reserve<uint32_t>(h.m));
    if (auto s = ResetStats(stream); !s.ok()) return s;
    // The CPU's check order: the positions, then the values (CheckHeader sized them).
    ReadPositionsKernel<<<1, 1, 0, stream>>>(encoded, bytes, h, carried, stats());
    const size_t offset = blocksparse::ValuesOffset(n, block_, h.m);
    const size_t count = (bytes - offset) / 4;
    CheckValuesKernel<<<Blocks(count), kThreads, 0, stream>>>(encoded + offset, count, stats());
    BC_CUDA_TRY(cudaMemsetAsync(output, 0, 4 * n, stream));
    ScatterBlocksKernel<<<Blocks(count), kThreads, 0, stream>>>(encoded + offset, count, block_,
                                                                carried, output, stats());
    return CheckDecode(stream);
  }

 protected:
  absl::StatusOr<size_t> EncodeChecked(const float* x, size_t n, const CodecContext&,
                                       const DeviceStats& st, const Feedback& fb, uint8_t* out,
                                       cudaStream_t stream) override {
    const size_t blocks = blocksparse::BlockCount(n, block_);
    // The carried blocks' count m and whether the tensor's last block is one: none when the
    // reduction's largest |x| is below the threshold, else the flags' sums read back.
    uint32_t m = 0;
    bool last_carried = false;
    uint32_t *flags = nullptr, *rank = nullptr;
    if (blocks > 0 && blocksparse::Carries(st.max_abs_bits, kept_from_bits_)) {
      BC_ASSIGN(flags, flags_.Reserve<uint32_t>(blocks));
      BC_ASSIGN(rank, rank_.Reserve<uint32_t>(blocks));
      BC_CUDA_TRY(cudaMemsetAsync(flags, 0, 4 * blocks, stream));
      MarkCarriedBlocksKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, block_, kept_from_bits_,
                                                                  flags);
      BC_CUDA_TRY(prefix_sums_.ExclusiveSum(flags, rank, blocks, stream));
      uint32_t* host = nullptr;
      BC_ASSIGN(host, host_last_.Reserve<uint32_t>(2));
      BC_CUDA_TRY(cudaMemcpyAsync(host, rank + blocks - 1, 4, cudaMemcpyDeviceToHost, stream));
      BC_CUDA_TRY(cudaMemcpyAsync(host + 1, flags + blocks - 1, 4, cudaMemcpyDeviceToHost, stream));
      BC_CUDA_TRY(cudaStreamSynchronize(stream));
      m = host[0] + host[1];
      last_carried = host[1] != 0;
    }
    if (m > 0) {
      uint8_t* section = out + blocksparse::kHeaderBytes;
      const bool bitmap = blocksparse::PositionsFor(blocks, m) == blocksparse::kBitmap;
      if (bitmap) {
        BC_CUDA_TRY(cudaMemsetAsync(section, 0, blocksparse::BitmapBytes(blocks), stream));
      }
      WritePositionsKernel<<<Blocks(blocks), kThreads, 0, stream>>>(flags, rank, blocks, bitmap,
                                                                    section);
      auto* values = reinterpret_cast<float*>(out + blocksparse::ValuesOffset(n, block_, m));
      CarriedValuesKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, block_, flags, rank, values,
                                                              fb);
    }
    blocksparse::WriteHeader(header_scratch(), static_cast<uint32_t>(n), block_, m);
    BC_CUDA_TRY(WriteHeader(out, blocksparse::kHeaderBytes, stream));
    return Launched(blocksparse::PayloadBytes(n, block_, m, last_carried));
  }

 private:
  uint32_t block_;
  uint32_t kept_from_bits_;
  PrefixSums prefix_sums_;
  DeviceBuffer flags_, rank_, carried_;
  HostBuffer host_last_;
};

}  // namespace

void RegisterMoreSparseCudaCodecs(CudaCodecRegistry& registry) {
  registry.MustRegisterLikeCpu("threshold", DoubleParamFactory<ThresholdCudaCodec>("threshold"));
  registry.MustRegisterLikeCpu("adaq", RatioFactory<AdaqCudaCodec>());
  registry.MustRegisterLikeCpu(
      "blocksparse",
      [](const CodecParams& params,
         const FusedMemorySettings& m) -> absl::StatusOr<std::unique_ptr<CudaCodec>> {
        ParamReader r(params);
        const int64_t block = r.Int("block");
        const double threshold = r.Double("threshold");
        if (!r.ok()) return r.status();
        return MakeCudaCodec<BlocksparseCudaCodec>(m, static_cast<uint32_t>(block), threshold);
      });
}

}  // namespace bytecomp::compress::cuda
