// More quantisation codecs on the GPU (u8bit, dithering, inceptionn, sketch):
// format/u8bit_format.h, dithering_format.h, inceptionn_format.h and sketch_format.h's payloads,
// scalars and per-thread work (one u8bit code a thread, a group of 8 dithering codes or sketch
// ids, a byte of 4 inceptionn tags). Every codec fuses the residual memory: its kernels update
// it from each element's decoded value (sketch in a pass of its own, after the means).
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <cstring>
#include <memory>

#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/dithering_format.h"
#include "bytecomp/compress/format/inceptionn_format.h"
#include "bytecomp/compress/format/sketch_format.h"
#include "bytecomp/compress/format/u8bit_format.h"
#include "bytecomp/compress/params.h"
#include "cuda_codec_base.h"
#include "cuda_registry.h"

namespace bytecomp::compress::cuda {
namespace {

// ---- u8bit: one code an element (elementwise.h U8bitCode, the CPU codec's definition).

__global__ void U8bitEncodeKernel(const float* __restrict__ x, size_t n, float max_abs,
                                  uint8_t* __restrict__ codes, Feedback fb) {
  for (size_t i = GridStart(); i < n; i += GridStride()) {
    const float v = x[i];
    const uint8_t code = U8bitCode(v, max_abs);
    codes[i] = code;
    fb.Update(i, v, U8bitValue(code, max_abs));
  }
}

__global__ void U8bitDecodeKernel(const uint8_t* __restrict__ codes, size_t n, float max_abs,
                                  float* __restrict__ out, DeviceStats* stats) {
  for (size_t i = GridStart(); i < n; i += GridStride()) {
    const uint8_t code = codes[i];
    RecordError(stats, u8bit::CheckCode(code, i));
    out[i] = U8bitValue(code, max_abs);
  }
}

class U8bitCudaCodec final : public CudaCodecBase {
 public:
  explicit U8bitCudaCodec(FusedMemorySettings memory) : CudaCodecBase("u8bit", memory) {}

  size_t MaxEncodedBytes(size_t n) const override { return u8bit::PayloadBytes(n); }

  absl::Status Decode(const uint8_t* encoded, size_t bytes, const CodecContext&, float* output,
                      size_t n, cudaStream_t stream) override {
    const uint8_t* header = nullptr;
    BC_ASSIGN(header, ReadHeader(encoded, bytes, u8bit::kHeaderBytes, stream));
    if (auto s = Malformed(u8bit::CheckHeader(header, bytes, n)); !s.ok()) return s;
    const float max_abs = GetF32(header);
    if (auto s = ResetStats(stream); !s.ok()) return s;
    U8bitDecodeKernel<<<Blocks(n), kThreads, 0, stream>>>(encoded + u8bit::kHeaderBytes, n, max_abs,
                                                          output, stats());
    return CheckDecode(stream);
  }

 protected:
  absl::StatusOr<size_t> EncodeChecked(const float* x, size_t n, const CodecContext&,
                                       const DeviceStats& st, const Feedback& fb, uint8_t* out,
                                       cudaStream_t stream) override {
    const float max_abs = BitsToFloat(st.max_abs_bits);
    PutF32(header_scratch(), max_abs);
    BC_CUDA_TRY(WriteHeader(out, u8bit::kHeaderBytes, stream));
    U8bitEncodeKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, max_abs, out + u8bit::kHeaderBytes,
                                                          fb);
    return Launched(u8bit::PayloadBytes(n));
  }
};

// ---- dithering: 8 codes (b bytes) a thread.

struct DitherShape {
  uint32_t k;
  uint32_t level_bits;
  bool natural;
};

__global__ void DitherEncodeKernel(const float* __restrict__ x, size_t n, float norm,
                                   DitherShape shape, CounterRandom random,
                                   uint8_t* __restrict__ packed, Feedback fb) {
  const size_t groups = (n + 7) / 8;
  for (size_t g = GridStart(); g < groups; g += GridStride()) {
    dithering::EncodeGroup(x, n, g, norm, shape.k, shape.level_bits, shape.natural, random, packed,
                           [&](size_t i, float c, float decoded) { fb.Update(i, c, decoded); });
  }
}

__global__ void DitherDecodeKernel(const uint8_t* __restrict__ packed, size_t n, float norm,
                                   DitherShape shape, float* __restrict__ out, DeviceStats* stats) {
  const size_t groups = (n + 7) / 8;
  for (size_t g = GridStart(); g < groups; g += GridStride()) {
    RecordError(stats, dithering::DecodeGroup(packed, n, g, norm, shape.k, shape.level_bits,
                                              shape.natural, out));
  }
}

class DitheringCudaCodec final : public CudaCodecBase {
 public:
  DitheringCudaCodec(FusedMemorySettings memory, uint32_t k, bool natural, bool l2)
      : CudaCodecBase("dithering", memory), shape_{k, BitsFor(k), natural}, l2_(l2) {}

