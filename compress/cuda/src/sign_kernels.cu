// The sign codecs on the GPU (signsgd, signum, efsignsgd, onebit): format/sign_format.h's
// payload, values and checks. A warp ballot packs 32 elements into one word of sign bits.
#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/sign_format.h"
#include "bytecomp/compress/memory_math.h"
#include "bytecomp/compress/params.h"
#include "cuda_codec_base.h"
#include "cuda_registry.h"

namespace bytecomp::compress::cuda {
namespace {

using sign::SignValues;

// Four words a warp a step (their loads issued together); the largest |x| bits into stats, and
// with kSums the reduction's sign sums (ReduceStatsKernel's): the fused pass.
template <bool kSums>
__global__ void SignPackKernel(const float* __restrict__ x, size_t n, uint8_t* __restrict__ bits,
                               SignValues values, Feedback fb, DeviceStats* stats) {
  const unsigned lane = threadIdx.x & 31u;
  unsigned int max_bits = 0;
  double pos = 0.0, neg = 0.0;
  unsigned long long neg_count = 0;
  auto load = [&](size_t base) { return base + lane < n ? x[base + lane] : 0.0f; };
  auto pack = [&](size_t base, float c) {
    const size_t i = base + lane;
    const bool valid = i < n;
    // Bit `lane` of the ballot is sign::WordBit(c, lane): the word the host tests build.
    const uint32_t word = __ballot_sync(0xffffffffu, valid && SignBit(c) != 0u);
    if (valid) {
      fb.Update(i, c, sign::Decoded(c, values));
      max_bits = MaxOp()(max_bits, FloatBits(c) & 0x7fffffffu);
      if constexpr (kSums) AddSignSums(c, &pos, &neg, &neg_count);
    }
    if (lane == 0) sign::StoreWord(bits, n, base, word);
  };
  const size_t stride = GridStride();
  size_t base = GridStart() - lane;  // the same for the whole warp
  for (; base + 3 * stride < n; base += 4 * stride) {
    const float c0 = load(base), c1 = load(base + stride), c2 = load(base + 2 * stride),
                c3 = load(base + 3 * stride);
    pack(base, c0);
    pack(base + stride, c1);
    pack(base + 2 * stride, c2);
    pack(base + 3 * stride, c3);
  }
  for (; base < n; base += stride) pack(base, load(base));
  RecordBlockMaxAbsBits(max_bits, stats);
  if constexpr (kSums) {
    const double p = BlockSum(pos), q = BlockSum(neg);
    const unsigned long long c = BlockSum(neg_count);
    if (threadIdx.x == 0) {
      atomicAdd(&stats->non_negative_sum, p);
      atomicAdd(&stats->negative_sum, q);
      atomicAdd(&stats->count, c);
    }
  }
}

__global__ void SignUnpackKernel(const uint8_t* __restrict__ bits, size_t n, SignValues values,
                                 float* __restrict__ out) {
  for (size_t i = GridStart(); i < n; i += GridStride()) {
    out[i] = ((bits[i / 8] >> (i % 8)) & 1u) ? values.set : values.clear;
  }
}

// The padding bits after the last sign bit (one thread).
__global__ void SignPaddingKernel(const uint8_t* __restrict__ bits, size_t n, DeviceStats* stats) {
  RecordError(stats, sign::CheckPadding(bits, n));
}

// signum's momentum: m = (1 - beta) * g + beta * m, m = g in the first round.
__global__ void SignumBlendKernel(const float* __restrict__ g, float* __restrict__ m, size_t n,
                                  float keep, float beta, bool first_round) {
  for (size_t i = GridStart(); i < n; i += GridStride()) {
    m[i] = first_round ? g[i] : SignumBlend(g[i], m[i], keep, beta);
  }
}

// Which sign codec: how many header values it carries and where they come from.
enum class SignKind { kSignSgd, kSignum, kEfSignSgd, kOnebit };

class SignCudaCodec final : public CudaCodecBase {
 public:
  SignCudaCodec(std::string name, SignKind kind, FusedMemorySettings memory,
                sign::OnebitScaling scaling = sign::OnebitScaling::kMeans, float momentum = 0.9f)
      : CudaCodecBase(std::move(name), memory),
        kind_(kind),
        values_(kind == SignKind::kEfSignSgd ? 1 : (kind == SignKind::kOnebit ? 2 : 0)),
        scaling_(scaling),
        momentum_(momentum) {}

  size_t MaxEncodedBytes(size_t n) const override { return sign::PayloadBytes(values_, n); }

  absl::Status Decode(const uint8_t* encoded, size_t bytes, const CodecContext&, float* output,
                      size_t n, cudaStream_t stream) override {
    const size_t header_bytes = sign::HeaderBytes(values_);
    const uint8_t* header = nullptr;
    BC_ASSIGN(header, ReadHeader(encoded, bytes, header_bytes, stream));
    if (auto s = Malformed(sign::CheckHeader(header, bytes, n, values_)); !s.ok()) return s;
    const SignValues values = sign::ReadValues(header, values_);
    if (auto s = ResetStats(stream); !s.ok()) return s;
    SignPaddingKernel<<<1, 1, 0, stream>>>(encoded + header_bytes, n, stats());
    SignUnpackKernel<<<Blocks(n), kThreads, 0, stream>>>(encoded + header_bytes, n, values, output);
    return CheckDecode(stream);
  }

