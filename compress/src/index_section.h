// The CPU side of the sparse index sections (format/sparse_format.h defines them): planning and
// writing a section for k strictly increasing indices, and reading one back with its checks.
// Used by topk, threshold, dgc and adaq (private to compress/src).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "bytecomp/compress/format/sparse_format.h"

namespace bytecomp::compress::sparse {

// Chooses the smallest encoding for k strictly increasing indices (ChooseIndexPlan over their
// deltas, counted in one vectorised pass).
IndexPlan PlanIndices(const uint32_t* indices, size_t k);

// Writes the section as planned; returns bytes written (== plan.bytes).
size_t WriteIndices(const uint32_t* indices, size_t k, const IndexPlan& plan, uint8_t* out);

// Deltas of at most 8 bits, one a byte (the AVX-512 paths of threshold's encode and the sparse
// decode; BMI2's bit deposit and extract, 8 deltas a step).
// Packs the deltas of k steps (as CompactByteSteps writes them: delta + 1, 256 as 0) in `width`
// (0-8) bits, bytes from out (PackedBytes(k, width) of them); clears steps[k, k + 8), which
// must exist.
size_t WriteByteSteps(uint8_t* steps, size_t k, uint32_t width, uint8_t* out);
// Unpacks deltas [first, first + count) of a section of `bytes` bytes (first a multiple of 8)
// into deltas[0, count) (room for count rounded up to 8); past the section's end, zeros.
void ReadByteDeltas(const uint8_t* section, size_t bytes, size_t first, size_t count,
                    uint32_t width, uint8_t* deltas);
// The k indices that k steps (as WriteByteSteps takes them) stand for.
void IndicesFromByteSteps(const uint8_t* steps, size_t k, uint32_t* indices);

// ReadIndexSection into indices (resized to k); errors are InvalidArgument naming the codec.
absl::Status ReadIndices(absl::string_view codec, const uint8_t* data, size_t bytes, size_t k,
                         size_t n, uint8_t encoding, uint8_t width, std::vector<uint32_t>& indices);

}  // namespace bytecomp::compress::sparse
