// The fused memories' compensation kernels and their settings (fused_memory.h).
#include "fused_memory.h"

namespace bytecomp::compress::cuda {
namespace {

__global__ void ResidualCompensateKernel(const float* __restrict__ g, float* __restrict__ r,
                                         size_t n, float beta, float gamma) {
  for (size_t i = GridStart(); i < n; i += GridStride()) {
    r[i] = ResidualCompensate(g[i], r[i], beta, gamma);
  }
}

__global__ void EfSignCompensateKernel(const float* __restrict__ g, float* __restrict__ e, size_t n,
                                       float inverse_lr, bool first_round) {
  for (size_t i = GridStart(); i < n; i += GridStride()) {
    e[i] = first_round ? g[i] : EfSignCompensate(g[i], e[i], inverse_lr);
  }
}

__global__ void PowerSgdCompensateKernel(const float* __restrict__ g, float* __restrict__ r,
                                         size_t n, bool first_round) {
  for (size_t i = GridStart(); i < n; i += GridStride()) {
    r[i] = first_round ? g[i] : PowerSgdCompensate(g[i], r[i]);
  }
}

__global__ void DgcMomentumKernel(const float* __restrict__ g, float* __restrict__ u,
                                  float* __restrict__ v, size_t n, float momentum) {
  for (size_t i = GridStart(); i < n; i += GridStride()) {
    const float un = DgcMomentumU(g[i], u[i], momentum);
    u[i] = un;
    v[i] = DgcMomentumV(v[i], un);
  }
}

}  // namespace

absl::StatusOr<const float*> FusedMemory::Compensate(const float* g, size_t n,
                                                     const CodecContext& ctx, bool first,
                                                     cudaStream_t stream, Feedback* fb) {
  const unsigned blocks = Blocks(n);
  switch (settings_.kind) {
    case MemoryKind::kNone:
      return g;
    case MemoryKind::kResidual: {
      float* r = nullptr;
      BC_ASSIGN(r, a_.Reserve<float>(n));
      if (first) BC_CUDA_TRY(cudaMemsetAsync(r, 0, 4 * n, stream));
      ResidualCompensateKernel<<<blocks, kThreads, 0, stream>>>(g, r, n, settings_.beta,
                                                                settings_.gamma);
      fb->kind = MemoryKind::kResidual;
      fb->state = r;
      return r;
    }
    case MemoryKind::kEfSignSgd: {
      float* e = nullptr;
      BC_ASSIGN(e, a_.Reserve<float>(n));
      const float lr = ctx.learning_rate > 0.0f ? ctx.learning_rate : settings_.default_lr;
      EfSignCompensateKernel<<<blocks, kThreads, 0, stream>>>(g, e, n, 1.0f / lr, first);
      fb->kind = MemoryKind::kEfSignSgd;
      fb->state = e;
      fb->lr = lr;
      return e;
    }
    case MemoryKind::kDgcMomentum: {
      float *u = nullptr, *v = nullptr;
      BC_ASSIGN(u, a_.Reserve<float>(n));
      BC_ASSIGN(v, b_.Reserve<float>(n));
      if (first) {
        BC_CUDA_TRY(cudaMemsetAsync(u, 0, 4 * n, stream));
        BC_CUDA_TRY(cudaMemsetAsync(v, 0, 4 * n, stream));
      }
      DgcMomentumKernel<<<blocks, kThreads, 0, stream>>>(g, u, v, n, settings_.momentum);
      return v;
    }
    case MemoryKind::kPowerSgd: {
      float* r = nullptr;
      BC_ASSIGN(r, a_.Reserve<float>(n));
      PowerSgdCompensateKernel<<<blocks, kThreads, 0, stream>>>(g, r, n, first);
      fb->kind = MemoryKind::kPowerSgd;
      fb->state = r;
      return r;
    }
  }
  return absl::InternalError("a fused memory without GPU kernels");
}

float* FusedMemory::dgc_u() const {
  return settings_.kind == MemoryKind::kDgcMomentum ? a_.as<float>() : nullptr;
}
float* FusedMemory::dgc_v() const {
  return settings_.kind == MemoryKind::kDgcMomentum ? b_.as<float>() : nullptr;
}

}  // namespace bytecomp::compress::cuda