  size_t MaxEncodedBytes(size_t n) const override {
    return dithering::PayloadBytes(n, shape_.level_bits);
  }

  absl::Status Decode(const uint8_t* encoded, size_t bytes, const CodecContext&, float* output,
                      size_t n, cudaStream_t stream) override {
    float norm = 0.0f;
    BC_ASSIGN(norm, ReadCountedHeaderValue(encoded, bytes, dithering::kHeaderBytes, n, kNormValue,
                                           stream));
    if (auto s = ResetStats(stream); !s.ok()) return s;
    DitherDecodeKernel<<<Blocks((n + 7) / 8), kThreads, 0, stream>>>(
        encoded + dithering::kHeaderBytes, n, norm, shape_, output, stats());
    return CheckDecode(stream);
  }

 protected:
  Reduction reduction() const override { return l2_ ? Reduction::kSquares : Reduction::kMaxAbs; }

  absl::StatusOr<size_t> EncodeChecked(const float* x, size_t n, const CodecContext& ctx,
                                       const DeviceStats& st, const Feedback& fb, uint8_t* out,
                                       cudaStream_t stream) override {
    const float norm = dithering::Norm(l2_, st.sum_of_squares, st.max_abs_bits);
    PutU32(header_scratch(), static_cast<uint32_t>(n));
    PutF32(header_scratch() + 4, norm);
    BC_CUDA_TRY(WriteHeader(out, dithering::kHeaderBytes, stream));
    DitherEncodeKernel<<<Blocks((n + 7) / 8), kThreads, 0, stream>>>(
        x, n, norm, shape_, StreamOf(ctx), out + dithering::kHeaderBytes, fb);
    return Launched(MaxEncodedBytes(n));
  }

 private:
  DitherShape shape_;
  bool l2_;
};

// ---- inceptionn: a tag byte (4 elements) a thread. The tags and their counts, an exclusive
// scan of the counts (each byte's cursors), one readback of the totals (the sections' places
// and the payload size), then each byte's values.

using inceptionn::TagCounts;

struct AddTagCounts {
  __device__ TagCounts operator()(const TagCounts& a, const TagCounts& b) const { return a + b; }
};

__global__ void InceptionnTagKernel(const float* __restrict__ x, size_t n, float error_bound,
                                    uint8_t* __restrict__ tags, TagCounts* __restrict__ counts) {
  const size_t groups = inceptionn::TagBytes(n);
  for (size_t g = GridStart(); g < groups; g += GridStride()) {
    TagCounts c;
    tags[g] = inceptionn::EncodeTagByte(x, n, g, error_bound, &c);
    counts[g] = c;
  }
}

__global__ void InceptionnValuesKernel(const float* __restrict__ x, size_t n, float error_bound,
                                       TagCounts totals, const TagCounts* __restrict__ before,
                                       uint8_t* __restrict__ payload, Feedback fb) {
  const size_t groups = inceptionn::TagBytes(n);
  for (size_t g = GridStart(); g < groups; g += GridStride()) {
    inceptionn::EncodeValues(x, n, g, error_bound, totals, before[g], payload,
                             [&](size_t i, float c, float decoded) { fb.Update(i, c, decoded); });
  }
}

__global__ void InceptionnCountKernel(const uint8_t* __restrict__ tags, size_t n,
                                      TagCounts* __restrict__ counts, DeviceStats* stats) {
  const size_t groups = inceptionn::TagBytes(n);
  for (size_t g = GridStart(); g < groups; g += GridStride()) {
    counts[g] = inceptionn::CountTagByte(tags[g], n, g);
    if (g + 1 == groups) RecordError(stats, inceptionn::CheckPadding(tags, n));
  }
}

__global__ void InceptionnDecodeKernel(const uint8_t* __restrict__ payload, size_t n,
                                       float error_bound, TagCounts totals,
                                       const TagCounts* __restrict__ before,
                                       float* __restrict__ out, DeviceStats* stats) {
  const size_t groups = inceptionn::TagBytes(n);
  for (size_t g = GridStart(); g < groups; g += GridStride()) {
    RecordError(stats,
                inceptionn::DecodeValues(payload, n, g, error_bound, totals, before[g], out));
  }
}

class InceptionnCudaCodec final : public CudaCodecBase {
 public:
  InceptionnCudaCodec(FusedMemorySettings memory, float error_bound)
      : CudaCodecBase("inceptionn", memory), error_bound_(error_bound) {}

