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

// ReadIndexSection into indices (resized to k); errors are InvalidArgument naming the codec.
absl::Status ReadIndices(absl::string_view codec, const uint8_t* data, size_t bytes, size_t k,
                         size_t n, uint8_t encoding, uint8_t width, std::vector<uint32_t>& indices);

}  // namespace bytecomp::compress::sparse
