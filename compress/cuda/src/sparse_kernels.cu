// The sparsification codecs on the GPU: topk (format/topk_select.h: a four-pass radix select of
// the k-th largest |x|, ties in index order), dgc (format/dgc_threshold.h: the host-drawn
// sample, the threshold search) and randomk (format/randomk_format.h: the shared indices, a
// thread drawing each from its counter). topk and dgc send the sparse message (sparse_message.h).
#include <algorithm>
#include <cstring>
#include <vector>

#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/dgc_threshold.h"
#include "bytecomp/compress/format/randomk_format.h"
#include "bytecomp/compress/format/sparse_format.h"
#include "bytecomp/compress/format/topk_select.h"
#include "bytecomp/compress/params.h"
#include "cuda_registry.h"
#include "sparse_message.h"
#include "topk_codec.h"

namespace bytecomp::compress::cuda {
namespace {

// ---- topk

// One radix pass's 256-bin histogram of the |x| bit patterns that match the prefix so far,
// four loads a thread in flight; with stats (the first pass) the largest bits into stats too,
// the finite check of a fused reduction pass.
__global__ void RadixHistogramKernel(const float* __restrict__ x, size_t n, int shift,
                                     const RadixState* state, uint32_t* __restrict__ hist,
                                     DeviceStats* stats) {
  __shared__ uint32_t local[256];
  for (int b = threadIdx.x; b < 256; b += blockDim.x) local[b] = 0;
  __syncthreads();
  const uint32_t prefix = state->prefix;
  unsigned int max_bits = 0;
  ForEachLoaded(x, n, [&](size_t, float v) {
    const uint32_t a = FloatBits(v) & 0x7fffffffu;
    max_bits = MaxOp()(max_bits, a);
    if (topk::RadixMatches(a, prefix, shift)) atomicAdd(&local[(a >> shift) & 255u], 1u);
  });
  __syncthreads();
  for (int b = threadIdx.x; b < 256; b += blockDim.x) {
    if (local[b] != 0) atomicAdd(&hist[b], local[b]);
  }
  if (stats != nullptr) RecordBlockMaxAbsBits(max_bits, stats);
}

// The pass's digit (one thread, on the histogram copied into shared memory by 256 threads: a
// walk over 256 global words would take a dozen microseconds).
__global__ void RadixSelectDigitKernel(const uint32_t* __restrict__ hist, int shift,
                                       RadixState* state) {
  __shared__ uint32_t bins[256];
  for (int b = threadIdx.x; b < 256; b += blockDim.x) bins[b] = hist[b];
  __syncthreads();
  if (threadIdx.x != 0) return;
  topk::RadixSelectDigit(bins, shift, &state->prefix, &state->need);
  state->equal = bins[(state->prefix >> shift) & 255u];
}

// flags[i] for topk: |x| > threshold, or == threshold among the first `need` such elements
// (tie_rank = the exclusive count of equal elements before i). The ties pass flags the equal
// elements, whose prefix sums are the ranks.
__global__ void TopkFlagsKernel(const float* __restrict__ x, size_t n, const RadixState* state,
                                const uint32_t* __restrict__ tie_rank, uint32_t* __restrict__ flags,
                                bool ties_pass) {
  const uint32_t t = state->prefix;
  const uint32_t ties = state->need;
  for (size_t i = GridStart(); i < n; i += GridStride()) {
    const uint32_t a = FloatBits(x[i]) & 0x7fffffffu;
    flags[i] =
        ties_pass ? (a == t ? 1u : 0u) : ((a > t || (a == t && tie_rank[i] < ties)) ? 1u : 0u);
  }
}

// ---- dgc

class DgcCudaCodec final : public SparseMessageCudaCodec {
 public:
  DgcCudaCodec(FusedMemorySettings memory, double ratio)
      : SparseMessageCudaCodec("dgc", memory), ratio_(ratio) {}

  size_t MaxEncodedBytes(size_t n) const override { return sparse::MaxMessageBytes(n); }

 protected:
  absl::StatusOr<size_t> EncodeChecked(const float* x, size_t n, const CodecContext& ctx,
                                       const DeviceStats&, const Feedback& fb, uint8_t* out,
                                       cudaStream_t stream) override {
    if (n == 0) return EmptyMessage(out, n, stream);
    std::vector<uint32_t> sample;
    BC_ASSIGN(sample, sample_.Read(x, n, NodeSeed(ctx, dgc::kDgcSalt), stream));
    for (uint32_t& bits : sample) bits &= 0x7fffffffu;  // |x|
    float threshold = dgc::SampleThreshold(sample, ratio_);
    // The search: count, adjust, count again.
    const double target = dgc::Target(ratio_, n);
    size_t count = 0;
    BC_ASSIGN(count, CountAtLeast(x, n, dgc::ThresholdBits(threshold), stream));
    for (int step = 0; step < dgc::kMaxSteps && dgc::AdjustThreshold(count, target, &threshold);
         ++step) {
      BC_ASSIGN(count, CountAtLeast(x, n, dgc::ThresholdBits(threshold), stream));
    }
    return FinishMessageAtLeast(x, n, count, dgc::ThresholdBits(threshold), out, fb, stream);
  }

