// blocksparse (OmniReduce) on the CPU (private to compress/src): the codec
// (sparse_blocksparse.cc) and its server aggregator (blocksparse_aggregator.cc), which reads
// pushes through the codec's Parse. Wire format: format/blocksparse_format.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "bytecomp/compress/aggregator.h"
#include "bytecomp/compress/codec.h"
#include "bytecomp/compress/format/blocksparse_format.h"

namespace bytecomp::compress {

// Sends the blocks of `block` elements that hold some |x| > threshold (fp32), with their
// positions. Threshold 0 drops only all-zero blocks: lossless. With the residual memory, what
// a larger threshold drops is fed back.
class BlocksparseCodec final : public Codec {
 public:
  BlocksparseCodec(uint32_t block, double threshold);

  absl::string_view name() const override { return "blocksparse"; }
  CodecProperties properties() const override;
  size_t MaxEncodedBytes(size_t n) const override;
  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext& ctx,
                                absl::Span<uint8_t> out) override;
  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext& ctx,
                      absl::Span<float> output) override;
  // Adds the carried blocks only: work in proportion to them.
  absl::Status DecodeAdd(absl::Span<const uint8_t> encoded, const CodecContext& ctx,
                         absl::Span<float> accumulator) override;

  uint32_t block() const { return block_; }

  // Checks a payload for n elements completely (header, positions, size, finite values)
  // before anything reads its values; leaves the carried block indices, increasing, in
  // *carried and returns where the values start. Work in proportion to the payload.
  absl::StatusOr<const uint8_t*> Parse(absl::Span<const uint8_t> encoded, size_t n,
                                       std::vector<uint32_t>* carried) const;

  // Parse, then f(block index, its first element, its length, its values) for every carried
  // block in increasing order; nothing is called for a malformed payload.
  template <typename F>
  absl::Status ForEachCarriedBlock(absl::Span<const uint8_t> encoded, size_t n, F f) {
    absl::StatusOr<const uint8_t*> values = Parse(encoded, n, &carried_);
    if (!values.ok()) return values.status();
    const uint8_t* v = *values;
    for (uint32_t b : carried_) {
      const size_t len = blocksparse::BlockLength(n, block_, b);
      f(b, size_t{b} * block_, len, v);
      v += 4 * len;
    }
    return absl::OkStatus();
  }

 private:
  uint32_t block_;
  uint32_t kept_from_bits_;        // sparse::ThresholdKeptFromBits of the threshold
  std::vector<uint32_t> carried_;  // encode's and decode's scratch
};

// The server aggregator "block_sparse" (aggregator.h): the union of the pushes' blocks in
// increasing order, each block summed in fp32 in the order the payloads are added; memory and
// work follow the carried blocks, not the tensor. EncodedSum gives the block-sparse sum.
std::unique_ptr<Aggregator> MakeBlockSparseAggregator(std::unique_ptr<BlocksparseCodec> codec);

}  // namespace bytecomp::compress
