// The sparsification codecs on the GPU: topk (format/topk_select.h: a four-pass radix select of
// the k-th largest |x|, ties in index order), dgc (format/dgc_threshold.h: the host-drawn
// sample, the threshold search) and randomk (format/randomk_format.h: host-drawn shared
// indices, as the CPU codec's sequential generator draws them). topk and dgc send the sparse
// message (sparse_message.h).
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

namespace bytecomp::compress::cuda {
namespace {

// ---- topk

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
  for (size_t i = GridStart(); i < n; i += GridStride()) {
    const uint32_t a = FloatBits(x[i]) & 0x7fffffffu;
    if (topk::RadixMatches(a, prefix, shift)) atomicAdd(&local[(a >> shift) & 255u], 1u);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < 256; b += blockDim.x) {
    if (local[b] != 0) atomicAdd(&hist[b], local[b]);
  }
}

__global__ void RadixSelectDigitKernel(const uint32_t* __restrict__ hist, int shift,
                                       RadixState* state) {
  topk::RadixSelectDigit(hist, shift, &state->prefix, &state->need);
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

class TopkCudaCodec final : public SparseMessageCudaCodec {
 public:
  TopkCudaCodec(FusedMemorySettings memory, double ratio)
      : SparseMessageCudaCodec("topk", memory), ratio_(ratio) {}
  ~TopkCudaCodec() override { cudaFree(radix_); }

  size_t MaxEncodedBytes(size_t n) const override {
    return sparse::MaxMessageBytes(sparse::KeptCount(ratio_, n));
  }

 protected:
  int64_t RequiredK(size_t n) const override {
    return static_cast<int64_t>(sparse::KeptCount(ratio_, n));
  }

  absl::StatusOr<size_t> EncodeChecked(const float* x, size_t n, const CodecContext&,
                                       const DeviceStats&, const Feedback& fb, uint8_t* out,
                                       cudaStream_t stream) override {
    const size_t k = sparse::KeptCount(ratio_, n);
    if (k == 0) return EmptyMessage(out, n, stream);
    if (radix_ == nullptr) BC_CUDA_TRY(cudaMalloc(&radix_, sizeof(RadixState)));
    uint32_t *hist = nullptr, *flags = nullptr, *ranks = nullptr;
    BC_ASSIGN(hist, hist_.Reserve<uint32_t>(256));
    BC_ASSIGN(flags, flags_.Reserve<uint32_t>(n));
    BC_ASSIGN(ranks, ranks_.Reserve<uint32_t>(n));
    const RadixState initial{0u, static_cast<uint32_t>(k)};
    std::memcpy(header_scratch(), &initial, sizeof(initial));
    BC_CUDA_TRY(
        cudaMemcpyAsync(radix_, header_scratch(), sizeof(initial), cudaMemcpyHostToDevice, stream));
    for (int shift = 24; shift >= 0; shift -= 8) {
      BC_CUDA_TRY(cudaMemsetAsync(hist, 0, 256 * sizeof(uint32_t), stream));
      RadixHistogramKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, shift, radix_, hist);
      RadixSelectDigitKernel<<<1, 1, 0, stream>>>(hist, shift, radix_);
    }
    TopkFlagsKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, radix_, nullptr, flags, true);
    BC_CUDA_TRY(ExclusiveSum(flags, ranks, n, stream));
    TopkFlagsKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, radix_, ranks, flags, false);
    return FinishMessage(x, n, k, flags, out, fb, stream);
  }

 private:
  double ratio_;
  RadixState* radix_ = nullptr;
  DeviceBuffer hist_, flags_, ranks_;
};

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

// Gathers the values at the shared indices, optionally scaled by the stratum size.
__global__ void RandomkGatherKernel(const float* __restrict__ x, const uint32_t* __restrict__ idx,
                                    const uint32_t* __restrict__ sizes, size_t k, bool scale,
                                    uint8_t* __restrict__ values, Feedback fb, DeviceStats* stats) {
  for (size_t j = GridStart(); j < k; j += GridStride()) {
    const uint32_t i = idx[j];
    const float c = x[i];
    const float v = scale ? c * static_cast<float>(sizes[j]) : c;
    // x * n/k overflowed
    if (!IsFiniteFloat(v)) RecordError(stats, MakeFormatError(FormatErrorCode::kValuesNotFinite));
    reinterpret_cast<float*>(values)[j] = v;
    fb.Update(i, c, v);
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
    uint32_t* idx = nullptr;
    BC_ASSIGN(idx, UploadIndices(n, k, ctx, stream));
    if (auto s = ResetStats(stream); !s.ok()) return s;
    BC_CUDA_TRY(cudaMemsetAsync(output, 0, 4 * n, stream));
    LaunchScatterValues(encoded + randomk::kHeaderBytes, idx, k, output, stats(), stream);
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
      uint32_t* idx = nullptr;
      BC_ASSIGN(idx, UploadIndices(n, k, ctx, stream));
      if (auto s = ResetStats(stream); !s.ok()) return s;
      RandomkGatherKernel<<<Blocks(k), kThreads, 0, stream>>>(
          x, idx, idx + k, k, scale_, out + randomk::kHeaderBytes, fb, stats());
      // Also waits for the index upload, whose host buffer the next call reuses.
      DeviceStats st;
      BC_ASSIGN(st, ReadStats(stream));
      if (st.error_code != 0) {
        return absl::InvalidArgumentError(
            "codec 'randomk': a value times its scale n/k overflows fp32 (|x| near 3.4e38)");
      }
    }
    return Launched(randomk::PayloadBytes(k));
  }

 private:
  // The k shared indices of (n, ctx) then their strata's sizes, drawn on the host exactly as
  // the CPU codec draws them, on the device.
  absl::StatusOr<uint32_t*> UploadIndices(size_t n, size_t k, const CodecContext& ctx,
                                          cudaStream_t stream) {
    void* host = nullptr;
    BC_ASSIGN(host, host_indices_.Reserve(8 * std::max<size_t>(k, 1)));
    auto* idx = static_cast<uint32_t*>(host);
    uint32_t* sizes = idx + k;
    randomk::ForEachRandomIndex(n, k, SharedSeed(ctx, randomk::kRandomkSalt),
                                [&](size_t j, size_t i, size_t, uint32_t size) {
                                  idx[j] = static_cast<uint32_t>(i);
                                  sizes[j] = size;
                                });
    uint32_t* d = nullptr;
    BC_ASSIGN(d, indices_.Reserve<uint32_t>(2 * k));
    BC_CUDA_TRY(cudaMemcpyAsync(d, idx, 8 * k, cudaMemcpyHostToDevice, stream));
    return d;
  }

  double ratio_;
  bool scale_;
  HostBuffer host_indices_;
  DeviceBuffer indices_;
};

}  // namespace

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
