// Index sections of the sparse wire formats (topk, threshold, dgc, adaq, in sparse_codecs.cc).
//
// k strictly increasing indices i_0 < i_1 < ... < i_{k-1} < n are sent in one of three
// encodings, whichever is smallest for the message (on a tie the earlier one in this list):
//   0 raw      k little-endian uint32: 4k bytes.
//   1 bitpack  deltas d_0 = i_0, d_j = i_j - i_{j-1} - 1, each in `width` bits (width = bits of
//              the largest delta, 0..32), an LSB-first bit stream: ceil(k * width / 8) bytes.
//   2 varint   the same deltas as LEB128 varints (7 bits a byte, low group first, high bit set
//              on every byte but the last): sum of ceil(max(1, bits(d_j)) / 7) bytes.
// The encoding and width are carried in the message header (see each format).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace bytecomp::compress::sparse {

enum IndexEncoding : uint8_t { kRaw = 0, kBitPack = 1, kVarint = 2 };

struct IndexPlan {
  IndexEncoding encoding = kRaw;
  uint8_t width = 0;  // kBitPack only
  size_t bytes = 0;   // size of the index section
};

// Chooses the smallest encoding for k strictly increasing indices.
IndexPlan PlanIndices(const uint32_t* indices, size_t k);

// Writes the section as planned; returns bytes written (== plan.bytes).
size_t WriteIndices(const uint32_t* indices, size_t k, const IndexPlan& plan, uint8_t* out);

// Decodes a section of `bytes` bytes holding exactly k indices in the given encoding into
// indices (resized to k). Checks: the section size matches, every index < n, strictly
// increasing. Errors are InvalidArgument naming the codec.
absl::Status ReadIndices(absl::string_view codec, const uint8_t* data, size_t bytes, size_t k,
                         size_t n, uint8_t encoding, uint8_t width, std::vector<uint32_t>& indices);

}  // namespace bytecomp::compress::sparse
