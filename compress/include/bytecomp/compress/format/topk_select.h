// Which elements topk sends: the k = KeptCount(ratio, n) largest |x| bit patterns (|x| compares
// like its bits with the sign cleared), and among the elements equal to the k-th largest the
// first ones in index order; then the sparse message (sparse_format.h). The CPU codec
// (compress/src/sparse_topk.cc) finds the threshold among the elements above a sampled bound,
// or else with one 2048-bin histogram, the CUDA one (compress/cuda/src/sparse_kernels.cu) with
// four 256-bin radix passes; both walk their histograms with SelectBin.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "bytecomp/compress/format/host_device.h"

namespace bytecomp::compress::topk {

// Walks the bins of a histogram from top_bin down and returns the first bin where the count of
// larger elements (*above, the sum of the bins above it) plus its own count reaches need; bin 0
// when none does. count(bin) is the bin's count.
BYTECOMP_HD_TEMPLATE
template <typename Count>
BYTECOMP_HD uint32_t SelectBin(uint32_t top_bin, uint64_t need, Count count, uint64_t* above) {
  uint64_t larger = 0;
  uint32_t bin = top_bin;
  for (; bin > 0; --bin) {
    const uint64_t c = count(bin);
    if (larger + c >= need) break;
    larger += c;
  }
  *above = larger;
  return bin;
}

// The m-th largest (1-based) of values; reorders values. Host code (the CPU's topk within its
// threshold bin, and dgc's and adaq's samples on both sides).
inline uint32_t NthLargest(std::vector<uint32_t>& values, size_t m) {
  std::nth_element(values.begin(), values.begin() + (m - 1), values.end(), std::greater<>());
  return values[m - 1];
}

// The cut that keeps the `need` largest of `values` (1 <= need <= size): the threshold
// (NthLargest), how many equal to it are kept (every one above it is), and how many equal it.
struct Cut {
  uint32_t threshold;
  size_t ties;
  size_t equal;
};
inline Cut CutForLargest(std::vector<uint32_t>& values, size_t need) {
  const uint32_t threshold = NthLargest(values, need);
  size_t greater = 0, equal = 0;
  for (uint32_t a : values) {
    greater += a > threshold ? 1 : 0;
    equal += a == threshold ? 1 : 0;
  }
  return Cut{threshold, need - greater, equal};
}

// The GPU's radix select, 8 bits a pass from the top of the |x| bit pattern (shift 24, 16, 8,
// 0): whether |x| bits a belong to this pass (its bits above the pass's digit match prefix).
BYTECOMP_HD bool RadixMatches(uint32_t a, uint32_t prefix, int shift) {
  const uint32_t high_mask = shift >= 24 ? 0u : ~((1u << (shift + 8)) - 1u);
  return (a & high_mask) == (prefix & high_mask);
}

// Picks the digit of this pass from its 256-bin histogram: the highest digit where the count
// of larger elements reaches need; updates prefix and need (the elements still to take among
// those equal to the new prefix). After the pass at shift 0, prefix is the k-th largest bit
// pattern and need the number of elements equal to it to keep (the first ones in index order).
BYTECOMP_HD void RadixSelectDigit(const uint32_t* hist, int shift, uint32_t* prefix,
                                  uint32_t* need) {
  uint64_t above = 0;
  const uint32_t digit = SelectBin(
      255u, *need, [hist](uint32_t d) { return hist[d]; }, &above);
  *need -= static_cast<uint32_t>(above);
  *prefix |= digit << shift;
}

}  // namespace bytecomp::compress::topk
