// The quantisation codecs on the GPU (qsgd, terngrad, natural): format/qsgd_format.h,
// terngrad_format.h and natural_format.h's payloads, scalars and per-thread work (a group of 8
// qsgd codes or one 8-bit code, a byte of 4 ternary codes, one natural code a thread).
#include <cub/block/block_reduce.cuh>

#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/natural_format.h"
#include "bytecomp/compress/format/qsgd_format.h"
#include "bytecomp/compress/format/terngrad_format.h"
#include "bytecomp/compress/params.h"
#include "cuda_codec_base.h"
#include "cuda_registry.h"

namespace bytecomp::compress::cuda {
namespace {

// ---- qsgd: per-bucket norms (a warp a bucket up to kWarpBucket elements, else a block), then
// 8 codes (code_bits bytes) a thread, or one 8-bit code a thread.

__global__ void QsgdNormKernel(const float* __restrict__ x, size_t n, size_t bucket,
                               float* __restrict__ norms_out, uint8_t* __restrict__ norms_wire) {
  using BlockReduceD = cub::BlockReduce<double, kThreads>;
  __shared__ typename BlockReduceD::TempStorage temp;
  const size_t buckets = qsgd::Buckets(n, bucket);
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
      const float norm = qsgd::NormFromSumOfSquares(total);
      norms_out[b] = norm;
      PutF32(norms_wire + 4 * b, norm);
    }
    __syncthreads();
  }
}

// Norms a warp a bucket (buckets up to a few thousand elements: the defaults' 128 fill a
// block's worth of work per warp instead of a block per bucket), the largest |x| bits into stats
// (the fused pass's finite check).
__global__ void QsgdNormWarpKernel(const float* __restrict__ x, size_t n, size_t bucket,
                                   float* __restrict__ norms_out, uint8_t* __restrict__ norms_wire,
                                   DeviceStats* stats) {
  const unsigned lane = threadIdx.x & 31u;
  const size_t buckets = qsgd::Buckets(n, bucket);
  unsigned int max_bits = 0;
  for (size_t b = GridStart() / 32; b < buckets; b += GridStride() / 32) {  // the warp's
    const size_t begin = b * bucket;
    const size_t end = begin + bucket < n ? begin + bucket : n;
    double squares = 0.0;
    for (size_t i = begin + lane; i < end; i += 32) {
      const float v = x[i];
      max_bits = MaxOp()(max_bits, FloatBits(v) & 0x7fffffffu);
      const double d = static_cast<double>(v);
      squares += d * d;
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
      squares += __shfl_xor_sync(0xffffffffu, squares, offset);
    }
    if (lane == 0) {
      const float norm = qsgd::NormFromSumOfSquares(squares);
      norms_out[b] = norm;
      PutF32(norms_wire + 4 * b, norm);
    }
  }
  RecordBlockMaxAbsBits(max_bits, stats);
}

// 8-bit codes (qsgd::CodesAreBytes): a thread an element.
__global__ void QsgdByteKernel(const float* __restrict__ x, size_t n, size_t bucket,
                               const float* __restrict__ norms, uint32_t quantum_num,
                               CounterRandom random, uint8_t* __restrict__ codes, Feedback fb) {
  for (size_t i = GridStart(); i < n; i += GridStride()) {
    codes[i] =
        qsgd::EncodeByte(x, i, bucket, norms, quantum_num, random,
                         [&](size_t e, float c, float decoded) { fb.Update(e, c, decoded); });
  }
}

__global__ void QsgdDecodeByteKernel(const uint8_t* __restrict__ payload, size_t n, size_t bucket,
                                     uint32_t quantum_num, float* __restrict__ out,
                                     DeviceStats* stats) {
  for (size_t i = GridStart(); i < n; i += GridStride()) {
    RecordError(stats, qsgd::DecodeByte(payload, n, i, bucket, quantum_num, out));
  }
}

__global__ void QsgdCodeKernel(const float* __restrict__ x, size_t n, size_t bucket,
                               const float* __restrict__ norms, uint32_t quantum_num,
                               uint32_t level_bits, CounterRandom random,
                               uint8_t* __restrict__ packed, Feedback fb) {
  const size_t groups = (n + 7) / 8;
  for (size_t g = GridStart(); g < groups; g += GridStride()) {
    qsgd::EncodeGroup(x, n, g, bucket, norms, quantum_num, level_bits, random, packed,
                      [&](size_t i, float c, float decoded) { fb.Update(i, c, decoded); });
  }
}

__global__ void QsgdDecodeKernel(const uint8_t* __restrict__ payload, size_t n, size_t bucket,
                                 uint32_t quantum_num, uint32_t level_bits, float* __restrict__ out,
                                 DeviceStats* stats) {
  const size_t groups = (n + 7) / 8;
  for (size_t g = GridStart(); g < groups; g += GridStride()) {
    RecordError(stats, qsgd::DecodeGroup(payload, n, g, bucket, quantum_num, level_bits, out));
  }
}

// Buckets up to this many elements take a warp each for their norm (QsgdNormWarpKernel).
constexpr size_t kWarpBucket = 4096;

