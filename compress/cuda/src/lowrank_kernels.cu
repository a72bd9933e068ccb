// PowerSGD on the GPU: the products over the partition's n elements in kernels that sum in the
// CPU codec's order (format/powersgd_format.h: 8 lane threads a P entry, a thread a Q entry, a
// thread an output element), so the payloads are the CPU codec's bytes; what is done on the
// factors (the warm start, the orthonormalisation, the call order and its checks) runs on the
// host with the CPU codec's own code (powersgd_round.h), on rows * rank or cols * rank values
// read back or uploaded (the factors are small: 4 KiB each for 2^20 elements at rank 1).
// No cuBLAS: every product feeds a payload, the decoded output or the memory, and cuBLAS fixes
// no summation order (nor sums float products in double).
#include <cub/block/block_reduce.cuh>

#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/format/powersgd_format.h"
#include "bytecomp/compress/params.h"
#include "bytecomp/compress/powersgd_round.h"
#include "cuda_codec_base.h"
#include "cuda_registry.h"

namespace bytecomp::compress::cuda {
namespace {

using powersgd::kDotLanes;
using powersgd::Shape;

// P = M Q into p_wire (column-major f32): 8 consecutive threads per entry, thread l summing
// lane l (RowDotLane); the group's first thread gathers the lanes, adds the tail and rounds.
__global__ void PKernel(const float* __restrict__ x, size_t n, Shape s, const float* __restrict__ q,
                        uint8_t* __restrict__ p_wire) {
  const size_t entries = powersgd::FirstRoundFloats(s);
  const unsigned lane = threadIdx.x % kDotLanes;
  const unsigned group_mask = 0xffu << (threadIdx.x % 32 - lane);
  // kThreads is a multiple of 8: a group's threads share o and leave the loop together.
  for (size_t o = GridStart() / kDotLanes; o < entries; o += GridStride() / kDotLanes) {
    const size_t k = o / s.rows;
    const size_t row_begin = (o % s.rows) * s.cols;
    const float* q_column = q + k * s.cols;
    const double mine = powersgd::RowDotLane(x, n, row_begin, s.cols, q_column, lane);
    double lanes[kDotLanes];
    for (unsigned l = 0; l < kDotLanes; ++l) {
      lanes[l] = __shfl_sync(group_mask, mine, static_cast<int>(l), kDotLanes);
    }
    if (lane == 0) {
      const double tail = powersgd::RowDotTail(x, n, row_begin, s.cols, q_column);
      PutF32(p_wire + 4 * o, static_cast<float>(powersgd::CombineDotLanes(lanes, tail)));
    }
  }
}

// Q = M^T P^ into q_local and q_wire: a thread an entry, summing over the rows (QEntry).
__global__ void QKernel(const float* __restrict__ x, size_t n, Shape s,
                        const float* __restrict__ p_hat, float* __restrict__ q_local,
                        uint8_t* __restrict__ q_wire) {
  const size_t entries = powersgd::SecondRoundFloats(s);
  for (size_t o = GridStart(); o < entries; o += GridStride()) {
    const float v = powersgd::QEntry(x, n, s, p_hat, o / s.cols, o % s.cols);
    q_local[o] = v;
    PutF32(q_wire + 4 * o, v);
  }
}

// P^ q^T, a thread an element (ProductEntry): into out (if not null), and into the fused
// memory as the decoded value; the largest |x| bits into stats (the overflow check).
__global__ void ProductKernel(const float* __restrict__ p_hat, const float* __restrict__ q, Shape s,
                              size_t n, float* __restrict__ out, Feedback fb, DeviceStats* stats) {
  using BlockReduceU = cub::BlockReduce<unsigned int, kThreads>;
  __shared__ typename BlockReduceU::TempStorage temp;
  unsigned int max_bits = 0;
  for (size_t i = GridStart(); i < n; i += GridStride()) {
    const float v = powersgd::ProductEntry(p_hat, q, s, i / s.cols, i % s.cols);
    if (out != nullptr) out[i] = v;
    if (fb.state != nullptr) fb.Update(i, fb.state[i], v);
    const unsigned int a = FloatBits(v) & 0x7fffffffu;
    max_bits = a > max_bits ? a : max_bits;
  }
  const unsigned int block_max = BlockReduceU(temp).Reduce(max_bits, MaxOp());
  if (threadIdx.x == 0) atomicMax(&stats->max_abs_bits, block_max);
}

class PowerSgdCudaCodec final : public CudaCodecBase, public CudaTwoRoundCodec {
 public:
  PowerSgdCudaCodec(FusedMemorySettings memory, size_t rank, size_t cols)
      : CudaCodecBase("powersgd", memory), rank_(rank), cols_(cols), round_(rank, cols) {}

