// The sparse message on the CPU (format/sparse_format.h): finishing one behind its values, and
// SparseCodec's decoding.
#include <algorithm>

#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/format/sparse_format.h"
#include "codec_checks.h"
#include "index_section.h"
#include "sparse_codecs.h"

namespace bytecomp::compress {

size_t FinishSparseMessage(uint8_t* out, size_t n, size_t k, const uint32_t* indices) {
  const sparse::IndexPlan plan = sparse::PlanIndices(indices, k);
  sparse::WriteHeader(out, static_cast<uint32_t>(n), static_cast<uint32_t>(k), plan);
  const size_t written = sparse::WriteIndices(indices, k, plan, out + sparse::kHeaderBytes + 4 * k);
  return sparse::kHeaderBytes + 4 * k + written;
}

CodecProperties SparseCodec::properties() const {
  CodecProperties p;
  p.sparse = true;
  return p;
}

absl::Status SparseCodec::Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                                 absl::Span<float> output) {
  if (auto s = Parse(encoded, output.size()); !s.ok()) return s;
  std::fill(output.begin(), output.end(), 0.0f);
  const uint8_t* values = encoded.data() + sparse::kHeaderBytes;
  for (size_t j = 0; j < indices_.size(); ++j) output[indices_[j]] = GetF32(values + 4 * j);
  return absl::OkStatus();
}

absl::Status SparseCodec::DecodeAdd(absl::Span<const uint8_t> encoded, const CodecContext&,
                                    absl::Span<float> accumulator) {
  if (auto s = Parse(encoded, accumulator.size()); !s.ok()) return s;
  const uint8_t* values = encoded.data() + sparse::kHeaderBytes;
  for (size_t j = 0; j < indices_.size(); ++j) accumulator[indices_[j]] += GetF32(values + 4 * j);
  return absl::OkStatus();
}

absl::Status SparseCodec::Parse(absl::Span<const uint8_t> encoded, size_t n) {
  const uint8_t* p = encoded.data();
  FormatError e = sparse::CheckHeader(p, encoded.size(), n, RequiredK(n));
  if (!e.ok()) return FormatErrorStatus(name(), e);
  const sparse::Header h = sparse::ReadHeader(p);
  if (!sparse::ValuesFinite(p + sparse::kHeaderBytes, h.k)) {
    return FormatErrorStatus(name(), MakeFormatError(FormatErrorCode::kValuesNotFinite));
  }
  return sparse::ReadIndices(name(), p + sparse::kHeaderBytes + 4ull * h.k, h.index_bytes, h.k, n,
                             h.encoding, h.width, indices_);
}

}  // namespace bytecomp::compress