class QsgdCudaCodec final : public CudaCodecBase {
 public:
  QsgdCudaCodec(FusedMemorySettings memory, uint32_t quantum_num, size_t bucket)
      : CudaCodecBase("qsgd", memory),
        quantum_num_(quantum_num),
        bucket_(bucket),
        level_bits_(BitsFor(quantum_num)) {}

  size_t MaxEncodedBytes(size_t n) const override {
    return qsgd::PayloadBytes(n, bucket_, level_bits_);
  }

  absl::Status Decode(const uint8_t* encoded, size_t bytes, const CodecContext&, float* output,
                      size_t n, cudaStream_t stream) override {
    if (auto header = ReadCountedHeader(encoded, bytes, 4, n, stream); !header.ok()) {
      return header.status();
    }
    if (auto s = ResetStats(stream); !s.ok()) return s;
    if (qsgd::CodesAreBytes(level_bits_)) {
      QsgdDecodeByteKernel<<<Blocks(n), kThreads, 0, stream>>>(encoded + 4, n, bucket_,
                                                               quantum_num_, output, stats());
    } else {
      QsgdDecodeKernel<<<Blocks((n + 7) / 8), kThreads, 0, stream>>>(
          encoded + 4, n, bucket_, quantum_num_, level_bits_, output, stats());
    }
    return CheckDecode(stream);
  }

 protected:
  absl::StatusOr<size_t> EncodeChecked(const float* x, size_t n, const CodecContext& ctx,
                                       const DeviceStats&, const Feedback& fb, uint8_t* out,
                                       cudaStream_t stream) override {
    const size_t buckets = qsgd::Buckets(n, bucket_);
    float* norms = nullptr;
    BC_ASSIGN(norms, norms_.Reserve<float>(buckets));
    PutU32(header_scratch(), static_cast<uint32_t>(n));
    BC_CUDA_TRY(WriteHeader(out, 4, stream));
    if (bucket_ <= kWarpBucket) {
      QsgdNormWarpKernel<<<ReduceBlocks(buckets * 32), kThreads, 0, stream>>>(x, n, bucket_, norms,
                                                                              out + 4, stats());
    } else {
      QsgdNormKernel<<<Blocks(buckets * kThreads), kThreads, 0, stream>>>(x, n, bucket_, norms,
                                                                          out + 4);
    }
    // Where the reduction pass was fused, the norms' pass checked x; the memory is updated only
    // by the codes, after the check.
    if (auto s = FinishFusedPass(x, n, stream); !s.ok()) return s;
    uint8_t* codes = out + 4 + 4 * buckets;
    if (qsgd::CodesAreBytes(level_bits_)) {
      QsgdByteKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, bucket_, norms, quantum_num_,
                                                         StreamOf(ctx), codes, fb);
    } else {
      QsgdCodeKernel<<<Blocks((n + 7) / 8), kThreads, 0, stream>>>(
          x, n, bucket_, norms, quantum_num_, level_bits_, StreamOf(ctx), codes, fb);
    }
    return Launched(MaxEncodedBytes(n));
  }
  bool FusesReduction() const override { return bucket_ <= kWarpBucket; }
  bool ChecksBeforeMemoryUpdates() const override { return true; }

 private:
  uint32_t quantum_num_;
  size_t bucket_;
  uint32_t level_bits_;
  DeviceBuffer norms_;
};

// ---- terngrad: 4 codes a byte, one byte a thread.

__global__ void TernEncodeKernel(const float* __restrict__ x, size_t n, float clip, float scale,
                                 CounterRandom random, uint8_t* __restrict__ codes, Feedback fb) {
  const size_t bytes = terngrad::CodeBytes(n);
  for (size_t g = GridStart(); g < bytes; g += GridStride()) {
    codes[g] =
        terngrad::EncodeByte(x, n, g, clip, scale, random,
                             [&](size_t i, float c, float decoded) { fb.Update(i, c, decoded); });
  }
}

__global__ void TernDecodeKernel(const uint8_t* __restrict__ codes, size_t n, float scale,
                                 float* __restrict__ out, DeviceStats* stats) {
  const size_t bytes = terngrad::CodeBytes(n);
  for (size_t g = GridStart(); g < bytes; g += GridStride()) {
    RecordError(stats, terngrad::DecodeByte(codes[g], n, g, scale, out));
  }
}

class TernGradCudaCodec final : public CudaCodecBase {
 public:
  explicit TernGradCudaCodec(FusedMemorySettings memory) : CudaCodecBase("terngrad", memory) {}

  size_t MaxEncodedBytes(size_t n) const override { return terngrad::PayloadBytes(n); }

  absl::Status Decode(const uint8_t* encoded, size_t bytes, const CodecContext&, float* output,
                      size_t n, cudaStream_t stream) override {
    float scale = 0.0f;
    BC_ASSIGN(scale, ReadCountedHeaderValue(encoded, bytes, 8, n, kScaleValue, stream));
    if (auto s = ResetStats(stream); !s.ok()) return s;
    TernDecodeKernel<<<Blocks(terngrad::CodeBytes(n)), kThreads, 0, stream>>>(encoded + 8, n, scale,
                                                                              output, stats());
    return CheckDecode(stream);
  }

