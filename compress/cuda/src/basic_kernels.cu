// fp16 and bf16 on the GPU: format/half_format.h's conversions, an element a thread a step; the
// encode checks the input's finiteness in its pass (FusesReduction).
#include "bytecomp/compress/format/half_format.h"
#include "cuda_codec_base.h"
#include "cuda_registry.h"

namespace bytecomp::compress::cuda {
namespace {

// Four elements a thread a step (their loads issued together), the largest |x| bits into stats
// (the fused finite check).
template <bool kBFloat>
__global__ void HalfEncodeKernel(const float* __restrict__ x, size_t n, uint16_t* __restrict__ out,
                                 Feedback fb, DeviceStats* stats) {
  unsigned int max_bits = 0;
  ForEachLoaded(x, n, [&](size_t i, float c) {
    const uint16_t h = kBFloat ? half::SaturatingBFloat16Bits(c) : half::SaturatingHalfBits(c);
    out[i] = h;
    fb.Update(i, c, kBFloat ? BFloat16BitsToFloat(h) : HalfBitsToFloat(h));
    max_bits = MaxOp()(max_bits, FloatBits(c) & 0x7fffffffu);
  });
  RecordBlockMaxAbsBits(max_bits, stats);
}

template <bool kBFloat>
__global__ void HalfDecodeKernel(const uint16_t* __restrict__ in, size_t n, float* __restrict__ out,
                                 DeviceStats* stats) {
  for (size_t i = GridStart(); i < n; i += GridStride()) {
    const uint16_t h = in[i];
    if (!half::IsFiniteHalfBits(h, kBFloat)) {
      RecordError(stats, MakeFormatError(FormatErrorCode::kPayloadNotFinite));
    }
    out[i] = kBFloat ? BFloat16BitsToFloat(h) : HalfBitsToFloat(h);
  }
}

template <bool kBFloat>
class HalfCudaCodec final : public CudaCodecBase {
 public:
  explicit HalfCudaCodec(FusedMemorySettings memory)
      : CudaCodecBase(kBFloat ? "bf16" : "fp16", memory) {}

  size_t MaxEncodedBytes(size_t n) const override { return half::PayloadBytes(n); }

  absl::Status Decode(const uint8_t* encoded, size_t bytes, const CodecContext&, float* output,
                      size_t n, cudaStream_t stream) override {
    if (auto s = Malformed(CheckPayloadSize(bytes, half::PayloadBytes(n), n)); !s.ok()) return s;
    if (auto s = ResetStats(stream); !s.ok()) return s;
    HalfDecodeKernel<kBFloat><<<Blocks(n), kThreads, 0, stream>>>(
        reinterpret_cast<const uint16_t*>(encoded), n, output, stats());
    return CheckDecode(stream);
  }

 protected:
  absl::StatusOr<size_t> EncodeChecked(const float* x, size_t n, const CodecContext&,
                                       const DeviceStats&, const Feedback& fb, uint8_t* out,
                                       cudaStream_t stream) override {
    HalfEncodeKernel<kBFloat><<<ReduceBlocks(n), kThreads, 0, stream>>>(
        x, n, reinterpret_cast<uint16_t*>(out), fb, stats());
    if (auto s = FinishFusedPass(x, n, stream); !s.ok()) return s;
    return Launched(half::PayloadBytes(n));
  }
  bool FusesReduction() const override { return true; }
};

}  // namespace

void RegisterBasicCudaCodecs(CudaCodecRegistry& registry) {
  registry.MustRegisterLikeCpu("fp16", [](const CodecParams&, const FusedMemorySettings& m) {
    return MakeCudaCodec<HalfCudaCodec<false>>(m);
  });
  registry.MustRegisterLikeCpu("bf16", [](const CodecParams&, const FusedMemorySettings& m) {
    return MakeCudaCodec<HalfCudaCodec<true>>(m);
  });
}

}  // namespace bytecomp::compress::cuda
