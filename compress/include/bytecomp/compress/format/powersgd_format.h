// PowerSGD's payloads and arithmetic, shared by the CPU codec (compress/src/lowrank_powersgd.cc)
// and the CUDA one (compress/cuda/src/lowrank_kernels.cu). Little-endian, factors column-major:
//   stage 1 (EncodeFirst)    u32 1, rows * rank f32: P = M Q
//   stage 2 (EncodeSecond)   u32 2, cols * rank f32: Q = M^T P^
//   single payload (Encode)  u32 0, u32 n, rows * rank f32 (P^), cols * rank f32 (Q')
// M is the n-element partition read row-major into rows x cols, zero-padded (ShapeFor).
//
// The summation orders, which both sides follow so that their payloads are the same bits:
//   P[i][k]          double over j < cols: 8 interleaved lanes up to the last multiple of 8, a
//                    sequential tail, then CombineDotLanes (Dot; the GPU: 8 threads, RowDotLane)
//   Q[j][k]          double over rows i in order (QEntry)
//   (P^ Q^T)[i][j]   double over k in order (ProductEntry)
// Each step is acc + (double)a * (double)b with a and b floats: the product is exact in double,
// so the step rounds once whether or not a compiler fuses it into an FMA; only the order counts.
// The steps on rows * rank or cols * rank values run on the host on both sides: the
// orthonormalisation of the summed P (modified Gram-Schmidt in double, sequential), and the
// warm start's unit columns and normal draws (log and cos, whose device versions may differ
// from glibc's by an ulp).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/format_error.h"
#include "bytecomp/compress/format/host_device.h"
#include "bytecomp/compress/format/little_endian.h"

namespace bytecomp::compress::powersgd {

// The matrix a partition is read into; rank is the effective rank, min(rank, rows, cols).
struct Shape {
  size_t rows = 0;
  size_t cols = 0;
  size_t rank = 0;
};

// `cols`: the matrix's row length, 0 (or more than n) for the near-square matrix,
// cols = ceil(sqrt(n)); rows = ceil(n / cols).
BYTECOMP_HD Shape ShapeFor(size_t n, size_t rank, size_t cols) {
  Shape s;
  if (n == 0) return s;
  size_t c = cols;
  if (c == 0 || c > n) {
    c = static_cast<size_t>(std::sqrt(static_cast<double>(n)));
    while (c * c < n) ++c;
    while (c > 1 && (c - 1) * (c - 1) >= n) --c;
  }
  s.cols = c;
  s.rows = (n + c - 1) / c;
  const size_t shorter = s.rows < s.cols ? s.rows : s.cols;
  s.rank = rank < shorter ? rank : shorter;
  return s;
}

BYTECOMP_HD size_t FirstRoundFloats(const Shape& s) { return s.rows * s.rank; }
BYTECOMP_HD size_t SecondRoundFloats(const Shape& s) { return s.cols * s.rank; }
BYTECOMP_HD size_t StagePayloadBytes(size_t floats) { return 4 + 4 * floats; }
BYTECOMP_HD size_t SinglePayloadBytes(const Shape& s) { return 8 + 4 * (s.rows + s.cols) * s.rank; }

// Element `index` of the zero-padded matrix M of the n inputs x.
BYTECOMP_HD float MatrixValue(const float* x, size_t n, size_t index) {
  return index < n ? x[index] : 0.0f;
}

// One step of every product: acc + a * b in double.
BYTECOMP_HD double AddProduct(double acc, float a, float b) {
  return acc + static_cast<double>(a) * static_cast<double>(b);
}

// ---- P = M Q: dot products over 8 interleaved lanes.

constexpr size_t kDotLanes = 8;

// Where the lanes end and the tail begins.
BYTECOMP_HD size_t DotLanesEnd(size_t len) { return len - len % kDotLanes; }

BYTECOMP_HD double CombineDotLanes(const double* lanes, double tail) {
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])) + tail;
}

