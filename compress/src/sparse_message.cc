// The sparse message on the CPU (format/sparse_format.h): finishing one behind its values, and
// SparseCodec's decoding.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/format/sparse_format.h"
#include "codec_checks.h"
#include "index_section.h"
#include "simd_kernel.h"
#include "sparse_codecs.h"

namespace bytecomp::compress {
namespace {

// (GCC 12 warns that intrinsics' undefined pass-through operands "may be used uninitialized"
// or "are used uninitialized", a false positive of its headers.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
// The dense output of a decode, written front to back in windows of kWindow floats that stay
// in L1: the kept values land in the window (scattered), then the window goes out whole, its
// full cache lines as non-temporal stores (the output is written once and not read soon), and
// is cleared for the next. AVX-512 only.
constexpr size_t kWindow = 2048;

struct DenseWindows {
  float* line0;  // out rounded down to its cache line: window w covers line0 + w * kWindow
  size_t off;    // out - line0, in floats
  size_t n;
  uint32_t start = 0;  // the current window's first element, counted from line0
  alignas(64) float buf[kWindow];
};

BYTECOMP_TARGET_AVX512_BMI2 void FlushWindow(DenseWindows& w) {
  const __m512 zero = _mm512_setzero_ps();
  const int64_t end = static_cast<int64_t>(w.n + w.off);  // the output's end, from line0
  if (w.start >= w.off && static_cast<int64_t>(w.start + kWindow) <= end) {  // whole lines only
    float* out = w.line0 + w.start;
    for (size_t l = 0; l < kWindow; l += 32) {
      const __m512 a = _mm512_load_ps(w.buf + l), b = _mm512_load_ps(w.buf + l + 16);
      _mm512_store_ps(w.buf + l, zero);
      _mm512_store_ps(w.buf + l + 16, zero);
      _mm512_stream_ps(out + l, a);
      _mm512_stream_ps(out + l + 16, b);
    }
    w.start += kWindow;
    return;
  }
  for (size_t l = 0; l < kWindow; l += 16) {
    const int64_t q = static_cast<int64_t>(w.start + l);
    if (q >= end) break;
    const __m512 v = _mm512_load_ps(w.buf + l);
    _mm512_store_ps(w.buf + l, zero);
    float* p = w.line0 + q;
    if (q >= static_cast<int64_t>(w.off) && q + 16 <= end) {
      _mm512_stream_ps(p, v);
    } else {  // the output's first or last partial line
      const int64_t from = std::max<int64_t>(static_cast<int64_t>(w.off) - q, 0);
      const int64_t to = std::min<int64_t>(end - q, 16);
      const __mmask16 lanes =
          static_cast<__mmask16>(_bzhi_u32(0xffff, static_cast<uint32_t>(to)) &
                                 ~_bzhi_u32(0xffff, static_cast<uint32_t>(from)));
      _mm512_mask_storeu_ps(p, lanes, v);
    }
  }
  w.start += kWindow;
}

BYTECOMP_TARGET_AVX512_BMI2 void FinishWindows(DenseWindows& w) {
  while (w.start < w.n + w.off) FlushWindow(w);
  _mm_sfence();
}

// Decode of a message whose index section is bit-packed deltas of at most 8 bits (header and
// the section's size checked), in one pass: the deltas 256 at a time into bytes (and the
// values' finite check), then each value into the output's window at the position its delta
// says. Returns false,
// the output unspecified, where the message is not one the checks pass (a non-finite value,
// an index >= n) or its padding bits are not zero: the caller's full decode then says why, or
// decodes it.
BYTECOMP_TARGET_AVX512_BMI2 bool DecodeByteDeltas(const uint8_t* values, const uint8_t* section,
                                                  size_t bytes, size_t k, uint32_t width,
                                                  float* out, size_t n) {
  if (k > 0 && !PaddingBitsZero(section, k, static_cast<int>(width))) return false;
  DenseWindows w;
  w.off = (reinterpret_cast<uintptr_t>(out) & 63) / 4;
  w.line0 = out - w.off;
  w.n = n;
  std::memset(w.buf, 0, sizeof(w.buf));
  constexpr size_t kChunk = 256;
  alignas(64) uint8_t deltas[kChunk] = {};
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  __m512i max_bits = _mm512_setzero_si512();
  const uint32_t end = static_cast<uint32_t>(n + w.off);
  uint32_t next = static_cast<uint32_t>(w.off);  // the smallest index the next one may take, + off
  uint32_t start = 0;                            // w.start
  float* const buf = w.buf;
  for (size_t begin = 0; begin < k; begin += kChunk) {
    const size_t len = std::min(kChunk, k - begin);
    sparse::ReadByteDeltas(section, bytes, begin, len, width, deltas);
    const uint8_t* v = values + 4 * begin;
    for (size_t l = 0; l < len; l += 16) {
      const __mmask16 lanes =
          len - l >= 16 ? 0xffff : static_cast<__mmask16>(_bzhi_u32(0xffff, len - l));
      max_bits = _mm512_mask_max_epu32(
          max_bits, lanes, max_bits,
          _mm512_and_si512(_mm512_maskz_loadu_epi32(lanes, v + 4 * l), abs_mask));
    }
    // Scalar stores (the scatter instruction is slower on AMD Zen 4), four positions at a time
    // from `next` (one add a group carried from the last) and one window check for the four.
    auto place = [&](uint32_t p, size_t l) -> bool {
      if (p - start >= kWindow) {
        if (p >= end) return false;
        do {
          FlushWindow(w);
          start = w.start;
        } while (p - start >= kWindow);
      }
      buf[p - start] = GetF32(v + 4 * l);
      return true;
    };
    size_t l = 0;
    for (; l + 4 <= len; l += 4) {
      const uint32_t a1 = deltas[l] + 1u + deltas[l + 1];
      const uint32_t a2 = a1 + 1u + deltas[l + 2];
      const uint32_t a3 = a2 + 1u + deltas[l + 3];
      const uint32_t p0 = next + deltas[l];  // < 2^32: next <= end + kWindow + 256 < 2^31 + 8192
      const uint32_t p3 = next + a3;
      if (p3 - start < kWindow) {
        buf[p0 - start] = GetF32(v + 4 * l);
        buf[next + a1 - start] = GetF32(v + 4 * l + 4);
        buf[next + a2 - start] = GetF32(v + 4 * l + 8);
        buf[p3 - start] = GetF32(v + 4 * l + 12);
      } else if (!place(p0, l) || !place(next + a1, l + 1) || !place(next + a2, l + 2) ||
                 !place(p3, l + 3)) {
        return false;
      }
      next = p3 + 1;
    }
    for (; l < len; ++l) {
      const uint32_t p = next + deltas[l];
      next = p + 1;
      if (!place(p, l)) return false;
    }
  }
  FinishWindows(w);
  // Increasing: the last index is the largest (those at or past the end went to the last
  // window's lines past it, which no store writes out).
  if (next > end) return false;
  return static_cast<uint32_t>(_mm512_reduce_max_epu32(max_bits)) < kNonFiniteAbsBits;
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace

size_t FinishSparseMessage(uint8_t* out, size_t n, size_t k, const uint32_t* indices) {
  const sparse::IndexPlan plan = sparse::PlanIndices(indices, k);
  sparse::WriteHeader(out, static_cast<uint32_t>(n), static_cast<uint32_t>(k), plan);
  const size_t written = sparse::WriteIndices(indices, k, plan, out + sparse::kHeaderBytes + 4 * k);
  return sparse::kHeaderBytes + 4 * k + written;
}

size_t FinishByteStepMessage(uint8_t* out, size_t n, size_t k, uint8_t* steps, uint32_t max_delta) {
  // Deltas of at most 8 bits pack into at most k bytes, which no varint section (k bytes and
  // more) undercuts: k stands for the varint bytes.
  const sparse::IndexPlan plan = sparse::ChooseIndexPlan(k, max_delta, k);
  sparse::WriteHeader(out, static_cast<uint32_t>(n), static_cast<uint32_t>(k), plan);
  uint8_t* section = out + sparse::kHeaderBytes + 4 * k;
  const size_t written = k == 0 ? 0 : sparse::WriteByteSteps(steps, k, plan.width, section);
  return sparse::kHeaderBytes + 4 * k + written;
}

CodecProperties SparseCodec::properties() const {
  CodecProperties p;
  p.sparse = true;
  return p;
}

absl::Status SparseCodec::Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                                 absl::Span<float> output) {
  const size_t n = output.size();
  if (encoded.size() >= sparse::kHeaderBytes && n < (size_t{1} << 31) && ByteDeltaPaths()) {
    const uint8_t* p = encoded.data();
    const sparse::Header h = sparse::ReadHeader(p);
    if (sparse::CheckHeader(p, encoded.size(), n, RequiredK(n)).ok() &&
        h.encoding == sparse::kBitPack && h.width <= 8 &&
        h.index_bytes == PackedBytes(h.k, h.width) &&
        DecodeByteDeltas(p + sparse::kHeaderBytes, p + sparse::kHeaderBytes + 4ull * h.k,
                         h.index_bytes, h.k, h.width, output.data(), n)) {
      return absl::OkStatus();
    }
  }
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