  size_t MaxEncodedBytes(size_t n) const override { return inceptionn::MaxPayloadBytes(n); }

  absl::Status Decode(const uint8_t* encoded, size_t bytes, const CodecContext&, float* output,
                      size_t n, cudaStream_t stream) override {
    const uint8_t* header = nullptr;
    BC_ASSIGN(header, ReadHeader(encoded, bytes, 4, stream));
    if (auto s = Malformed(inceptionn::CheckHeader(header, bytes, n)); !s.ok()) return s;
    if (auto s = ResetStats(stream); !s.ok()) return s;
    TagCounts* counts = nullptr;
    BC_ASSIGN(counts, CountAndScan(n, stream, [&](TagCounts* c) {
                InceptionnCountKernel<<<Blocks(inceptionn::TagBytes(n)), kThreads, 0, stream>>>(
                    encoded + 4, n, c, stats());
              }));
    if (auto s = CheckDecode(stream); !s.ok()) return s;  // the padding
    TagCounts totals;
    BC_ASSIGN(totals, Totals(n, stream));
    if (auto s = Malformed(CheckPayloadSize(bytes, inceptionn::PayloadBytes(n, totals), n));
        !s.ok()) {
      return s;
    }
    InceptionnDecodeKernel<<<Blocks(inceptionn::TagBytes(n)), kThreads, 0, stream>>>(
        encoded, n, error_bound_, totals, counts, output, stats());
    return CheckDecode(stream);
  }

 protected:
  absl::StatusOr<size_t> EncodeChecked(const float* x, size_t n, const CodecContext&,
                                       const DeviceStats&, const Feedback& fb, uint8_t* out,
                                       cudaStream_t stream) override {
    PutU32(header_scratch(), static_cast<uint32_t>(n));
    BC_CUDA_TRY(WriteHeader(out, 4, stream));
    TagCounts* before = nullptr;
    BC_ASSIGN(before, CountAndScan(n, stream, [&](TagCounts* c) {
                InceptionnTagKernel<<<Blocks(inceptionn::TagBytes(n)), kThreads, 0, stream>>>(
                    x, n, error_bound_, out + 4, c);
              }));
    TagCounts totals;
    BC_ASSIGN(totals, Totals(n, stream));
    InceptionnValuesKernel<<<Blocks(inceptionn::TagBytes(n)), kThreads, 0, stream>>>(
        x, n, error_bound_, totals, before, out, fb);
    return Launched(inceptionn::PayloadBytes(n, totals));
  }

