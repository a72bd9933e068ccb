// The per-element updates of the memories (memory.h) and of signum's momentum, written once
// for host and device (BYTECOMP_HD): the CPU memories (compress/src/memory.cc,
// sign_memory.cc) run their loops over these, and the CUDA kernels fuse the same expressions
// into the encode. Like elementwise.h, every line is single IEEE operations in a fixed order:
// the kernels are built with --fmad=false and host users with fp-contract off, so no a*b+c is
// fused into an FMA on one side only.
#pragma once

#include "bytecomp/compress/format/host_device.h"

namespace bytecomp::compress {

// residual memory: compensated = beta * r + gamma * g; r = compensated - decoded. r starts at
// zero.
BYTECOMP_HD float ResidualCompensate(float gradient, float residual, float beta, float gamma) {
  return beta * residual + gamma * gradient;
}
BYTECOMP_HD float ResidualUpdate(float compensated, float decoded) { return compensated - decoded; }

// efsignsgd memory: compensated = g + (1/lr) * e (e absent in the first round: compensated =
// g); after encoding, e = lr * (compensated - decoded).
BYTECOMP_HD float EfSignCompensate(float gradient, float residual, float inverse_lr) {
  return gradient + inverse_lr * residual;
}
BYTECOMP_HD float EfSignResidual(float compensated, float decoded, float lr) {
  return lr * (compensated - decoded);
}

// powersgd memory: compensated = g + r (compensated = g in the first round); after the round's
// second encode, r = compensated - the worker's local approximation (ResidualUpdate).
BYTECOMP_HD float PowerSgdCompensate(float gradient, float residual) { return gradient + residual; }

// dgc_momentum memory: u = momentum * u + g; v = v + u; compensated = v; u and v are zeroed
// where the encoded message carries the coordinate.
BYTECOMP_HD float DgcMomentumU(float gradient, float u, float momentum) {
  return momentum * u + gradient;
}
BYTECOMP_HD float DgcMomentumV(float v, float u_new) { return v + u_new; }

// signum's momentum: m = (1 - beta) * g + beta * m (keep = 1 - beta), m = g in the first round.
BYTECOMP_HD float SignumBlend(float gradient, float momentum_vector, float keep, float beta) {
  return keep * gradient + beta * momentum_vector;
}

}  // namespace bytecomp::compress
