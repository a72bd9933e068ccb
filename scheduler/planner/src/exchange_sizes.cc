#include "bytecomp/planner/exchange_sizes.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "bytecomp/compress/format/blocksparse_format.h"

namespace bytecomp::planner {

double UnionFraction(double fraction, double senders) {
  const double f = std::clamp(fraction, 0.0, 1.0);
  return 1.0 - std::pow(1.0 - f, std::max(1.0, senders));
}

double SparseBytesPerElement(double density) {
  if (density <= 0) return 8;
  const double gap = 1.0 / std::min(density, 1.0);
  // A varint holds 7 bits a byte.
  const double index = std::min(4.0, 1.0 + std::floor(std::log2(gap) / 7.0));
  return 4.0 + index;
}

double UnionPullBytes(double kept, double senders, double bytes) {
  const double u = UnionFraction(kept, senders);
  return 16.0 + u * (bytes / 4.0) * SparseBytesPerElement(u);
}

SummedIndicesBytes SummedIndicesSizes(const proto::CodecCost& codec, double bytes, double senders) {
  const double values = codec.kept_fraction() * bytes;
  const double index = std::max(0.0, codec.ratio() - codec.kept_fraction()) * bytes;
  SummedIndicesBytes s;
  s.push1 = 28.0 + index / std::max(1.0, senders);
  s.pull1 = 16.0 + index;
  s.push2 = 8.0 + values;
  s.pull2 = 4.0 + values;
  return s;
}

double BlockSparseBytes(double density, double bytes) {
  // The planner sizes partitions in fp32 bytes; the format counts elements.
  const size_t elements = static_cast<size_t>(std::ceil(std::max(0.0, bytes) / 4.0));
  return static_cast<double>(compress::blocksparse::PayloadBytesAtDensity(
      elements, kBlockSparseBlock, std::clamp(density, 0.0, 1.0)));
}

}  // namespace bytecomp::planner
