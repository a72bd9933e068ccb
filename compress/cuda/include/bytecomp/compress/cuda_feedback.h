// Per-element error-feedback and momentum updates that the CUDA encode kernels fuse into the
// encode, written once for host and device (BYTECOMP_HD) so that the CPU memories' arithmetic
// and the kernels' are the same expressions; test/unit/cpu_offload checks them on the host
// against the CPU memories and codecs. Like elementwise.h, every line is single IEEE
// operations in a fixed order: the kernels are built with --fmad=false and host users with
// fp-contract off, so no a*b+c is fused into an FMA on one side only.
#pragma once

#include "bytecomp/compress/elementwise.h"

namespace bytecomp::compress {

// efsignsgd memory (sign_memory.cc): compensated = g + (1/lr) * e (e absent in the first
// round: compensated = g); after encoding, e = lr * (compensated - decoded).
BYTECOMP_HD float EfSignCompensate(float gradient, float residual, float inverse_lr) {
  return gradient + inverse_lr * residual;
}
BYTECOMP_HD float EfSignResidual(float compensated, float decoded, float lr) {
  return lr * (compensated - decoded);
}

// residual memory (memory.h): compensated = beta * r + gamma * g; r = compensated - decoded.
// r starts at zero.
BYTECOMP_HD float ResidualCompensate(float gradient, float residual, float beta, float gamma) {
  return beta * residual + gamma * gradient;
}
BYTECOMP_HD float ResidualUpdate(float compensated, float decoded) {
  return compensated - decoded;
}

// signum's momentum (sign_codecs.cc): m = (1 - beta) * g + beta * m, m = g in the first round.
BYTECOMP_HD float SignumBlend(float gradient, float momentum_vector, float keep, float beta) {
  return keep * gradient + beta * momentum_vector;
}

// dgc_momentum memory (memory.h): u = momentum * u + g; v = v + u; compensated = v; u and v
// are zeroed where the encoded message carries the coordinate.
BYTECOMP_HD float DgcMomentumU(float gradient, float u, float momentum) {
  return momentum * u + gradient;
}
BYTECOMP_HD float DgcMomentumV(float v, float u_new) { return v + u_new; }

// The sign bit of element `lane` of a 32-element group, as the kernels' warp ballot sees it.
BYTECOMP_HD uint32_t SignWordBit(float x, uint32_t lane) { return SignBit(x) << lane; }

// fp16 and bf16 payload elements, saturating as basic_codecs.cc does (a finite input never
// becomes Inf).
BYTECOMP_HD uint16_t SaturatingHalfBits(float x) {
  const float kHalfMax = 65504.0f;
  const float clamped = x < -kHalfMax ? -kHalfMax : (x > kHalfMax ? kHalfMax : x);
  return FloatToHalfBits(clamped);
}
BYTECOMP_HD uint16_t SaturatingBFloat16Bits(float x) {
  const uint32_t bits = FloatBits(x);
  const uint32_t a = bits & 0x7fffffffu;
  uint32_t r = (a + 0x7fffu + ((a >> 16) & 1u)) >> 16;
  r = r < 0x7f7fu ? r : 0x7f7fu;
  return static_cast<uint16_t>(r | ((bits >> 16) & 0x8000u));
}

}  // namespace bytecomp::compress