  size_t MaxEncodedBytes(size_t n) const override {
    return powersgd::SinglePayloadBytes(round_.ShapeOf(n));
  }
  size_t FirstRoundFloats(size_t n) const override {
    return powersgd::FirstRoundFloats(round_.ShapeOf(n));
  }
  size_t SecondRoundFloats(size_t n) const override {
    return powersgd::SecondRoundFloats(round_.ShapeOf(n));
  }
  void ResetState() override {
    CudaCodecBase::ResetState();
    round_ = powersgd::RoundState(rank_, cols_);
  }

  absl::StatusOr<size_t> EncodeFirst(const float* input, size_t n, const CodecContext& ctx,
                                     uint8_t* out, size_t capacity, cudaStream_t stream) override {
    PreparedInput p;
    BC_ASSIGN(p, PrepareInput(input, n, ctx, capacity, FirstRoundBytes(n), stream));
    fb_ = p.fb;
    BC_ASSIGN(m_, KeepInput(p, n, m_copy_, stream));  // M, until EncodeSecond
    PutU32(header_scratch(), 1);
    BC_CUDA_TRY(WriteHeader(out, 4, stream));
    if (auto p = MultiplyByQ(n, ctx, out + 4, stream); !p.ok()) return p.status();
    return FirstRoundBytes(n);
  }

  absl::StatusOr<size_t> EncodeSecond(const float* summed_first, size_t floats,
                                      const CodecContext& ctx, uint8_t* out, size_t capacity,
                                      cudaStream_t stream) override {
    const float* sum = nullptr;
    BC_ASSIGN(sum, ReadFloats(summed_first, floats, stream));
    if (auto s = round_.Orthonormalise(absl::MakeConstSpan(sum, floats), ctx); !s.ok()) return s;
    const size_t n = round_.n();
    if (auto s = CheckCapacity(capacity, SecondRoundBytes(n)); !s.ok()) return s;
    PutU32(header_scratch(), 2);
    BC_CUDA_TRY(WriteHeader(out, 4, stream));
    if (auto q = MultiplyByP(out + 4, stream); !q.ok()) return q.status();
    // The CPU engine's LocalApproximation and memory Update (no overflow check there).
    if (auto s = UpdateMemory(stream); !s.ok()) return s.status();
    return SecondRoundBytes(n);
  }

  absl::Status DecodeSecond(const float* summed_second, size_t floats, const CodecContext& ctx,
                            float* output, size_t n, cudaStream_t stream) override {
    const float* sum = nullptr;
    BC_ASSIGN(sum, ReadFloats(summed_second, floats, stream));
    const absl::Span<const float> host_sum(sum, floats);
    if (auto s = round_.CheckDecodeSecond(host_sum, ctx, n); !s.ok()) return s;
    uint32_t max_bits = 0;
    BC_ASSIGN(max_bits, Product(d_p_hat_.as<float>(), summed_second, output, Feedback(), stream));
    return round_.FinishDecodeSecond(host_sum, max_bits);
  }

