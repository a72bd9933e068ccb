// Reductions shared by the quantisation codecs (private to compress/src). Sums are
// accumulated in double over 8 lanes (so that they vectorise) and rounded once by the caller.
#pragma once

#include <cstddef>
#include <cstdint>

namespace bytecomp::compress {

double SumOfSquares(const float* x, size_t n);
// Largest |x| (the caller has checked that x is finite).
float MaxAbs(const float* x, size_t n);

// Both in one pass: the sum of squares (double) and the largest |x| bit pattern (which is
// >= 0x7f800000 when a NaN or Inf is present).
struct SquaresAndMax {
  double sum_of_squares = 0.0;
  uint32_t max_abs_bits = 0;
};
SquaresAndMax SumOfSquaresAndMaxAbs(const float* x, size_t n);

}  // namespace bytecomp::compress
