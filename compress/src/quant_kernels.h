// Reductions shared by the quantisation codecs (private to compress/src). Sums are
// accumulated in double over 8 lanes (so that they vectorise) and rounded once by the caller.
#pragma once

#include <cstddef>
#include <cstdint>

namespace bytecomp::compress {

double SumOfSquares(const float* x, size_t n);
// Largest |x| (the caller has checked that x is finite).
float MaxAbs(const float* x, size_t n);

}  // namespace bytecomp::compress
