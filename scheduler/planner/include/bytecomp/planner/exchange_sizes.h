// The bytes a partition's exchanges move, by the codec's exchange (proto CodecCost.exchange),
// for the cost model (decision_tree.h). Sizes are per worker and message, for a partition of
// `bytes` fp32 input bytes and `senders` pushing workers.
#pragma once

#include <cstddef>

#include "planner.pb.h"

namespace bytecomp::planner {

// Of `senders` pushes that each hold a random `fraction` of the elements (or blocks), the
// fraction their union holds: 1 - (1 - fraction)^senders.
double UnionFraction(double fraction, double senders);

// A sparse message's bytes per element sent, at `density` of the elements: the fp32 value and
// the index as a varint of the mean gap (sparse_format.h; 1 byte up to gaps of 127, at most 4).
double SparseBytesPerElement(double density);

// The servers' sparse union of `senders` pushes that each keep `kept` of the elements, as the
// threshold-0 message that carries it (the gather style of top-k).
double UnionPullBytes(double kept, double senders, double bytes);

// artopk (EXCHANGE_SUMMED_INDICES, format/artopk_format.h): stage 1 carries the chooser's index
// section, (ratio - kept_fraction) * bytes, up from one worker of `senders` (averaged over
// them: the chooser turns with the partition) and back to every worker; stage 2 carries the k
// values up and their sum back.
struct SummedIndicesBytes {
  double push1 = 0, pull1 = 0, push2 = 0, pull2 = 0;
};
SummedIndicesBytes SummedIndicesSizes(const proto::CodecCost& codec, double bytes, double senders);

// blocksparse (EXCHANGE_BLOCK_SPARSE) at its default block of 256 elements, the block that
// TensorProfile.block_density counts: the non-zero blocks of `density` of them, their
// positions (a bitmap or a list, the smaller) and the header; the format's own size model
// (format/blocksparse_format.h, PayloadBytesAtDensity) for `bytes` of fp32.
inline constexpr size_t kBlockSparseBlock = 256;
double BlockSparseBytes(double density, double bytes);

}  // namespace bytecomp::planner