 private:
  double ratio_;
  DeviceSample sample_;
};

// ---- randomk

__global__ void WriteRandomkHeaderKernel(uint8_t* out, uint32_t n, uint32_t k) {
  randomk::WriteHeader(out, n, k);
}

// A block a tile of kStrataPerThread * kThreads strata at a time, a thread kStrataPerThread of
// them: with `check` the block reads the tile's elements (its strata, contiguous) for the
// largest |x| bits (the fused pass's finite check), and each thread gathers its strata's picks
// (randomk_format.h's draw, from its counter), scaled by the stratum size with `scale`.
constexpr int kStrataPerThread = 4;
__global__ void RandomkGatherKernel(const float* __restrict__ x, size_t n, randomk::Strata strata,
                                    uint64_t seed, bool scale, bool check,
                                    uint8_t* __restrict__ values, Feedback fb, DeviceStats* stats) {
  const size_t k = strata.k;
  const size_t per_tile = static_cast<size_t>(kStrataPerThread) * blockDim.x;
  unsigned int max_bits = 0;
  for (size_t first = blockIdx.x * per_tile; first < k; first += gridDim.x * per_tile) {
    size_t begin = 0, end = n;
    uint32_t size = 0;
    randomk::StratumOf(strata, first, &begin, &size);
    if (first + per_tile < k) randomk::StratumOf(strata, first + per_tile, &end, &size);
    if (check) {
      ForEachLoadedStrided(x, begin + threadIdx.x, end, blockDim.x, [&](size_t, float v) {
        max_bits = MaxOp()(max_bits, FloatBits(v) & 0x7fffffffu);
      });
    }
    for (int u = 0; u < kStrataPerThread; ++u) {
      const size_t j = first + static_cast<size_t>(u) * blockDim.x + threadIdx.x;
      if (j >= k) break;
      size_t start;
      const size_t pick = randomk::RandomIndexAt(strata, seed, j, &start, &size);
      const float c = x[pick];
      const float v = scale ? c * static_cast<float>(size) : c;
      // x * n/k overflowed (or x was not finite: the finite check tells which)
      if (!IsFiniteFloat(v)) {
        RecordError(stats, MakeFormatError(FormatErrorCode::kValuesNotFinite));
      }
      reinterpret_cast<float*>(values)[j] = v;
      fb.Update(pick, c, v);
    }
  }
  RecordBlockMaxAbsBits(max_bits, stats);
}

// output[shared index j] = value j, unless a check failed; the output was zeroed.
__global__ void RandomkScatterKernel(const uint8_t* __restrict__ values, randomk::Strata strata,
                                     uint64_t seed, float* __restrict__ out, DeviceStats* stats) {
  for (size_t j = GridStart(); j < strata.k; j += GridStride()) {
    size_t start;
    uint32_t size;
    const size_t i = randomk::RandomIndexAt(strata, seed, j, &start, &size);
    const float v = GetF32(values + 4 * j);
    if (!IsFiniteFloat(v)) RecordError(stats, MakeFormatError(FormatErrorCode::kValuesNotFinite));
    out[i] = v;
  }
}

class RandomkCudaCodec final : public CudaCodecBase {
 public:
  RandomkCudaCodec(FusedMemorySettings memory, double ratio, bool scale)
      : CudaCodecBase("randomk", memory), ratio_(ratio), scale_(scale) {}

  size_t MaxEncodedBytes(size_t n) const override {
    return randomk::PayloadBytes(sparse::KeptCount(ratio_, n));
  }

  absl::Status Decode(const uint8_t* encoded, size_t bytes, const CodecContext& ctx, float* output,
                      size_t n, cudaStream_t stream) override {
    const size_t k = sparse::KeptCount(ratio_, n);
    const uint8_t* header = nullptr;
    BC_ASSIGN(header, ReadHeader(encoded, bytes, randomk::kHeaderBytes, stream));
    if (auto s = Malformed(randomk::CheckHeader(header, bytes, n, k)); !s.ok()) return s;
    if (auto s = ResetStats(stream); !s.ok()) return s;
    BC_CUDA_TRY(cudaMemsetAsync(output, 0, 4 * n, stream));
    if (k > 0) {
      RandomkScatterKernel<<<Blocks(k), kThreads, 0, stream>>>(
          encoded + randomk::kHeaderBytes, randomk::StrataOf(n, k),
          SharedSeed(ctx, randomk::kRandomkSalt), output, stats());
    }
    return CheckDecode(stream);
  }

