// blocksparse (OmniReduce): the blocks of `block` elements that hold some |x| > threshold, with
// their positions as an index list or a bitmap (format/blocksparse_format.h, which the CUDA
// codec shares). The server sums block-sparse and answers pulls with the block-sparse sum
// (blocksparse_aggregator.cc).
#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "blocksparse_codec.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/format/blocksparse_format.h"
#include "bytecomp/compress/format/sparse_format.h"
#include "codec_checks.h"
#include "sparse_codecs.h"

namespace bytecomp::compress {

BlocksparseCodec::BlocksparseCodec(uint32_t block, double threshold)
    : block_(block), kept_from_bits_(sparse::ThresholdKeptFromBits(threshold)) {}

CodecProperties BlocksparseCodec::properties() const {
  CodecProperties p;
  p.sparse = true;
  p.lossless = kept_from_bits_ == 1;  // drops only all-zero blocks
  p.unbiased = p.lossless;
  p.sum_in_push_format = true;
  return p;
}

size_t BlocksparseCodec::MaxEncodedBytes(size_t n) const {
  return blocksparse::MaxPayloadBytes(n, block_);
}

absl::StatusOr<size_t> BlocksparseCodec::Encode(absl::Span<const float> input, const CodecContext&,
                                                absl::Span<uint8_t> out) {
  const size_t n = input.size();
  if (auto s = codec_checks::CheckEncodeCall(*this, n, out.size()); !s.ok()) return s;
  const size_t blocks = blocksparse::BlockCount(n, block_);
  // One read of the input: each block's largest |x| decides it (and finds NaN and Inf), and a
  // kept block is copied at once, behind the largest positions section (the bitmap); when the
  // index list is smaller (m <= B / 32 blocks), the values move down to meet it.
  const size_t staged = blocksparse::kHeaderBytes + blocksparse::BitmapBytes(blocks);
  size_t values_bytes = 0;
  carried_.clear();
  for (size_t b = 0; b < blocks; ++b) {
    const float* x = input.data() + b * block_;
    const size_t len = blocksparse::BlockLength(n, block_, b);
    const uint32_t max_bits = MaxAbsBits(x, len);
    if (!IsFiniteBits(max_bits)) return NonFiniteError(input, codec_checks::InputWhat(name()));
    if (!blocksparse::Carries(max_bits, kept_from_bits_)) continue;
    carried_.push_back(static_cast<uint32_t>(b));
    std::memcpy(out.data() + staged + values_bytes, x, 4 * len);
    values_bytes += 4 * len;
  }
  const size_t offset =
      blocksparse::WriteHeaderAndPositions(out.data(), static_cast<uint32_t>(n), block_,
                                           carried_.data(), static_cast<uint32_t>(carried_.size()));
  if (offset != staged) std::memmove(out.data() + offset, out.data() + staged, values_bytes);
  return offset + values_bytes;
}

absl::StatusOr<const uint8_t*> BlocksparseCodec::Parse(absl::Span<const uint8_t> encoded, size_t n,
                                                       std::vector<uint32_t>* carried) const {
  blocksparse::Header h;
  FormatError e = blocksparse::CheckHeader(encoded.data(), encoded.size(), n, block_, &h);
  // CheckHeader found the size to hold m blocks of values: the scratch below is bounded by the
  // payload.
  if (e.ok()) {
    carried->resize(h.m);
    e = blocksparse::ReadPositions(encoded.data(), encoded.size(), h, carried->data());
  }
  const size_t offset = e.ok() ? blocksparse::ValuesOffset(n, block_, h.m) : 0;
  if (e.ok() && !sparse::ValuesFinite(encoded.data() + offset, (encoded.size() - offset) / 4)) {
    e = MakeFormatError(FormatErrorCode::kValuesNotFinite);
  }
  if (!e.ok()) return FormatErrorStatus(name(), e);
  return encoded.data() + offset;
}

absl::Status BlocksparseCodec::Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                                      absl::Span<float> output) {
  float* out = output.data();
  size_t done = 0;  // out[0, done) is written
  absl::Status s = ForEachCarriedBlock(
      encoded, output.size(), [&](uint32_t, size_t start, size_t len, const uint8_t* values) {
        std::memset(out + done, 0, 4 * (start - done));
        std::memcpy(out + start, values, 4 * len);
        done = start + len;
      });
  // Not for an empty tensor: its output's data() may be null, which memset must not see even
  // for 0 bytes (UBSan, codec_fuzzer: regress-blocksparse-empty-tensor).
  if (s.ok() && done < output.size()) std::memset(out + done, 0, 4 * (output.size() - done));
  return s;
}

absl::Status BlocksparseCodec::DecodeAdd(absl::Span<const uint8_t> encoded, const CodecContext&,
                                         absl::Span<float> accumulator) {
  return ForEachCarriedBlock(encoded, accumulator.size(),
                             [&](uint32_t, size_t start, size_t len, const uint8_t* values) {
                               float* acc = accumulator.data() + start;
                               for (size_t i = 0; i < len; ++i) acc[i] += GetF32(values + 4 * i);
                             });
}

void RegisterBlocksparseCodec(CodecRegistry& registry) {
  MustRegister(
      registry,
      {.name = "blocksparse",
       .summary = "the blocks holding a magnitude above the threshold, with their positions "
                  "(OmniReduce); summed block-sparse, pulled as the block-sparse sum",
       .params = {param_specs::IntParam("block", 256, "elements per block, in [1, 2^24]", 1,
                                        16777216),
                  param_specs::DoubleParam("threshold", "0",
                                           "a block travels when some magnitude exceeds it "
                                           "(in fp32); 0 drops only all-zero blocks: lossless",
                                           0.0, /*min_exclusive=*/false)},
       .factory = [](const CodecParams& params) -> absl::StatusOr<std::unique_ptr<Codec>> {
         ParamReader r(params);
         const int64_t block = r.Int("block");
         const double threshold = r.Double("threshold");
         if (!r.ok()) return r.status();
         return std::make_unique<BlocksparseCodec>(static_cast<uint32_t>(block), threshold);
       },
       .aggregator_factory =
           [](std::unique_ptr<Codec> codec) -> absl::StatusOr<std::unique_ptr<Aggregator>> {
         auto* blocksparse = dynamic_cast<BlocksparseCodec*>(codec.get());
         if (blocksparse == nullptr) {
           return absl::InvalidArgumentError(absl::StrCat(
               "the block_sparse aggregator needs a blocksparse codec, got '", codec->name(), "'"));
         }
         codec.release();
         return MakeBlockSparseAggregator(std::unique_ptr<BlocksparseCodec>(blocksparse));
       },
       .facts = {.lossless_when = ThresholdIsZero,
                 .exchange = CodecExchange::kBlockSparse,
                 .sparse = true,
                 .gpu_kernel = true,
                 .gpu_memories = {MemoryKind::kResidual}}});
}

}  // namespace bytecomp::compress
