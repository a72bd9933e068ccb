// The memories that the CUDA codecs fuse into their encode (private to compress/cuda): the
// state lives in device memory inside the codec; the compensation runs before the encode
// kernels, and the encode kernels update the state from each element's decoded value
// (Feedback). The per-element expressions are memory_math.h's, shared with the CPU memories.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "bytecomp/compress/codec.h"
#include "bytecomp/compress/memory_math.h"
#include "cuda_support.h"
#include "fused_memory_settings.h"

namespace bytecomp::compress::cuda {

// How the encode kernels update a memory from (compensated, decoded): residual and efsignsgd
// keep an error, powersgd too (decoded: the local approximation, lowrank_kernels.cu);
// dgc_momentum is updated by the sparse compaction (zeroed where sent).
struct Feedback {
  MemoryKind kind = MemoryKind::kNone;
  float* state = nullptr;  // the residual / error; holds the compensated input on entry
  float lr = 0.0f;         // efsignsgd
  __device__ void Update(size_t i, float compensated, float decoded) const {
    if (kind == MemoryKind::kResidual || kind == MemoryKind::kPowerSgd) {
      state[i] = ResidualUpdate(compensated, decoded);
    } else if (kind == MemoryKind::kEfSignSgd) {
      state[i] = EfSignResidual(compensated, decoded, lr);
    }
  }
};

class FusedMemory {
 public:
  explicit FusedMemory(FusedMemorySettings settings) : settings_(settings) {}

  // Compensates the gradient g into the state (restarting it when first: a first round or a
  // new length) and returns what to encode: g itself without a memory. *fb says how the
  // encode kernels update the state.
  absl::StatusOr<const float*> Compensate(const float* g, size_t n, const CodecContext& ctx,
                                          bool first, cudaStream_t stream, Feedback* fb);

  // dgc_momentum's u and v (null for the other memories), which the sparse compaction zeroes
  // at the coordinates it sends.
  float* dgc_u() const;
  float* dgc_v() const;

 private:
  FusedMemorySettings settings_;
  DeviceBuffer a_, b_;  // residual / error / u; v
};

}  // namespace bytecomp::compress::cuda