 private:
  // Runs count(counts), which writes the counts of the TagBytes(n) tag bytes, then scans them:
  // returns each byte's counts before it, the totals after the last (Totals).
  template <typename Count>
  absl::StatusOr<TagCounts*> CountAndScan(size_t n, cudaStream_t stream, Count count) {
    const size_t groups = inceptionn::TagBytes(n);
    TagCounts *counts = nullptr, *before = nullptr;
    BC_ASSIGN(counts, counts_.Reserve<TagCounts>(groups + 1));
    BC_ASSIGN(before, before_.Reserve<TagCounts>(groups + 1));
    BC_CUDA_TRY(cudaMemsetAsync(counts + groups, 0, sizeof(TagCounts), stream));
    count(counts);
    const int items = static_cast<int>(groups + 1);
    size_t temp_bytes = 0;
    BC_CUDA_TRY(cub::DeviceScan::ExclusiveScan(nullptr, temp_bytes, counts, before, AddTagCounts(),
                                               TagCounts(), items, stream));
    void* temp = nullptr;
    BC_ASSIGN(temp, cub_temp_.Reserve(temp_bytes));
    BC_CUDA_TRY(cub::DeviceScan::ExclusiveScan(temp, temp_bytes, counts, before, AddTagCounts(),
                                               TagCounts(), items, stream));
    return before;
  }

  // The totals that CountAndScan left after the last tag byte (waits for the stream).
  absl::StatusOr<TagCounts> Totals(size_t n, cudaStream_t stream) {
    const uint8_t* host = nullptr;
    const auto* last =
        reinterpret_cast<const uint8_t*>(before_.as<TagCounts>() + inceptionn::TagBytes(n));
    BC_ASSIGN(host, ReadHeader(last, sizeof(TagCounts), sizeof(TagCounts), stream));
    TagCounts totals;
    std::memcpy(&totals, host, sizeof(totals));
    return totals;
  }

  float error_bound_;
  DeviceBuffer counts_, before_, cub_temp_;
};

// ---- sketch: the sample gathered and sorted on the device (CUB's radix sort: the same sorted
// values as the CPU's std::sort, up to the order of 0.0 and -0.0, which compare equal), the
// search table, then 8 ids a thread with the buckets' sums and counts (in double, by atomics:
// in another order than the CPU's), the means, and the fused memory's pass.

// Buckets up to this many are summed in shared memory first (q doubles and q counts).
constexpr uint32_t kSharedBuckets = 2048;

__global__ void SketchSampleKernel(const float* __restrict__ x, size_t n, size_t m,
                                   float* __restrict__ sample) {
  for (size_t s = GridStart(); s < m; s += GridStride())
    sample[s] = x[sketch::SampleIndex(s, n, m)];
}

__global__ void SketchSearchKernel(const float* __restrict__ sorted, size_t m, uint32_t quantiles,
                                   size_t padded, float* __restrict__ table) {
  for (size_t slot = GridStart(); slot < padded; slot += GridStride()) {
    table[slot] = sketch::SearchEntry(sorted, m, quantiles, slot);
  }
}

template <bool kShared>
__global__ void SketchIdsKernel(const float* __restrict__ x, size_t n,
                                const float* __restrict__ table, size_t padded, uint32_t quantiles,
                                uint8_t* __restrict__ packed, double* __restrict__ sums,
                                unsigned long long* __restrict__ counts) {
  extern __shared__ double shared_sums[];  // kShared: q sums, then q counts
  double* bucket_sums = sums;
  unsigned long long* bucket_counts = counts;
  if constexpr (kShared) {
    bucket_sums = shared_sums;
    bucket_counts = reinterpret_cast<unsigned long long*>(shared_sums + quantiles);
    for (uint32_t b = threadIdx.x; b < quantiles; b += blockDim.x) {
      bucket_sums[b] = 0.0;
      bucket_counts[b] = 0;
    }
    __syncthreads();
  }
  const size_t groups = (n + 7) / 8;
  for (size_t g = GridStart(); g < groups; g += GridStride()) {
    sketch::EncodeGroup(x, n, g, table, padded, quantiles, packed,
                        [&](size_t, float v, uint32_t id) {
                          atomicAdd(&bucket_sums[id], static_cast<double>(v));
                          atomicAdd(&bucket_counts[id], 1ull);
                        });
  }
  if constexpr (kShared) {
    __syncthreads();
    for (uint32_t b = threadIdx.x; b < quantiles; b += blockDim.x) {
      if (bucket_counts[b] != 0) {
        atomicAdd(&sums[b], bucket_sums[b]);
        atomicAdd(&counts[b], bucket_counts[b]);
      }
    }
  }
}

__global__ void SketchMeansKernel(const double* __restrict__ sums,
                                  const unsigned long long* __restrict__ counts, uint32_t quantiles,
                                  uint8_t* __restrict__ means) {
  for (size_t b = GridStart(); b < quantiles; b += GridStride()) {
    PutF32(means + 4 * b, sketch::BucketMean(sums[b], counts[b]));
  }
}

// The fused memory's update from the decoded values: the means the payload holds.
__global__ void SketchFeedbackKernel(const float* __restrict__ x, size_t n,
                                     const uint8_t* __restrict__ payload, uint32_t quantiles,
                                     Feedback fb) {
  const size_t groups = (n + 7) / 8;
  for (size_t g = GridStart(); g < groups; g += GridStride()) {
    sketch::DecodeGroup(payload, n, g, quantiles,
                        [&](size_t i, float decoded) { fb.Update(i, x[i], decoded); });
  }
}

__global__ void SketchCheckMeansKernel(const uint8_t* __restrict__ payload, uint32_t quantiles,
                                       DeviceStats* stats) {
  for (size_t b = GridStart(); b < quantiles; b += GridStride()) {
    RecordError(stats, sketch::CheckMean(GetF32(payload + 4 + 4 * b), b));
  }
}

__global__ void SketchDecodeKernel(const uint8_t* __restrict__ payload, size_t n,
                                   uint32_t quantiles, float* __restrict__ out,
                                   DeviceStats* stats) {
  const size_t groups = (n + 7) / 8;
  for (size_t g = GridStart(); g < groups; g += GridStride()) {
    RecordError(stats, sketch::DecodeGroup(payload, n, g, quantiles,
                                           [&](size_t i, float v) { out[i] = v; }));
  }
}

class SketchCudaCodec final : public CudaCodecBase {
 public:
  SketchCudaCodec(FusedMemorySettings memory, uint32_t quantiles)
      : CudaCodecBase("sketch", memory), quantiles_(quantiles) {}