  // The single payload (u32 0, u32 n, P^, Q'): its decode is P^ Q'^T.
  absl::Status Decode(const uint8_t* encoded, size_t bytes, const CodecContext&, float* output,
                      size_t n, cudaStream_t stream) override {
    const Shape s = round_.ShapeOf(n);
    const uint8_t* payload = nullptr;
    BC_ASSIGN(payload, ReadHeader(encoded, bytes, powersgd::SinglePayloadBytes(s), stream));
    if (auto e = Malformed(powersgd::CheckSinglePayload(payload, bytes, s, n)); !e.ok()) return e;
    const size_t count = (s.rows + s.cols) * s.rank;
    const auto* factors = reinterpret_cast<const float*>(payload + 8);  // pinned: aligned
    if (auto e = Malformed(powersgd::CheckFactors(MaxAbsBits(factors, count))); !e.ok()) return e;
    float* d_factors = nullptr;
    BC_ASSIGN(d_factors, factors_.Reserve<float>(count));
    if (count != 0) {
      BC_CUDA_TRY(
          cudaMemcpyAsync(d_factors, encoded + 8, 4 * count, cudaMemcpyDeviceToDevice, stream));
    }
    uint32_t max_bits = 0;
    BC_ASSIGN(max_bits,
              ProductOf(s, n, d_factors, d_factors + s.rows * s.rank, output, Feedback(), stream));
    return Malformed(powersgd::CheckProduct(max_bits));
  }

 protected:
  // The single payload: this node's own round (CPU: PowerSgdCodec::Encode).
  absl::StatusOr<size_t> EncodeChecked(const float* x, size_t n, const CodecContext& ctx,
                                       const DeviceStats&, const Feedback& fb, uint8_t* out,
                                       cudaStream_t stream) override {
    fb_ = fb;
    m_ = x;
    const Shape s = round_.ShapeOf(n);
    const size_t p_floats = powersgd::FirstRoundFloats(s);
    const size_t q_floats = powersgd::SecondRoundFloats(s);
    uint8_t* p_wire = nullptr;
    BC_ASSIGN(p_wire, p_scratch_.Reserve<uint8_t>(4 * p_floats));
    const float* p = nullptr;
    BC_ASSIGN(p, MultiplyByQ(n, ctx, p_wire, stream));
    if (auto e = round_.Orthonormalise(absl::MakeConstSpan(p, p_floats), ctx); !e.ok()) return e;
    PutU32(header_scratch(), 0);
    PutU32(header_scratch() + 4, static_cast<uint32_t>(n));
    BC_CUDA_TRY(WriteHeader(out, 8, stream));
    const float* q = nullptr;
    BC_ASSIGN(q, MultiplyByP(out + 8 + 4 * p_floats, stream));
    round_.FinishSingle(absl::MakeConstSpan(q, q_floats));
    if (p_floats != 0) {
      BC_CUDA_TRY(cudaMemcpyAsync(out + 8, d_p_hat_.as<float>(), 4 * p_floats,
                                  cudaMemcpyDeviceToDevice, stream));
    }
    // The CPU's EncodeWithMemory decodes the payload for the memory: that decode's overflow
    // check fails the encode.
    uint32_t max_bits = 0;
    BC_ASSIGN(max_bits, UpdateMemory(stream));
    if (auto e = Malformed(powersgd::CheckProduct(max_bits)); !e.ok()) return e;
    return Launched(powersgd::SinglePayloadBytes(s));
  }

 private:
  // Stage 1 on M (m_): the round's Q (host) uploaded, P = M Q into p_wire, read back for its
  // overflow check. Returns P on the host (valid until the next readback).
  absl::StatusOr<const float*> MultiplyByQ(size_t n, const CodecContext& ctx, uint8_t* p_wire,
                                           cudaStream_t stream) {
    round_.Start(n, ctx);
    const Shape& s = round_.shape();
    float* q = nullptr;
    BC_ASSIGN(q, Upload(q_, round_.q(), stream));
    const size_t floats = powersgd::FirstRoundFloats(s);
    PKernel<<<Blocks(floats * kDotLanes), kThreads, 0, stream>>>(m_, n, s, q, p_wire);
    const float* p = nullptr;
    BC_ASSIGN(p, ReadFloats(reinterpret_cast<const float*>(p_wire), floats, stream));
    if (auto e = round_.FinishFirst(MaxAbsBits(p, floats), ctx); !e.ok()) return e;
    return p;
  }

