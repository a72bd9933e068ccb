// The sparse message's and index sections' GPU writer and reader (compress/cuda/src/
// sparse_message.cu) on the host, with the format header's functions in the order the kernels
// call them: shared by the shared-math tests of the sparse codecs.
#pragma once

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/format_error.h"
#include "bytecomp/compress/format/sparse_format.h"
#include "gtest/gtest.h"
#include "shared_math_util.h"

namespace bytecomp::compress::shared_math {

// IndexSectionCudaCodec::WriteIndexSection: the deltas' statistics, the plan, the section by
// the per-thread writers (bit-packed words ORed together, varints at their offsets).
inline std::vector<uint8_t> HostIndexSection(const std::vector<uint32_t>& idx,
                                             sparse::IndexPlan* plan_out) {
  const size_t k = idx.size();
  uint32_t max_delta = 0;
  size_t varint_bytes = 0;
  for (size_t j = 0; j < k; ++j) {
    max_delta = std::max(max_delta, sparse::IndexDelta(idx.data(), j));
    varint_bytes += sparse::VarintLength(sparse::IndexDelta(idx.data(), j));
  }
  const sparse::IndexPlan plan = sparse::ChooseIndexPlan(k, max_delta, varint_bytes);
  *plan_out = plan;
  std::vector<uint8_t> section;
  if (plan.encoding == sparse::kRaw) {
    for (uint32_t i : idx) AppendU32(section, i);
  } else if (plan.encoding == sparse::kBitPack) {
    std::vector<uint32_t> words((plan.bytes + 3) / 4 + 1, 0u);
    for (size_t j = 0; j < k && plan.width > 0; ++j) {
      size_t word;
      uint32_t low, high;
      sparse::BitPackDeltaWords(j, plan.width, sparse::IndexDelta(idx.data(), j), &word, &low,
                                &high);
      words[word] |= low;
      if (high != 0) words[word + 1] |= high;
    }
    section.resize(plan.bytes);
    if (plan.bytes > 0)
      std::memcpy(section.data(), words.data(), plan.bytes);  // data() may be null
  } else {
    section.resize(varint_bytes);
    uint8_t* p = section.data();
    for (size_t j = 0; j < k; ++j) p = sparse::WriteVarint(p, sparse::IndexDelta(idx.data(), j));
    EXPECT_EQ(p, section.data() + section.size());
  }
  return section;
}

// sparse_message.cu's writer: values and indices of the flagged elements in index order, the
// index section, the header.
inline std::vector<uint8_t> HostSparseMessage(const std::vector<float>& x,
                                              const std::vector<bool>& keep) {
  std::vector<uint32_t> idx;
  std::vector<uint8_t> values;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!keep[i]) continue;
    idx.push_back(static_cast<uint32_t>(i));
    AppendF32(values, x[i]);
  }
  sparse::IndexPlan plan;
  const std::vector<uint8_t> section = HostIndexSection(idx, &plan);
  std::vector<uint8_t> out(sparse::kHeaderBytes);
  sparse::WriteHeader(out.data(), static_cast<uint32_t>(x.size()),
                      static_cast<uint32_t>(idx.size()), plan);
  out.insert(out.end(), values.begin(), values.end());
  out.insert(out.end(), section.begin(), section.end());
  return out;
}

// IndexSectionCudaCodec::LaunchReadIndexSection: a thread per index (or per byte of varints),
// the steps' prefix sums, the doubts; where any doubt was, the serial reader's pass and error.
inline FormatError HostReadIndexSection(const uint8_t* data, size_t bytes, size_t k, size_t n,
                                        uint8_t encoding, uint8_t width, uint32_t* idx) {
  bool doubt = !((encoding == sparse::kRaw && bytes == 4 * k) ||
                 (encoding == sparse::kBitPack && width <= 32 && bytes == PackedBytes(k, width)) ||
                 (encoding == sparse::kVarint && (bytes == 0) == (k == 0)));
  if (!doubt && k > 0 && encoding == sparse::kRaw) {
    for (size_t j = 0; j < k; ++j) {  // RawIndicesKernel
      idx[j] = GetU32(data + 4 * j);
      if (idx[j] >= n || (j > 0 && GetU32(data + 4 * (j - 1)) >= idx[j])) doubt = true;
    }
  } else if (!doubt && k > 0) {
    std::vector<uint64_t> steps(k, 0);
    if (encoding == sparse::kBitPack) {
      for (size_t j = 0; j < k; ++j) steps[j] = sparse::BitPackedDelta(data, bytes, j, width) + 1u;
    } else {
      std::vector<uint32_t> ordinal(bytes);  // VarintEndsKernel, then the exclusive sums
      uint32_t ended = 0;
      for (size_t b = 0; b < bytes; ++b) {
        ordinal[b] = ended;
        ended += (data[b] & 0x80u) ? 0u : 1u;
      }
      for (size_t b = 0; b < bytes; ++b) {  // VarintStepsKernel
        if (b == bytes - 1 && ((data[b] & 0x80u) != 0 || ordinal[b] + 1u != k)) doubt = true;
        if (!sparse::BeginsVarint(data, b)) continue;
        uint64_t d = 0;
        if (ordinal[b] >= k || !sparse::VarintAt(data, bytes, b, &d)) {
          doubt = true;
          continue;
        }
        steps[ordinal[b]] = d + 1u;
      }
    }
    uint64_t sum = 0;
    for (size_t j = 0; j < k; ++j) {  // the inclusive sums, IndicesFromStepsKernel
      sum += steps[j];
      idx[j] = static_cast<uint32_t>(sum - 1u);
    }
    if (sum - 1u >= n) doubt = true;
  }
  if (!doubt) return FormatError();
  return sparse::ReadIndexSection(data, bytes, k, n, encoding, width, idx);  // ReadIndicesKernel
}

// sparse_message.cu's reader: the header checked on the host, the section read by the parallel
// reader, the values scattered (not when the indices were bad).
inline absl::StatusOr<std::vector<float>> HostSparseDecode(absl::string_view codec,
                                                           const std::vector<uint8_t>& m, size_t n,
                                                           int64_t required_k) {
  FormatError e = sparse::CheckHeader(m.data(), m.size(), n, required_k);
  if (!e.ok()) return FormatErrorStatus(codec, e);
  const sparse::Header h = sparse::ReadHeader(m.data());
  std::vector<uint32_t> idx(h.k);
  const uint8_t* values = m.data() + sparse::kHeaderBytes;
  e = HostReadIndexSection(values + 4 * h.k, h.index_bytes, h.k, n, h.encoding, h.width,
                           idx.data());
  if (!e.ok()) return FormatErrorStatus(codec, e);
  std::vector<float> out(n, 0.0f);
  for (size_t j = 0; j < h.k; ++j) {
    const float v = GetF32(values + 4 * j);
    if (!IsFiniteFloat(v)) {
      return FormatErrorStatus(codec, MakeFormatError(FormatErrorCode::kValuesNotFinite));
    }
    out[idx[j]] = v;
  }
  return out;
}

}  // namespace bytecomp::compress::shared_math
