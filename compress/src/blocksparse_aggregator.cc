// The server's block-sparse aggregation of blocksparse pushes (OmniReduce's aggregator): the
// union of the pushes' blocks, kept in increasing block order and merged with each payload as
// it is added (in worker-rank order on the server), each block's values in a slot of its own.
// Memory is one slot per block in the union and work is per carried block (a payload's merge
// walks the union's indices once, and adds only its own blocks' values), never per element of
// the tensor; the sum leaves block-sparse (EncodedSum), the dense form only when asked
// (Finish: a two-way pull codec that must re-encode it).
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "blocksparse_codec.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/format/blocksparse_format.h"

namespace bytecomp::compress {
namespace {

class BlockSparseAggregator final : public Aggregator {
 public:
  explicit BlockSparseAggregator(std::unique_ptr<BlocksparseCodec> codec)
      : codec_(std::move(codec)), block_(codec_->block()) {}

  absl::string_view name() const override { return "block_sparse"; }

  void Reset(size_t n) override {
    n_ = n;
    union_.clear();
    slots_.clear();
    count_ = 0;
    started_ = true;
    summed_ = false;
  }

  size_t count() const override { return count_; }

  absl::Status Add(absl::Span<const uint8_t> encoded, const CodecContext& ctx) override {
    if (!started_) return absl::FailedPreconditionError("Aggregator::Add before Reset");
    if (count_ > 0) {
      if (auto s = CheckSameRound(first_, ctx); !s.ok()) return s;
    }
    // The whole payload is checked before the sum changes (ForEachCarriedBlock parses first).
    merged_.clear();
    size_t i = 0;
    absl::Status s = codec_->ForEachCarriedBlock(
        encoded, n_, [&](uint32_t b, size_t, size_t len, const uint8_t* values) {
          while (i < union_.size() && union_[i].block < b) merged_.push_back(union_[i++]);
          if (i < union_.size() && union_[i].block == b) {
            float* sum = Slot(union_[i].slot);
            for (size_t k = 0; k < len; ++k) sum[k] += GetF32(values + 4 * k);
            merged_.push_back(union_[i++]);
            return;
          }
          // A block's first contribution is copied, as the uncompressed path keeps the first
          // push: the sum of one payload is that payload.
          const uint32_t slot = static_cast<uint32_t>(slots_.size() / block_);
          slots_.resize(slots_.size() + block_, 0.0f);
          std::memcpy(Slot(slot), values, 4 * len);
          merged_.push_back({b, slot});
        });
    if (!s.ok()) return s;
    if (count_ == 0) first_ = ctx;
    merged_.insert(merged_.end(), union_.begin() + static_cast<std::ptrdiff_t>(i), union_.end());
    union_.swap(merged_);
    ++count_;
    summed_ = false;
    return absl::OkStatus();
  }

  absl::StatusOr<absl::Span<const uint8_t>> EncodedSum() override {
    if (!started_) return absl::FailedPreconditionError("Aggregator::EncodedSum before Reset");
    Summarize();
    if (!encodable_.ok()) return encodable_;
    return absl::MakeConstSpan(encoded_);
  }

  absl::StatusOr<absl::Span<const float>> Finish() override {
    if (!started_) return absl::FailedPreconditionError("Aggregator::Finish before Reset");
    Summarize();
    // The dense form of exactly what EncodedSum carries (a block that summed to zero is +0).
    dense_.assign(n_, 0.0f);
    for (const Entry& e : kept_) {
      std::memcpy(dense_.data() + size_t{e.block} * block_, Slot(e.slot),
                  4 * blocksparse::BlockLength(n_, block_, e.block));
    }
    return absl::MakeConstSpan(dense_);
  }

 private:
  struct Entry {
    uint32_t block;  // block index in the tensor
    uint32_t slot;   // its values: slots_[slot * block_, (slot + 1) * block_)
  };

  float* Slot(uint32_t slot) { return slots_.data() + size_t{slot} * block_; }

  // The union less the blocks that summed to zero (all +-0: Encode of the dense sum at
  // threshold 0 drops them too), and their message, once per added payload. A sum beyond
  // fp32's range (finite pushes can overflow) has no message, as Encode refuses it: the
  // round then fails with encodable_'s reason instead of answering with values every
  // worker's Decode would refuse.
  void Summarize() {
    if (summed_) return;
    kept_.clear();
    kept_blocks_.clear();
    encodable_ = absl::OkStatus();
    size_t elements = 0;
    for (const Entry& e : union_) {
      const size_t len = blocksparse::BlockLength(n_, block_, e.block);
      const uint32_t max_bits = MaxAbsBits(Slot(e.slot), len);
      if (max_bits == 0) continue;
      if (!IsFiniteBits(max_bits) && encodable_.ok()) {
        const size_t start = size_t{e.block} * block_;
        encodable_ = absl::InvalidArgumentError(
            absl::StrCat("blocksparse: the sum of elements [", start, ", ", start + len,
                         ") is beyond fp32's range (the pushes' values are too large to add)"));
      }
      kept_.push_back(e);
      kept_blocks_.push_back(e.block);
      elements += len;
    }
    const uint32_t m = static_cast<uint32_t>(kept_.size());
    const size_t offset = blocksparse::ValuesOffset(n_, block_, m);
    encoded_.resize(offset + 4 * elements);
    blocksparse::WriteHeaderAndPositions(encoded_.data(), static_cast<uint32_t>(n_), block_,
                                         kept_blocks_.data(), m);
    uint8_t* out = encoded_.data() + offset;
    for (const Entry& e : kept_) {
      const size_t len = blocksparse::BlockLength(n_, block_, e.block);
      std::memcpy(out, Slot(e.slot), 4 * len);
      out += 4 * len;
    }
    summed_ = true;
  }

  std::unique_ptr<BlocksparseCodec> codec_;
  const uint32_t block_;
  size_t n_ = 0;
  CodecContext first_;
  size_t count_ = 0;
  bool started_ = false;
  std::vector<Entry> union_, merged_;  // increasing block order; merged_ is the merge's scratch
  std::vector<float> slots_;           // block_ floats per block of the union
  bool summed_ = false;                // kept_, encoded_ and encodable_ are up to date
  absl::Status encodable_;             // why encoded_ is no valid message (OK: it is)
  std::vector<Entry> kept_;
  std::vector<uint32_t> kept_blocks_;
  std::vector<uint8_t> encoded_;
  std::vector<float> dense_;
};

}  // namespace

std::unique_ptr<Aggregator> MakeBlockSparseAggregator(std::unique_ptr<BlocksparseCodec> codec) {
  return std::make_unique<BlockSparseAggregator>(std::move(codec));
}

}  // namespace bytecomp::compress