 protected:
  absl::StatusOr<size_t> EncodeChecked(const float* x, size_t n, const CodecContext& ctx,
                                       const DeviceStats&, const Feedback& fb, uint8_t* out,
                                       cudaStream_t stream) override {
    const size_t k = sparse::KeptCount(ratio_, n);
    WriteRandomkHeaderKernel<<<1, 1, 0, stream>>>(out, static_cast<uint32_t>(n),
                                                  static_cast<uint32_t>(k));
    if (k > 0) {
      if (!fused_pass()) {
        if (auto s = ResetStats(stream); !s.ok()) return s;
      }
      RandomkGatherKernel<<<ReduceBlocks(k, kThreads * kStrataPerThread), kThreads, 0, stream>>>(
          x, n, randomk::StrataOf(n, k), SharedSeed(ctx, randomk::kRandomkSalt), scale_,
          fused_pass(), out + randomk::kHeaderBytes, fb, stats());
      DeviceStats st;
      BC_ASSIGN(st, ReadStats(stream));
      if (auto s = CheckFusedStats(st, x, n, stream); !s.ok()) return s;
      if (st.error_code != 0) {
        return absl::InvalidArgumentError(
            "codec 'randomk': a value times its scale n/k overflows fp32 (|x| near 3.4e38)");
      }
    } else if (auto s = FinishFusedPass(x, n, stream); !s.ok()) {
      return s;
    }
    return Launched(randomk::PayloadBytes(k));
  }
  bool FusesReduction() const override { return true; }

 private:
  double ratio_;
  bool scale_;
};

}  // namespace

TopkCudaCodec::~TopkCudaCodec() { cudaFree(radix_); }

size_t TopkCudaCodec::MaxEncodedBytes(size_t n) const {
  return sparse::MaxMessageBytes(sparse::KeptCount(ratio_, n));
}

int64_t TopkCudaCodec::RequiredK(size_t n) const {
  return static_cast<int64_t>(sparse::KeptCount(ratio_, n));
}

absl::StatusOr<size_t> TopkCudaCodec::EncodeChecked(const float* x, size_t n, const CodecContext&,
                                                    const DeviceStats&, const Feedback& fb,
                                                    uint8_t* out, cudaStream_t stream) {
  const size_t k = sparse::KeptCount(ratio_, n);
  if (k == 0) return EmptyMessage(out, n, stream);
  if (radix_ == nullptr) BC_CUDA_TRY(cudaMalloc(&radix_, sizeof(RadixState)));
  uint32_t *hist = nullptr, *flags = nullptr, *ranks = nullptr;
  BC_ASSIGN(hist, hist_.Reserve<uint32_t>(256));
  const RadixState initial{0u, static_cast<uint32_t>(k), 0u};
  std::memcpy(header_scratch(), &initial, sizeof(initial));
  BC_CUDA_TRY(
      cudaMemcpyAsync(radix_, header_scratch(), sizeof(initial), cudaMemcpyHostToDevice, stream));
  // Four passes over x, the first also the finite check where the reduction pass was fused.
  for (int shift = 24; shift >= 0; shift -= 8) {
    BC_CUDA_TRY(cudaMemsetAsync(hist, 0, 256 * sizeof(uint32_t), stream));
    RadixHistogramKernel<<<ReduceBlocks(n), kThreads, 0, stream>>>(x, n, shift, radix_, hist,
                                                                   shift == 24 ? stats() : nullptr);
    RadixSelectDigitKernel<<<1, 256, 0, stream>>>(hist, shift, radix_);
  }
  // The threshold and the finite check read back together.
  RadixState* found_host = nullptr;
  BC_ASSIGN(found_host, found_.Reserve<RadixState>(1));
  BC_CUDA_TRY(
      cudaMemcpyAsync(found_host, radix_, sizeof(RadixState), cudaMemcpyDeviceToHost, stream));
  DeviceStats st;
  BC_ASSIGN(st, ReadStats(stream));
  if (auto s = CheckFusedStats(st, x, n, stream); !s.ok()) return s;
  const RadixState found = *found_host;
  // Every element equal to the threshold kept (no tie to rank: the usual case for float
  // gradients): the k elements at least the threshold, selected in one pass.
  if (found.need == found.equal) {
    return FinishMessageAtLeast(x, n, k, found.prefix, out, fb, stream);
  }
  // Ties ranked in index order: the first `need` of them.
  BC_ASSIGN(flags, flags_.Reserve<uint32_t>(n));
  BC_ASSIGN(ranks, ranks_.Reserve<uint32_t>(n));
  TopkFlagsKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, radix_, nullptr, flags, true);
  BC_CUDA_TRY(ExclusiveSum(flags, ranks, n, stream));
  TopkFlagsKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, radix_, ranks, flags, false);
  return FinishMessage(x, n, k, flags, out, fb, stream);
}

void RegisterSparseCudaCodecs(CudaCodecRegistry& registry) {
  registry.MustRegisterLikeCpu("topk", RatioFactory<TopkCudaCodec>());
  registry.MustRegisterLikeCpu(
      "randomk",
      [](const CodecParams& params,
         const FusedMemorySettings& m) -> absl::StatusOr<std::unique_ptr<CudaCodec>> {
        ParamReader r(params);
        const double ratio = r.Double("ratio");
        const bool scale = r.Bool("scale");
        if (!r.ok()) return r.status();
        return MakeCudaCodec<RandomkCudaCodec>(m, ratio, scale);
      });
  registry.MustRegisterLikeCpu("dgc", RatioFactory<DgcCudaCodec>());
}

}  // namespace bytecomp::compress::cuda