  // Stage 2 on M, after the orthonormalisation: P^ uploaded, Q = M^T P^ into q_wire and
  // d_q_local_, read back for its overflow check. Returns Q on the host (as MultiplyByQ).
  absl::StatusOr<const float*> MultiplyByP(uint8_t* q_wire, cudaStream_t stream) {
    const Shape& s = round_.shape();
    float* p_hat = nullptr;
    BC_ASSIGN(p_hat, Upload(d_p_hat_, round_.p_hat(), stream));
    const size_t floats = powersgd::SecondRoundFloats(s);
    float* q_local = nullptr;
    BC_ASSIGN(q_local, d_q_local_.Reserve<float>(floats));
    QKernel<<<Blocks(floats), kThreads, 0, stream>>>(m_, round_.n(), s, p_hat, q_local, q_wire);
    const float* q = nullptr;
    BC_ASSIGN(q, ReadFloats(q_local, floats, stream));
    if (auto e = round_.FinishSecond(MaxAbsBits(q, floats)); !e.ok()) return e;
    return q;
  }

  // The fused memory's update with the local approximation P^ Q_local^T (none without one).
  // Returns the approximation's largest |x| bits (0 without a memory).
  absl::StatusOr<uint32_t> UpdateMemory(cudaStream_t stream) {
    if (fb_.state == nullptr) return 0u;
    return Product(d_p_hat_.as<float>(), d_q_local_.as<float>(), nullptr, fb_, stream);
  }

  absl::StatusOr<uint32_t> Product(const float* p_hat, const float* q, float* out,
                                   const Feedback& fb, cudaStream_t stream) {
    return ProductOf(round_.shape(), round_.n(), p_hat, q, out, fb, stream);
  }
  absl::StatusOr<uint32_t> ProductOf(const Shape& s, size_t n, const float* p_hat, const float* q,
                                     float* out, const Feedback& fb, cudaStream_t stream) {
    if (auto e = ResetStats(stream); !e.ok()) return e;
    ProductKernel<<<ReduceBlocks(n), kThreads, 0, stream>>>(p_hat, q, s, n, out, fb, stats());
    DeviceStats st;
    BC_ASSIGN(st, ReadStats(stream));
    return st.max_abs_bits;
  }

  // Copies count floats from the device to pinned host memory and waits; valid until the next
  // call.
  absl::StatusOr<const float*> ReadFloats(const float* device, size_t count, cudaStream_t stream) {
    float* host = nullptr;
    BC_ASSIGN(host, host_floats_.Reserve<float>(count));
    if (count != 0) {
      BC_CUDA_TRY(cudaMemcpyAsync(host, device, 4 * count, cudaMemcpyDeviceToHost, stream));
    }
    BC_CUDA_TRY(cudaStreamSynchronize(stream));
    BC_CUDA_TRY(cudaGetLastError());
    return host;
  }

  // Copies host values into a device buffer (pageable: staged before cudaMemcpyAsync returns).
  static absl::StatusOr<float*> Upload(DeviceBuffer& to, const std::vector<float>& values,
                                       cudaStream_t stream) {
    float* d = nullptr;
    BC_ASSIGN(d, to.Reserve<float>(values.size()));
    if (!values.empty()) {
      BC_CUDA_TRY(
          cudaMemcpyAsync(d, values.data(), 4 * values.size(), cudaMemcpyHostToDevice, stream));
    }
    return d;
  }

  size_t rank_;
  size_t cols_;
  powersgd::RoundState round_;  // the CPU codec's: shape, warm start, P^, call order
  const float* m_ = nullptr;    // this round's M: the fused memory's state, or m_copy_
  Feedback fb_;                 // the fused memory, from this round's compensation
  DeviceBuffer m_copy_, q_, d_p_hat_, d_q_local_, p_scratch_, factors_;
  HostBuffer host_floats_;
};

}  // namespace

void RegisterLowRankCudaCodecs(CudaCodecRegistry& registry) {
  registry.MustRegisterLikeCpu(
      "powersgd",
      [](const CodecParams& params,
         const FusedMemorySettings& m) -> absl::StatusOr<std::unique_ptr<CudaCodec>> {
        ParamReader r(params);
        const auto rank = static_cast<size_t>(r.Int("rank"));
        const auto cols = static_cast<size_t>(r.Int("cols"));
        if (!r.ok()) return r.status();
        return MakeCudaCodec<PowerSgdCudaCodec>(m, rank, cols);
      });
}

}  // namespace bytecomp::compress::cuda