 protected:
  Reduction reduction() const override {
    return values_ > 0 ? Reduction::kSigns : Reduction::kMaxAbs;
  }
  bool FusesReduction() const override { return true; }

  // The header's values from the reduction's sums (efsignsgd's scale, onebit's two values).
  SignValues ValuesFrom(const DeviceStats& st, size_t n) const {
    sign::SignSums sums;
    sums.non_negative = st.non_negative_sum;
    sums.negative = st.negative_sum;
    sums.negative_count = static_cast<size_t>(st.count);
    if (kind_ == SignKind::kEfSignSgd) {
      const float scale = sign::EfSignScale(sums, n);
      return SignValues{scale, -scale};
    }
    if (kind_ == SignKind::kOnebit) return sign::OnebitValues(scaling_, sums, n);
    return SignValues{};
  }

  absl::StatusOr<const float*> Compensate(const float* g, size_t n, const CodecContext& ctx,
                                          bool first, cudaStream_t stream, Feedback* fb) override {
    if (kind_ != SignKind::kSignum) {
      return CudaCodecBase::Compensate(g, n, ctx, first, stream, fb);
    }
    float* m = nullptr;
    BC_ASSIGN(m, momentum_vector_.Reserve<float>(n));
    SignumBlendKernel<<<Blocks(n), kThreads, 0, stream>>>(g, m, n, 1.0f - momentum_, momentum_,
                                                          first);
    return m;
  }

  absl::StatusOr<size_t> EncodeChecked(const float* x, size_t n, const CodecContext&,
                                       const DeviceStats& st, const Feedback& fb, uint8_t* out,
                                       cudaStream_t stream) override {
    const size_t header_bytes = sign::HeaderBytes(values_);
    uint8_t* bits = out + header_bytes;
    SignValues values;  // +-1: signsgd, signum, onebit without scaling
    if (fused_pass()) {
      // No memory to update: the bits first, the pack kernel adding the sums that the values
      // (the header) come from.
      if (values_ > 0) {
        SignPackKernel<true>
            <<<ReduceBlocks(n), kThreads, 0, stream>>>(x, n, bits, values, fb, stats());
      } else {
        SignPackKernel<false>
            <<<ReduceBlocks(n), kThreads, 0, stream>>>(x, n, bits, values, fb, stats());
      }
      DeviceStats fused;
      BC_ASSIGN(fused, ReadStats(stream));
      if (auto s = CheckFusedStats(fused, x, n, stream); !s.ok()) return s;
      values = ValuesFrom(fused, n);
      sign::WriteHeader(header_scratch(), static_cast<uint32_t>(n), values_, values);
      BC_CUDA_TRY(WriteHeader(out, header_bytes, stream));
      return Launched(sign::PayloadBytes(values_, n));
    }
    values = ValuesFrom(st, n);
    sign::WriteHeader(header_scratch(), static_cast<uint32_t>(n), values_, values);
    BC_CUDA_TRY(WriteHeader(out, header_bytes, stream));
    SignPackKernel<false>
        <<<ReduceBlocks(n), kThreads, 0, stream>>>(x, n, bits, values, fb, stats());
    return Launched(sign::PayloadBytes(values_, n));
  }

 private:
  SignKind kind_;
  int values_;
  sign::OnebitScaling scaling_;
  float momentum_;
  DeviceBuffer momentum_vector_;  // signum
};

}  // namespace

void RegisterSignCudaCodecs(CudaCodecRegistry& registry) {
  registry.MustRegisterLikeCpu("signsgd", [](const CodecParams&, const FusedMemorySettings& m) {
    return MakeCudaCodec<SignCudaCodec>("signsgd", SignKind::kSignSgd, m);
  });
  registry.MustRegisterLikeCpu("efsignsgd", [](const CodecParams&, const FusedMemorySettings& m) {
    return MakeCudaCodec<SignCudaCodec>("efsignsgd", SignKind::kEfSignSgd, m);
  });
  registry.MustRegisterLikeCpu(
      "signum",
      [](const CodecParams& params,
         const FusedMemorySettings& m) -> absl::StatusOr<std::unique_ptr<CudaCodec>> {
        ParamReader r(params);
        const float momentum = static_cast<float>(r.Double("momentum"));
        if (!r.ok()) return r.status();
        return MakeCudaCodec<SignCudaCodec>("signum", SignKind::kSignum, m,
                                            sign::OnebitScaling::kMeans, momentum);
      });
  registry.MustRegisterLikeCpu(
      "onebit",
      [](const CodecParams& params,
         const FusedMemorySettings& m) -> absl::StatusOr<std::unique_ptr<CudaCodec>> {
        ParamReader r(params);
        const sign::OnebitScaling scaling = sign::OnebitScalingNamed(r.String("scaling"));
        if (!r.ok()) return r.status();
        return MakeCudaCodec<SignCudaCodec>("onebit", SignKind::kOnebit, m, scaling);
      });
}

}  // namespace bytecomp::compress::cuda