 protected:
  Reduction reduction() const override { return Reduction::kSquares; }

  absl::StatusOr<size_t> EncodeChecked(const float* x, size_t n, const CodecContext& ctx,
                                       const DeviceStats& st, const Feedback& fb, uint8_t* out,
                                       cudaStream_t stream) override {
    const terngrad::ClipScale cs = terngrad::ClipAndScale(st.sum_of_squares, n, st.max_abs_bits);
    PutU32(header_scratch(), static_cast<uint32_t>(n));
    PutF32(header_scratch() + 4, cs.scale);
    BC_CUDA_TRY(WriteHeader(out, 8, stream));
    TernEncodeKernel<<<Blocks(terngrad::CodeBytes(n)), kThreads, 0, stream>>>(
        x, n, cs.clip, cs.scale, StreamOf(ctx), out + 8, fb);
    return Launched(terngrad::PayloadBytes(n));
  }
};

// ---- natural: one byte an element.

__global__ void NaturalEncodeKernel(const float* __restrict__ x, size_t n, uint32_t exponent_low,
                                    CounterRandom random, uint8_t* __restrict__ out, Feedback fb) {
  for (size_t i = GridStart(); i < n; i += GridStride()) {
    const float v = x[i];
    const uint8_t code = NaturalCode(v, exponent_low, RandomBits(random, static_cast<uint32_t>(i)));
    out[i] = code;
    fb.Update(i, v, NaturalValue(code, exponent_low));
  }
}

__global__ void NaturalDecodeKernel(const uint8_t* __restrict__ codes, size_t n,
                                    uint32_t exponent_low, float* __restrict__ out,
                                    DeviceStats* stats) {
  for (size_t i = GridStart(); i < n; i += GridStride()) {
    const uint8_t code = codes[i];
    const FormatError e = natural::CheckCode(code, exponent_low);
    RecordError(stats, e);
    out[i] = e.ok() ? NaturalValue(code, exponent_low) : 0.0f;
  }
}

class NaturalCudaCodec final : public CudaCodecBase {
 public:
  explicit NaturalCudaCodec(FusedMemorySettings memory) : CudaCodecBase("natural", memory) {}

  size_t MaxEncodedBytes(size_t n) const override { return natural::PayloadBytes(n); }

  absl::Status Decode(const uint8_t* encoded, size_t bytes, const CodecContext&, float* output,
                      size_t n, cudaStream_t stream) override {
    const uint8_t* header = nullptr;
    BC_ASSIGN(header, ReadHeader(encoded, bytes, 1, stream));
    FormatError e = CheckPayloadSize(bytes, MaxEncodedBytes(n), n);
    const uint32_t exponent_low = e.ok() ? header[0] : 0;
    if (e.ok()) e = natural::CheckExponentLow(exponent_low);
    if (auto s = Malformed(e); !s.ok()) return s;
    if (auto s = ResetStats(stream); !s.ok()) return s;
    NaturalDecodeKernel<<<Blocks(n), kThreads, 0, stream>>>(encoded + 1, n, exponent_low, output,
                                                            stats());
    return CheckDecode(stream);
  }

 protected:
  absl::StatusOr<size_t> EncodeChecked(const float* x, size_t n, const CodecContext& ctx,
                                       const DeviceStats& st, const Feedback& fb, uint8_t* out,
                                       cudaStream_t stream) override {
    const uint32_t exponent_low = NaturalExponentLow(st.max_abs_bits >> 23);
    header_scratch()[0] = static_cast<uint8_t>(exponent_low);
    BC_CUDA_TRY(WriteHeader(out, 1, stream));
    NaturalEncodeKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, exponent_low, StreamOf(ctx),
                                                            out + 1, fb);
    return Launched(natural::PayloadBytes(n));
  }
};

}  // namespace

void RegisterQuantCudaCodecs(CudaCodecRegistry& registry) {
  registry.MustRegisterLikeCpu(
      "qsgd",
      [](const CodecParams& params,
         const FusedMemorySettings& m) -> absl::StatusOr<std::unique_ptr<CudaCodec>> {
        ParamReader r(params);
        const auto quantum_num = static_cast<uint32_t>(r.Int("quantum_num"));
        const auto bucket = static_cast<size_t>(r.Int("bucket_size"));
        if (!r.ok()) return r.status();
        return MakeCudaCodec<QsgdCudaCodec>(m, quantum_num, bucket);
      });
  registry.MustRegisterLikeCpu("terngrad", [](const CodecParams&, const FusedMemorySettings& m) {
    return MakeCudaCodec<TernGradCudaCodec>(m);
  });
  registry.MustRegisterLikeCpu("natural", [](const CodecParams&, const FusedMemorySettings& m) {
    return MakeCudaCodec<NaturalCudaCodec>(m);
  });
}

}  // namespace bytecomp::compress::cuda
