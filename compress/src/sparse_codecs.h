// What the sparsification codecs share on the CPU (private to compress/src): the base of
// topk, threshold and dgc (the sparse message of format/sparse_format.h), the compaction
// kernels that gather the kept elements, and the registration hooks of the codec sources.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/types/span.h"
#include "bytecomp/compress/codec.h"
#include "bytecomp/compress/params.h"
#include "bytecomp/compress/registry.h"
#include "param_specs.h"

namespace bytecomp::compress {

inline uint32_t AbsBits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b & 0x7fffffffu;
}

// ---- the sparse message (sparse_message.cc)

// Writes the header and the index section behind the k values already at out + 16; returns
// the message size.
size_t FinishSparseMessage(uint8_t* out, size_t n, size_t k, const uint32_t* indices);

// FinishSparseMessage for k indices given as their steps, one a byte, as CompactByteSteps
// leaves them (max_delta: the largest delta); steps needs 8 bytes of room past k. The same
// bytes.
size_t FinishByteStepMessage(uint8_t* out, size_t n, size_t k, uint8_t* steps, uint32_t max_delta);

// Base of topk, threshold and dgc: decode and the sparse add.
class SparseCodec : public Codec {
 public:
  CodecProperties properties() const override;
  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext& ctx,
                      absl::Span<float> output) override;
  // The sparse add: validated fully before the first write.
  absl::Status DecodeAdd(absl::Span<const uint8_t> encoded, const CodecContext& ctx,
                         absl::Span<float> accumulator) override;

 protected:
  // k that the message must carry for n elements, or -1 when any k <= n is valid.
  virtual int64_t RequiredK(size_t n) const { return -1; }

  // Checks the header, sizes, values and indices; leaves the indices in indices_.
  absl::Status Parse(absl::Span<const uint8_t> encoded, size_t n);

  std::vector<uint32_t> indices_;  // decode scratch, and encode's selected indices
};

// ---- compaction (sparse_compact.cc)

// Room past the count that the vector kernels may write (16 lanes of AVX-512).
constexpr size_t kCompactSlack = 16;

// For every i with lo <= bits(x[i]) <= hi, appends x[i] to values and i (+ base: x[0..n) are
// elements base..base+n of the tensor) to indices; either output may be null. kAbs compares
// |x|'s bit pattern (sign cleared); otherwise the raw bit pattern (positive values in
// [0, 0x7f800000), negative ones from 0x80000000 up, ordered by magnitude). With AVX-512 it
// stores 16 lanes at a time, so both outputs need room for the count plus kCompactSlack
// elements. Returns the count. above_hi (may be null) is set to true when some element lies
// above hi (and left as it is otherwise).
template <bool kAbs = true>
size_t CompactRange(const float* x, size_t n, uint32_t lo, uint32_t hi, uint8_t* values,
                    uint32_t* indices, uint32_t base = 0, bool* above_hi = nullptr);

// Every finite |x| >= lo into the message's value area (out + 16) and indices. The value area
// of a 16 + 8n byte buffer holds 2n values, enough for the vector kernel's slack from n >= 16.
// non_finite (may be null): whether x holds a NaN or an Inf, found in the same pass.
size_t Compact(const float* x, size_t n, uint32_t lo, uint8_t* out, uint32_t* indices,
               bool* non_finite = nullptr);

// Whether the byte paths (CompactByteSteps, the sparse decode's byte deltas) run: AVX-512 and
// BMI2.
bool ByteDeltaPaths();

// threshold's one pass where ByteDeltaPaths() (the caller checks; n < 2^31): Compact's
// selection from lo (1 <= lo < kNonFiniteAbsBits) with each kept index's step from the one
// before, i_j - i_{j-1} (i_{-1} = -1: the delta + 1, 1..256), as a byte (256 as 0) instead of
// the indices, while every step fits. steps needs room for the count plus kCompactSlack bytes.
// Where a step above 256 turns up, the result stops before the block of 1024 elements that
// holds it: the first `done` elements are compacted then (k values at out + 16, their k steps),
// the rest is not.
struct ByteStepCompaction {
  size_t k = 0;
  size_t done = 0;
  bool stopped = false;
  uint32_t max_delta = 0;   // the largest delta (step - 1) of the k
  bool non_finite = false;  // a NaN or an Inf among the first `done` elements (or a few more)
};
ByteStepCompaction CompactByteSteps(const float* x, size_t n, uint32_t lo, uint8_t* out,
                                    uint8_t* steps);

// ---- registration (sparse_codecs.cc calls these in its order)

// The spec of a codec whose one parameter is the ratio (param_specs::RatioParam).
template <typename Make>
CodecSpec RatioSpec(const char* name, const char* summary, Make make) {
  return {.name = name,
          .summary = summary,
          .params = {param_specs::RatioParam()},
          .factory = [make](const CodecParams& params) -> absl::StatusOr<std::unique_ptr<Codec>> {
            ParamReader r(params);
            const double ratio = r.Double("ratio");
            if (!r.ok()) return r.status();
            return make(ratio);
          }};
}

// ... built as CodecT(ratio).
template <typename CodecT>
CodecSpec RatioSpecOf(const char* name, const char* summary) {
  return RatioSpec(name, summary,
                   [](double r) -> std::unique_ptr<Codec> { return std::make_unique<CodecT>(r); });
}

// CodecFacts::lossless_when of threshold and blocksparse, which drop what is at or below their
// "threshold": at 0, only zeros.
inline bool ThresholdIsZero(const CodecParams& params) {
  auto it = params.find("threshold");
  double threshold = 0;
  return it != params.end() && absl::SimpleAtod(it->second, &threshold) && threshold == 0;
}

void RegisterTopkCodec(CodecRegistry& registry);         // sparse_topk.cc
void RegisterThresholdCodec(CodecRegistry& registry);    // sparse_topk.cc
void RegisterRandomkCodec(CodecRegistry& registry);      // sparse_randomk.cc
void RegisterDgcCodec(CodecRegistry& registry);          // sparse_dgc.cc
void RegisterAdaqCodec(CodecRegistry& registry);         // sparse_adaq.cc
void RegisterBlocksparseCodec(CodecRegistry& registry);  // sparse_blocksparse.cc
void RegisterArtopkCodec(CodecRegistry& registry);       // sparse_artopk.cc

}  // namespace bytecomp::compress