  size_t MaxEncodedBytes(size_t n) const override { return sketch::PayloadBytes(n, quantiles_); }

  absl::Status Decode(const uint8_t* encoded, size_t bytes, const CodecContext&, float* output,
                      size_t n, cudaStream_t stream) override {
    if (auto header = ReadCountedHeader(encoded, bytes, 4, n, stream); !header.ok()) {
      return header.status();
    }
    if (auto s = ResetStats(stream); !s.ok()) return s;
    // The means first: a bad mean is reported before a bad id, as on the CPU.
    SketchCheckMeansKernel<<<Blocks(quantiles_), kThreads, 0, stream>>>(encoded, quantiles_,
                                                                        stats());
    SketchDecodeKernel<<<Blocks((n + 7) / 8), kThreads, 0, stream>>>(encoded, n, quantiles_, output,
                                                                     stats());
    return CheckDecode(stream);
  }

 protected:
  absl::StatusOr<size_t> EncodeChecked(const float* x, size_t n, const CodecContext&,
                                       const DeviceStats&, const Feedback& fb, uint8_t* out,
                                       cudaStream_t stream) override {
    const size_t m = sketch::SampleSize(n);
    const size_t padded = sketch::SearchSize(quantiles_);
    float *sample = nullptr, *sorted = nullptr, *table = nullptr;
    double* sums = nullptr;
    unsigned long long* counts = nullptr;
    BC_ASSIGN(sample, sample_.Reserve<float>(m));
    BC_ASSIGN(sorted, sorted_.Reserve<float>(m));
    BC_ASSIGN(table, table_.Reserve<float>(padded));
    BC_ASSIGN(sums, sums_.Reserve<double>(quantiles_));
    BC_ASSIGN(counts, counts_.Reserve<unsigned long long>(quantiles_));
    PutU32(header_scratch(), static_cast<uint32_t>(n));
    BC_CUDA_TRY(WriteHeader(out, 4, stream));
    // The boundaries.
    SketchSampleKernel<<<Blocks(m), kThreads, 0, stream>>>(x, n, m, sample);
    if (m > 0) {
      size_t temp_bytes = 0;
      BC_CUDA_TRY(cub::DeviceRadixSort::SortKeys(nullptr, temp_bytes, sample, sorted,
                                                 static_cast<int>(m), 0, 32, stream));
      void* temp = nullptr;
      BC_ASSIGN(temp, cub_temp_.Reserve(temp_bytes));
      BC_CUDA_TRY(cub::DeviceRadixSort::SortKeys(temp, temp_bytes, sample, sorted,
                                                 static_cast<int>(m), 0, 32, stream));
    }
    SketchSearchKernel<<<Blocks(padded), kThreads, 0, stream>>>(sorted, m, quantiles_, padded,
                                                                table);
    // The ids, the buckets' sums and counts, the means.
    BC_CUDA_TRY(cudaMemsetAsync(sums, 0, quantiles_ * sizeof(double), stream));
    BC_CUDA_TRY(cudaMemsetAsync(counts, 0, quantiles_ * sizeof(unsigned long long), stream));
    uint8_t* packed = out + sketch::IdsStart(quantiles_);
    const unsigned blocks = ReduceBlocks((n + 7) / 8);
    if (quantiles_ <= kSharedBuckets) {
      const size_t shared = quantiles_ * (sizeof(double) + sizeof(unsigned long long));
      SketchIdsKernel<true><<<blocks, kThreads, shared, stream>>>(x, n, table, padded, quantiles_,
                                                                  packed, sums, counts);
    } else {
      SketchIdsKernel<false>
          <<<blocks, kThreads, 0, stream>>>(x, n, table, padded, quantiles_, packed, sums, counts);
    }
    SketchMeansKernel<<<Blocks(quantiles_), kThreads, 0, stream>>>(sums, counts, quantiles_,
                                                                   out + 4);
    if (fb.kind != MemoryKind::kNone) {
      SketchFeedbackKernel<<<blocks, kThreads, 0, stream>>>(x, n, out, quantiles_, fb);
    }
    return Launched(MaxEncodedBytes(n));
  }