// sum_j a[j] * b[j] in double, lanes interleaved (the CPU's loop: the lanes are vector lanes).
BYTECOMP_HD double Dot(const float* a, const float* b, size_t len) {
  double lanes[kDotLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
  const size_t end = DotLanesEnd(len);
  for (size_t j = 0; j < end; j += kDotLanes) {
    for (size_t l = 0; l < kDotLanes; ++l) lanes[l] = AddProduct(lanes[l], a[j + l], b[j + l]);
  }
  double tail = 0;
  for (size_t j = end; j < len; ++j) tail = AddProduct(tail, a[j], b[j]);
  return CombineDotLanes(lanes, tail);
}

// The GPU's decomposition of P[i][k] = Dot(row i of M, column k of Q): lane l of the row
// starting at x[row_begin] (one thread each), and the tail; CombineDotLanes joins them.
BYTECOMP_HD double RowDotLane(const float* x, size_t n, size_t row_begin, size_t cols,
                              const float* q_column, size_t lane) {
  double sum = 0;
  const size_t end = DotLanesEnd(cols);
  for (size_t j = lane; j < end; j += kDotLanes) {
    sum = AddProduct(sum, MatrixValue(x, n, row_begin + j), q_column[j]);
  }
  return sum;
}
BYTECOMP_HD double RowDotTail(const float* x, size_t n, size_t row_begin, size_t cols,
                              const float* q_column) {
  double sum = 0;
  for (size_t j = DotLanesEnd(cols); j < cols; ++j) {
    sum = AddProduct(sum, MatrixValue(x, n, row_begin + j), q_column[j]);
  }
  return sum;
}

// ---- Q = M^T P^ and P^ Q^T, one output each (a GPU thread's work).

// Q[j][k] = sum over rows i of M[i][j] * P^[i][k]; rows whose P^ is 0 add nothing.
BYTECOMP_HD float QEntry(const float* x, size_t n, const Shape& s, const float* p_hat, size_t k,
                         size_t j) {
  double acc = 0;
  const float* p = p_hat + k * s.rows;
  for (size_t i = 0; i < s.rows; ++i) {
    if (p[i] != 0.0f) acc = AddProduct(acc, MatrixValue(x, n, i * s.cols + j), p[i]);
  }
  return static_cast<float>(acc);
}

// (P^ Q^T)[i][j] = sum over k of P^[i][k] * Q[j][k].
BYTECOMP_HD float ProductEntry(const float* p_hat, const float* q, const Shape& s, size_t i,
                               size_t j) {
  double v = 0;
  for (size_t k = 0; k < s.rank; ++k) v = AddProduct(v, p_hat[k * s.rows + i], q[k * s.cols + j]);
  return static_cast<float>(v);
}

// ---- The host's steps (both codecs run them on the host).

// P^ = the columns of p (rows x rank, column-major) orthonormalised by modified Gram-Schmidt in
// double, sequentially (the same bits on every worker); a zero (dependent) column stays zero.
// basis: rows * rank doubles of scratch.
BYTECOMP_HD void Orthonormalise(const float* p, const Shape& s, double* basis, float* p_hat) {
  for (size_t k = 0; k < s.rank; ++k) {
    double* v = basis + k * s.rows;
    for (size_t i = 0; i < s.rows; ++i) v[i] = p[k * s.rows + i];
    for (size_t l = 0; l < k; ++l) {
      const double* u = basis + l * s.rows;
      double dot = 0;
      for (size_t i = 0; i < s.rows; ++i) dot += u[i] * v[i];
      for (size_t i = 0; i < s.rows; ++i) v[i] -= dot * u[i];
    }
    double norm = 0;
    for (size_t i = 0; i < s.rows; ++i) norm += v[i] * v[i];
    norm = std::sqrt(norm);
    const double inverse = norm > 0.0 ? 1.0 / norm : 0.0;
    for (size_t i = 0; i < s.rows; ++i) v[i] *= inverse;
  }
  for (size_t i = 0; i < s.rows * s.rank; ++i) p_hat[i] = static_cast<float>(basis[i]);
}

// Host only (std::log and std::cos are glibc's): Q's columns (cols x rank, column-major) scaled
// to unit length; without a warm start (have_warm false), and for a column that became zero,
// the column is drawn standard normal from `random` (CounterRandom(seed, key, round, node 0):
// the same on every worker). A zero draw (cols == 1) stays zero.
inline void PrepareWarmStart(float* q, const Shape& s, bool have_warm, CounterRandom random) {
  for (size_t k = 0; k < s.rank; ++k) {
    float* column = q + k * s.cols;
    double norm = have_warm ? std::sqrt(Dot(column, column, s.cols)) : 0.0;
    if (norm == 0.0) {
      for (size_t j = 0; j < s.cols; ++j) {
        const uint32_t index = static_cast<uint32_t>(2 * (k * s.cols + j));
        const double u1 = 1.0 - UniformFloat(random, index);  // (0, 1]
        const double u2 = UniformFloat(random, index + 1);
        column[j] =
            static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
      }
      norm = std::sqrt(Dot(column, column, s.cols));
      if (norm == 0.0) continue;
    }
    const double inverse = 1.0 / norm;
    for (size_t j = 0; j < s.cols; ++j) column[j] = static_cast<float>(column[j] * inverse);
  }
}

// ---- The single payload's checks, in the CPU decoder's order.

// Size (SinglePayloadBytes), stage 0, element count; header: the payload's first 8 bytes (read
// only when the size is right).
BYTECOMP_HD FormatError CheckSinglePayload(const uint8_t* header, uint64_t bytes, const Shape& s,
                                           uint64_t n) {
  FormatError e = CheckPayloadSize(bytes, SinglePayloadBytes(s), n);
  if (!e.ok()) return e;
  const uint32_t stage = GetU32(header);
  if (stage != 0) return MakeFormatError(FormatErrorCode::kSinglePayloadStage, stage);
  return CheckElementCount(GetU32(header + 4), n);
}

// The factors' largest |x| bits, then the product's.
BYTECOMP_HD FormatError CheckFactors(uint32_t max_abs_bits) {
  if (max_abs_bits < 0x7f800000u) return FormatError();
  return MakeFormatError(FormatErrorCode::kFactorsNotFinite);
}
BYTECOMP_HD FormatError CheckProduct(uint32_t max_abs_bits) {
  if (max_abs_bits < 0x7f800000u) return FormatError();
  return MakeFormatError(FormatErrorCode::kFactorProductOverflow);
}

}  // namespace bytecomp::compress::powersgd
