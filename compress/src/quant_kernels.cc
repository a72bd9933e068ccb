#include "quant_kernels.h"
#include "exact_float_math.h"  // first: see there

#include "bytecomp/common/half.h"
#include "bytecomp/compress/codec_util.h"
#include "simd_kernel.h"

namespace bytecomp::compress {

BYTECOMP_SIMD_KERNEL(double, SumOfSquares, (const float* x, size_t n), (x, n)) {
  return SumOfSquaresInline(x, n);
}

float MaxAbs(const float* x, size_t n) { return BitsToFloat(MaxAbsBits(x, n)); }

BYTECOMP_SIMD_KERNEL(SquaresAndMax, SumOfSquaresAndMaxAbs, (const float* x, size_t n), (x, n)) {
  double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  uint32_t max_lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    if (i % 16 == 0) PrefetchLineAhead(x + i);
    for (size_t j = 0; j < 8; ++j) {
      const double v = static_cast<double>(x[i + j]);
      lanes[j] += v * v;
      const uint32_t bits = FloatBits(x[i + j]) & 0x7fffffffu;
      max_lanes[j] = bits > max_lanes[j] ? bits : max_lanes[j];
    }
  }
  SquaresAndMax r;
  double tail = 0.0;
  uint32_t m = 0;
  for (; i < n; ++i) {
    tail += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    const uint32_t bits = FloatBits(x[i]) & 0x7fffffffu;
    m = bits > m ? bits : m;
  }
  for (uint32_t v : max_lanes) m = v > m ? v : m;
  r.sum_of_squares = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
                     ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])) + tail;
  r.max_abs_bits = m;
  return r;
}

BYTECOMP_SIMD_KERNEL(uint32_t, MaxCodeLevel, (const uint16_t* codes, size_t n, uint32_t level_mask),
                     (codes, n, level_mask)) {
  uint32_t m = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t level = codes[i] & level_mask;
    m = level > m ? level : m;
  }
  return m;
}

}  // namespace bytecomp::compress