 private:
  uint32_t quantiles_;
  DeviceBuffer sample_, sorted_, table_, sums_, counts_, cub_temp_;
};

}  // namespace

void RegisterMoreQuantCudaCodecs(CudaCodecRegistry& registry) {
  registry.MustRegisterLikeCpu("u8bit", [](const CodecParams&, const FusedMemorySettings& m) {
    return MakeCudaCodec<U8bitCudaCodec>(m);
  });
  registry.MustRegisterLikeCpu(
      "dithering",
      [](const CodecParams& params,
         const FusedMemorySettings& m) -> absl::StatusOr<std::unique_ptr<CudaCodec>> {
        ParamReader r(params);
        const int64_t k = r.Int("k");
        const bool natural = r.String("partition") == "natural";
        const bool l2 = r.String("normalize") == "l2";
        if (!r.ok()) return r.status();
        if (auto s = dithering::CheckParams(k, natural); !s.ok()) return s;
        return MakeCudaCodec<DitheringCudaCodec>(m, static_cast<uint32_t>(k), natural, l2);
      });
  registry.MustRegisterLikeCpu(
      "inceptionn",
      [](const CodecParams& params,
         const FusedMemorySettings& m) -> absl::StatusOr<std::unique_ptr<CudaCodec>> {
        ParamReader r(params);
        const double error_bound = r.Double("error_bound");
        if (!r.ok()) return r.status();
        if (auto s = inceptionn::CheckParams(error_bound); !s.ok()) return s;
        return MakeCudaCodec<InceptionnCudaCodec>(m, static_cast<float>(error_bound));
      });
  registry.MustRegisterLikeCpu(
      "sketch",
      [](const CodecParams& params,
         const FusedMemorySettings& m) -> absl::StatusOr<std::unique_ptr<CudaCodec>> {
        ParamReader r(params);
        const auto quantiles = static_cast<uint32_t>(r.Int("quantiles"));
        if (!r.ok()) return r.status();
        return MakeCudaCodec<SketchCudaCodec>(m, quantiles);
      });
}

}  // namespace bytecomp::compress::cuda
