// blocksparse (OmniReduce): the wire format and its size formula, losslessness at threshold 0,
// sizes off the block size, the threshold with error feedback, malformed payloads, parameters,
// and the block-sparse aggregator (its sum, its encoded sum, memory that follows the blocks).
#include <cmath>
#include <cstring>
#include <random>

#include "absl/strings/match.h"
#include "bytecomp/compress/format/blocksparse_format.h"
#include "codec_test_util.h"

namespace bytecomp::compress {
namespace {

using testing::DecodeToVector;
using testing::EncodeToVector;
using testing::MustCreate;
using testing::TestContext;

std::unique_ptr<Codec> Blocksparse(size_t block = 256, double threshold = 0) {
  return MustCreate("blocksparse",
                    {{"block", std::to_string(block)}, {"threshold", std::to_string(threshold)}});
}

// n values, block by block: a block is all zero with probability `zero_fraction`, otherwise
// normally distributed (never exactly zero, never -0).
std::vector<float> SparseBlocks(size_t n, size_t block, double zero_fraction, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> x(n, 0.0f);
  for (size_t start = 0; start < n; start += block) {
    if (u(gen) < zero_fraction) continue;
    for (size_t i = start; i < std::min(n, start + block); ++i) {
      float v = normal(gen);
      x[i] = v == 0.0f ? 1.0f : v;
    }
  }
  return x;
}

// The blocks of x with some |x| > threshold, counted independently of the codec.
std::vector<uint32_t> NonZeroBlocks(const std::vector<float>& x, size_t block,
                                    float threshold = 0.0f) {
  std::vector<uint32_t> blocks;
  for (size_t start = 0; start < x.size(); start += block) {
    bool kept = false;
    for (size_t i = start; i < std::min(x.size(), start + block); ++i) {
      kept = kept || std::fabs(x[i]) > threshold;
    }
    if (kept) blocks.push_back(static_cast<uint32_t>(start / block));
  }
  return blocks;
}

uint32_t U32At(const std::vector<uint8_t>& p, size_t at) {
  uint32_t v;
  std::memcpy(&v, p.data() + at, 4);
  return v;
}
void PutU32At(std::vector<uint8_t>& p, size_t at, uint32_t v) { std::memcpy(p.data() + at, &v, 4); }

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  // (memcmp of an empty vector's data(), which may be null, is undefined.)
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), 4 * a.size()) == 0);
}

TEST(BlocksparseFormatTest, TheSizeFormulaByHand) {
  using namespace blocksparse;
  // n = 1000, block 256: B = 4 blocks, the last of 232 elements; bitmap 4 bytes.
  EXPECT_EQ(BlockCount(1000, 256), 4u);
  EXPECT_EQ(BlockLength(1000, 256, 3), 232u);
  EXPECT_EQ(BitmapBytes(4), 4u);
  EXPECT_EQ(PayloadBytes(1000, 256, 0, false), 16u);
  EXPECT_EQ(PayloadBytes(1000, 256, 1, false), 16u + 4 + 4 * 256);  // tie: the index list
  EXPECT_EQ(PositionsFor(4, 1), kIndexList);
  EXPECT_EQ(PositionsFor(4, 2), kBitmap);
  EXPECT_EQ(PayloadBytes(1000, 256, 2, true), 16u + 4 + 4 * (256 + 232));
  EXPECT_EQ(MaxPayloadBytes(1000, 256), 16u + 4 + 4 * 1000);
  // B = 100: the bitmap takes 16 bytes; up to 4 blocks the index list is no larger.
  EXPECT_EQ(BitmapBytes(100), 16u);
  EXPECT_EQ(PayloadBytes(25600, 256, 3, false), 16u + 12 + 4 * 768);
  EXPECT_EQ(PayloadBytes(25600, 256, 4, false), 16u + 16 + 4 * 1024);
  EXPECT_EQ(PositionsFor(100, 4), kIndexList);
  EXPECT_EQ(PositionsFor(100, 5), kBitmap);
  EXPECT_EQ(PayloadBytes(25600, 256, 5, false), 16u + 16 + 4 * 1280);
  EXPECT_EQ(MaxPayloadBytes(0, 256), 16u);
  // The planner's model: 1% of the blocks of a 4 MiB partition (4096 blocks: 41 of them, in
  // an index list of 164 bytes against a 512-byte bitmap).
  EXPECT_EQ(PayloadBytesAtDensity(1 << 20, 256, 0.01), 16u + 4 * 41 + 4 * 41 * 256);
  EXPECT_EQ(PayloadBytesAtDensity(1 << 20, 256, 0.5), 16u + 512 + 4 * 2048 * 256);
  EXPECT_EQ(PayloadBytesAtDensity(1 << 20, 256, 1.0), MaxPayloadBytes(1 << 20, 256));
  EXPECT_EQ(PayloadBytesAtDensity(1000, 256, 0.0), 16u);
}

TEST(BlocksparseTest, TheMessageIsLaidOutAsDocumented) {
  auto codec = Blocksparse(4);
  // 10 elements, blocks of 4: [0,4) [4,8) [8,10); blocks 0 and 2 carried; B = 3, one bitmap
  // word against two indices: the bitmap.
  const std::vector<float> x = {1, 0, 0, 2, 0, 0, 0, 0, 0, -3};
  auto enc = EncodeToVector(*codec, x, TestContext());
  ASSERT_TRUE(enc.ok()) << enc.status();
  ASSERT_EQ(enc->size(), 16u + 4 + 4 * (4 + 2));
  EXPECT_EQ(U32At(*enc, 0), 10u);
  EXPECT_EQ(U32At(*enc, 4), 4u);
  EXPECT_EQ(U32At(*enc, 8), 2u);
  EXPECT_EQ(U32At(*enc, 12), uint32_t{blocksparse::kBitmap});
  EXPECT_EQ(U32At(*enc, 16), 0b101u);
  const std::vector<float> values = {1, 0, 0, 2, 0, -3};
  EXPECT_EQ(std::memcmp(enc->data() + 20, values.data(), 4 * values.size()), 0);
  // One block of the three: an index list of one.
  auto one =
      EncodeToVector(*codec, std::vector<float>{0, 0, 0, 0, 5, 0, 0, 0, 0, 0}, TestContext());
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 16u + 4 + 16);
  EXPECT_EQ(U32At(*one, 12), uint32_t{blocksparse::kIndexList});
  EXPECT_EQ(U32At(*one, 16), 1u);
}

// Over sizes on and off the block size, densities that pick either positions section, and
// block sizes from 1 up: the size is the formula's, the positions are the smaller section, and
// decoding gives the input back bit for bit.
TEST(BlocksparseTest, EncodedSizeIsTheFormulaAndTheRoundTripIsExact) {
  for (size_t block : {1, 7, 64, 256, 5000}) {
    auto codec = Blocksparse(block);
    for (size_t n : {0, 1, 255, 256, 257, 1000, 4099, 65536 + 3}) {
      for (double zeros : {0.0, 0.5, 0.97, 1.0}) {
        SCOPED_TRACE(absl::StrCat("block ", block, " n ", n, " zero blocks ", zeros));
        const std::vector<float> x = SparseBlocks(n, block, zeros, n * 31 + block);
        const std::vector<uint32_t> kept = NonZeroBlocks(x, block);
        const bool last = !kept.empty() && kept.back() + 1 == blocksparse::BlockCount(n, block);
        auto enc = EncodeToVector(*codec, x, TestContext());
        ASSERT_TRUE(enc.ok()) << enc.status();
        ASSERT_EQ(enc->size(), blocksparse::PayloadBytes(n, block, kept.size(), last));
        EXPECT_LE(enc->size(), codec->MaxEncodedBytes(n));
        EXPECT_EQ(U32At(*enc, 8), kept.size());
        EXPECT_EQ(U32At(*enc, 12), uint32_t{blocksparse::PositionsFor(
                                       blocksparse::BlockCount(n, block), kept.size())});
        auto dec = DecodeToVector(*codec, *enc, TestContext(), n);
        ASSERT_TRUE(dec.ok()) << dec.status();
        EXPECT_TRUE(SameBits(*dec, x));
      }
    }
  }
}

TEST(BlocksparseTest, OnlyAllZeroBlocksAreDroppedAtThresholdZero) {
  auto codec = Blocksparse(4);
  // A block with a single tiny value, or a -0 beside a value, travels whole.
  const std::vector<float> x = {0, 0, 1e-45f, 0, -0.0f, 0, 0, 0, -0.0f, 2, 0, 0};
  auto enc = EncodeToVector(*codec, x, TestContext());
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(U32At(*enc, 8), 2u);  // blocks 0 and 2; block 1 (+-0 only) is dropped
  auto dec = DecodeToVector(*codec, *enc, TestContext(), x.size());
  ASSERT_TRUE(dec.ok());
  EXPECT_EQ(std::signbit((*dec)[8]), true) << "a carried block keeps its bits, -0 too";
  EXPECT_EQ(std::signbit((*dec)[4]), false) << "a dropped block decodes as +0";
  EXPECT_TRUE(codec->properties().lossless);
  EXPECT_TRUE(codec->properties().unbiased);
  EXPECT_TRUE(codec->properties().sum_in_push_format);
  EXPECT_FALSE(codec->properties().summable_encoded);
}

TEST(BlocksparseTest, DecodeAddTouchesOnlyTheCarriedBlocks) {
  auto codec = Blocksparse(8);
  std::vector<float> x(37, 0.0f);
  x[9] = 1.5f;    // block 1
  x[36] = -2.0f;  // block 4, the short last one (5 elements)
  auto enc = EncodeToVector(*codec, x, TestContext());
  ASSERT_TRUE(enc.ok());
  std::vector<float> acc(37);
  for (size_t i = 0; i < acc.size(); ++i) acc[i] = static_cast<float>(i);
  ASSERT_TRUE(codec->DecodeAdd(*enc, TestContext(), absl::MakeSpan(acc)).ok());
  for (size_t i = 0; i < acc.size(); ++i) EXPECT_EQ(acc[i], static_cast<float>(i) + x[i]) << i;
}

TEST(BlocksparseTest, AThresholdDropsSmallBlocksAndTheResidualKeepsThem) {
  auto codec = Blocksparse(16, 0.5);
  EXPECT_FALSE(codec->properties().lossless);
  EXPECT_FALSE(codec->properties().unbiased);
  std::vector<float> x(100, 0.0f);
  for (size_t i = 0; i < 16; ++i) x[i] = 0.25f;  // block 0: all below: dropped
  x[20] = 0.5f;                                  // block 1: at the threshold: dropped
  x[40] = 0.5001f;                               // block 2: above: sent whole
  x[41] = 0.01f;
  x[99] = -3.0f;  // block 6 (4 elements): sent
  auto enc = EncodeToVector(*codec, x, TestContext());
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(U32At(*enc, 8), 2u);
  EXPECT_EQ(enc->size(), blocksparse::PayloadBytes(100, 16, 2, true));
  auto dec = DecodeToVector(*codec, *enc, TestContext(), x.size());
  ASSERT_TRUE(dec.ok());
  for (size_t i = 0; i < x.size(); ++i) {
    const bool sent = (i >= 32 && i < 48) || i >= 96;
    EXPECT_EQ((*dec)[i], sent ? x[i] : 0.0f) << i;
  }
  // Error feedback: what a round drops comes back the next; decoded + residual equals input +
  // old residual exactly (a block is either sent as it is or kept whole).
  auto memory = *CreateMemory("residual");
  testing::ExpectErrorFeedbackInvariant(
      *codec, *memory,
      {SparseBlocks(1000, 16, 0.3, 1), SparseBlocks(1000, 16, 0.3, 2),
       SparseBlocks(1000, 16, 0.3, 3), SparseBlocks(1000, 16, 0.3, 4)},
      1.0f, /*tol=*/0.0);
  // A block under the threshold accumulates in the residual until it crosses it.
  memory = *CreateMemory("residual");
  std::vector<float> small(16, 0.2f), compensated, decoded;
  std::vector<uint8_t> out(codec->MaxEncodedBytes(16));
  std::vector<size_t> sent_blocks;
  for (uint64_t round = 0; round < 3; ++round) {
    auto bytes = EncodeWithMemory(*codec, memory.get(), small, TestContext(round),
                                  absl::MakeSpan(out), compensated, decoded);
    ASSERT_TRUE(bytes.ok());
    sent_blocks.push_back(U32At(out, 8));
  }
  EXPECT_EQ(sent_blocks, (std::vector<size_t>{0, 0, 1}));  // 0.2, 0.4, then 0.6 > 0.5
  EXPECT_FLOAT_EQ(decoded[0], 0.2f + 0.2f + 0.2f);
}

// Each malformed payload is an InvalidArgument naming what is wrong.
constexpr size_t kMalformedN = 30;  // B = 8 blocks of 4, the last of 2; a one-word bitmap

TEST(BlocksparseTest, MalformedPayloadsAreRejectedWithTheReason) {
  auto codec = Blocksparse(4);
  const size_t n = kMalformedN;
  std::vector<float> x(n, 0.0f);
  x[1] = 1;   // block 0
  x[29] = 2;  // block 7 (short)
  auto bitmapped = *EncodeToVector(*codec, x, TestContext());
  ASSERT_EQ(U32At(bitmapped, 12), uint32_t{blocksparse::kBitmap});  // 4 bytes < 2 indices
  std::vector<float> many(n, 0.0f);
  auto sparse_codec = Blocksparse(1);  // B = 30: one bitmap word; one index is smaller
  many[5] = 1;
  auto indexed = *EncodeToVector(*sparse_codec, many, TestContext());
  ASSERT_EQ(U32At(indexed, 12), uint32_t{blocksparse::kIndexList});

  auto rejected = [&](Codec& c, const std::vector<uint8_t>& bytes, const std::string& why,
                      size_t length = kMalformedN) {
    std::vector<float> out(length);
    absl::Status s = c.Decode(bytes, TestContext(), absl::MakeSpan(out));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << why;
    EXPECT_TRUE(absl::StrContains(s.message(), why)) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "codec 'blocksparse': malformed payload")) << s;
  };
  rejected(*codec, {1, 2, 3}, "shorter than the header");
  rejected(*codec, bitmapped, "message holds 30 elements, expected 31", n + 1);
  auto bad = bitmapped;
  PutU32At(bad, 4, 8);
  rejected(*codec, bad, "block size 8, expected 4");
  bad = bitmapped;
  PutU32At(bad, 8, 9);
  rejected(*codec, bad, "9 blocks carried, the tensor has 8");
  bad = bitmapped;
  PutU32At(bad, 12, 2);
  rejected(*codec, bad, "positions 2");
  bad = indexed;  // a tie: the index list it must be
  PutU32At(bad, 12, blocksparse::kBitmap);
  rejected(*sparse_codec, bad,
           "positions as a bitmap for 1 of 30 blocks, where the index list is no larger");
  bad = bitmapped;
  bad.pop_back();
  rejected(*codec, bad, "bytes for 2 blocks (expected");
  bad = bitmapped;
  bad.push_back(0);
  rejected(*codec, bad, "bytes for 2 blocks (expected");
  bad = bitmapped;
  PutU32At(bad, 16, 0b10000001u | (1u << 8));  // a bit beyond block 7
  rejected(*codec, bad, "bitmap bits from block 8 on are not zero");
  bad = bitmapped;
  PutU32At(bad, 16, 0b10000011u);  // three bits for m = 2
  rejected(*codec, bad, "bitmap marks 3 blocks, the header says 2");
  bad = bitmapped;
  PutU32At(bad, 16, 0b00000011u);  // blocks 0 and 1: the size was for a short last block
  rejected(*codec, bad, "bytes, expected");
  bad = indexed;
  PutU32At(bad, 16, 30);
  rejected(*sparse_codec, bad, "index 30 >= 30");
  // Two indices, not increasing: an index list of 2 against a 4-byte bitmap would be the
  // bitmap, so use a longer tensor where the list is the smaller.
  auto long_codec = Blocksparse(1);
  std::vector<float> y(1000, 0.0f);
  y[3] = 1;
  y[700] = 2;
  auto two = *EncodeToVector(*long_codec, y, TestContext());
  ASSERT_EQ(U32At(two, 12), uint32_t{blocksparse::kIndexList});
  bad = two;
  PutU32At(bad, 20, 3);
  rejected(*long_codec, bad, "indices not strictly increasing below 3", 1000);
  bad = two;
  PutU32At(bad, 16, 701);
  rejected(*long_codec, bad, "indices not strictly increasing below 700", 1000);
  bad = bitmapped;
  const float nan = std::nanf("");
  std::memcpy(bad.data() + 20 + 4, &nan, 4);
  rejected(*codec, bad, "values hold NaN or Inf");
}

// A hostile m cannot make the decoder allocate or walk more than the payload holds.
TEST(BlocksparseTest, AHugeClaimedCountIsRefusedBeforeAnyWork) {
  auto codec = Blocksparse(1);
  std::vector<uint8_t> bytes(16, 0);
  PutU32At(bytes, 0, 0xffffffffu);
  PutU32At(bytes, 4, 1);
  PutU32At(bytes, 8, 0xfffffff0u);
  PutU32At(bytes, 12, blocksparse::kBitmap);
  blocksparse::Header h;
  const FormatError e = blocksparse::CheckHeader(bytes.data(), bytes.size(), 0xffffffffu, 1, &h);
  EXPECT_EQ(e.code, FormatErrorCode::kBlockSparseSize);
}

TEST(BlocksparseTest, BadParametersAreRefusedNamingThem) {
  for (const auto& [params, why] : std::vector<std::pair<CodecParams, std::string>>{
           {{{"block", "0"}}, "parameter 'block' = 0 is out of range"},
           {{{"block", "-4"}}, "parameter 'block' = -4 is out of range"},
           {{{"block", "16777217"}}, "parameter 'block' = 16777217 is out of range"},
           {{{"block", "2.5"}}, "parameter 'block' = '2.5' is not an integer"},
           {{{"threshold", "-0.1"}}, "parameter 'threshold' = -0.1 is out of range"},
           {{{"threshold", "nan"}}, "parameter 'threshold' = 'nan' is not a finite number"},
           {{{"ratio", "0.1"}}, "unknown parameter 'ratio'"}}) {
    auto codec = CreateCodec("blocksparse", params);
    ASSERT_FALSE(codec.ok()) << why;
    EXPECT_EQ(codec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(codec.status().message(), why)) << codec.status();
  }
  EXPECT_TRUE(CreateCodec("blocksparse", {{"block", "16777216"}, {"threshold", "1e30"}}).ok());
}

// ---- the aggregator

struct SparsePushes {
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<float> rank_order_sum;  // the decoded payloads summed in rank order
};

SparsePushes MakeSparsePushes(Codec& codec, size_t n, size_t block, int workers, uint64_t seed) {
  SparsePushes p;
  std::vector<std::vector<float>> decoded;
  for (int w = 0; w < workers; ++w) {
    const std::vector<float> x = SparseBlocks(n, block, 0.8, seed * 10 + w);
    p.payloads.push_back(*EncodeToVector(codec, x, TestContext(1, w)));
    decoded.push_back(*DecodeToVector(codec, p.payloads.back(), TestContext(1, w), n));
  }
  p.rank_order_sum = decoded[0];
  for (int w = 1; w < workers; ++w) {
    for (size_t i = 0; i < n; ++i) p.rank_order_sum[i] += decoded[w][i];
  }
  return p;
}

TEST(BlockSparseAggregatorTest, SumsInRankOrderAndEncodesWhatEncodeWould) {
  auto agg = CreateAggregator("blocksparse", {{"block", "64"}});
  ASSERT_TRUE(agg.ok());
  EXPECT_EQ((*agg)->name(), "block_sparse");
  auto codec = Blocksparse(64);
  for (uint64_t round : {1, 2, 3}) {
    const size_t n = 10000 + 17 * round;  // the last block short
    const SparsePushes p = MakeSparsePushes(*codec, n, 64, 4, round);
    (*agg)->Reset(n);
    for (int w = 0; w < 4; ++w) ASSERT_TRUE((*agg)->Add(p.payloads[w], TestContext(1, w)).ok());
    EXPECT_EQ((*agg)->count(), 4u);
    auto encoded = (*agg)->EncodedSum();
    ASSERT_TRUE(encoded.ok()) << encoded.status();
    auto sum = (*agg)->Finish();
    ASSERT_TRUE(sum.ok());
    const std::vector<float> dense(sum->begin(), sum->end());
    EXPECT_TRUE(SameBits(dense, p.rank_order_sum)) << "round " << round;
    // The encoded sum is the message Encode writes for the dense sum, byte for byte.
    auto direct = EncodeToVector(*codec, dense, TestContext());
    ASSERT_TRUE(direct.ok());
    ASSERT_EQ(encoded->size(), direct->size());
    EXPECT_EQ(std::memcmp(encoded->data(), direct->data(), direct->size()), 0);
  }
}

TEST(BlockSparseAggregatorTest, BlocksThatSumToZeroAreLeftOut) {
  auto agg = *CreateAggregator("blocksparse", {{"block", "2"}});
  auto codec = Blocksparse(2);
  agg->Reset(6);
  ASSERT_TRUE(
      agg->Add(*EncodeToVector(*codec, std::vector<float>{1, 2, 0, 0, 5, 0}, TestContext(1, 0)),
               TestContext(1, 0))
          .ok());
  ASSERT_TRUE(
      agg->Add(*EncodeToVector(*codec, std::vector<float>{-1, -2, 0, 3, 0, 0}, TestContext(1, 1)),
               TestContext(1, 1))
          .ok());
  auto encoded = agg->EncodedSum();
  ASSERT_TRUE(encoded.ok());
  std::vector<uint8_t> bytes(encoded->begin(), encoded->end());
  EXPECT_EQ(U32At(bytes, 8), 2u);  // blocks 1 and 2; block 0 summed to zero
  auto dec = DecodeToVector(*codec, bytes, TestContext(), 6);
  ASSERT_TRUE(dec.ok());
  EXPECT_EQ(*dec, (std::vector<float>{0, 0, 0, 3, 5, 0}));
  EXPECT_FALSE(std::signbit((*agg->Finish())[0]));
}

TEST(BlockSparseAggregatorTest, ABadPayloadChangesNothing) {
  auto agg = *CreateAggregator("blocksparse", {{"block", "4"}});
  auto codec = Blocksparse(4);
  agg->Reset(8);
  const auto good =
      *EncodeToVector(*codec, std::vector<float>{1, 1, 1, 1, 0, 0, 0, 0}, TestContext(1, 0));
  ASSERT_TRUE(agg->Add(good, TestContext(1, 0)).ok());
  auto bad = *EncodeToVector(*codec, std::vector<float>{0, 0, 0, 0, 2, 2, 2, 2}, TestContext(1, 1));
  const float inf = INFINITY;
  std::memcpy(bad.data() + bad.size() - 4, &inf, 4);
  EXPECT_EQ(agg->Add(bad, TestContext(1, 1)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(agg->Add(good, TestContext(2, 1)).code(), absl::StatusCode::kInvalidArgument)
      << "another round's payload";
  EXPECT_EQ(agg->count(), 1u);
  EXPECT_EQ(*DecodeToVector(
                *codec, std::vector<uint8_t>(agg->EncodedSum()->begin(), agg->EncodedSum()->end()),
                TestContext(), 8),
            (std::vector<float>{1, 1, 1, 1, 0, 0, 0, 0}));
  EXPECT_EQ(CreateAggregator("blocksparse").value()->EncodedSum().status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CreateAggregator("topk").value()->EncodedSum().status().code(),
            absl::StatusCode::kUnimplemented);
}

// Finite pushes whose sum overflows fp32: no message carries it (Encode and Decode refuse
// non-finite values), so EncodedSum fails naming the elements and the server fails the round
// with that reason; the dense sum holds the infinity, as the other aggregators' do (aggregator
// fuzzer: regress-blocksparse-sum-overflow).
TEST(BlockSparseAggregatorTest, ASumBeyondFp32sRangeIsRefusedNamingTheElements) {
  auto agg = *CreateAggregator("blocksparse", {{"block", "4"}});
  auto codec = Blocksparse(4);
  const std::vector<float> big{0, 0, 0, 0, 0, 3e38f, 0, 0};
  agg->Reset(8);
  ASSERT_TRUE(agg->Add(*EncodeToVector(*codec, big, TestContext(1, 0)), TestContext(1, 0)).ok());
  ASSERT_TRUE(agg->EncodedSum().ok()) << "one push: its own values";
  ASSERT_TRUE(agg->Add(*EncodeToVector(*codec, big, TestContext(1, 1)), TestContext(1, 1)).ok());
  const absl::Status overflow = agg->EncodedSum().status();
  EXPECT_EQ(overflow.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      absl::StrContains(overflow.message(), "the sum of elements [4, 8) is beyond fp32's range"))
      << overflow;
  EXPECT_TRUE(std::isinf((*agg->Finish())[5]));
  agg->Reset(8);  // the next round starts clean
  ASSERT_TRUE(agg->Add(*EncodeToVector(*codec, big, TestContext(2, 0)), TestContext(2, 0)).ok());
  EXPECT_TRUE(agg->EncodedSum().ok());
}

// A partition of 4e9 elements (16 GB as fp32) with a handful of non-zero blocks: the
// aggregator's memory and work follow the blocks, so this runs in a blink; one that kept a
// dense sum would need 16 GB.
TEST(BlockSparseAggregatorTest, MemoryAndWorkFollowTheNonZeroBlocks) {
  const size_t n = 4000000000u, block = 256;
  auto agg = *CreateAggregator("blocksparse");
  agg->Reset(n);
  const size_t blocks = blocksparse::BlockCount(n, block);
  std::vector<std::vector<uint32_t>> carried = {{0, 7, 1000000}, {7, 15624999}, {3}, {}};
  ASSERT_EQ(blocks, 15625000u);
  for (size_t w = 0; w < carried.size(); ++w) {
    const size_t m = carried[w].size();
    const bool last = m > 0 && carried[w].back() + 1 == blocks;
    std::vector<uint8_t> payload(blocksparse::PayloadBytes(n, block, m, last));
    const size_t offset =
        blocksparse::WriteHeaderAndPositions(payload.data(), static_cast<uint32_t>(n), block,
                                             carried[w].data(), static_cast<uint32_t>(m));
    for (size_t i = offset; i < payload.size(); i += 4) {
      const float one = 1.0f + static_cast<float>(w);
      std::memcpy(payload.data() + i, &one, 4);
    }
    ASSERT_TRUE(agg->Add(payload, TestContext(1, static_cast<uint32_t>(w))).ok()) << w;
  }
  auto encoded = agg->EncodedSum();
  ASSERT_TRUE(encoded.ok());
  // Blocks 0, 3, 7, 1000000 and the last: five blocks in an index list.
  EXPECT_EQ(encoded->size(), blocksparse::PayloadBytes(n, block, 5, true));
  std::vector<uint8_t> bytes(encoded->begin(), encoded->end());
  EXPECT_EQ(U32At(bytes, 12), uint32_t{blocksparse::kIndexList});
  const std::vector<uint32_t> want = {0, 3, 7, 1000000, 15624999};
  for (size_t j = 0; j < want.size(); ++j) EXPECT_EQ(U32At(bytes, 16 + 4 * j), want[j]);
  float block7;
  std::memcpy(&block7, bytes.data() + 16 + 20 + 2 * 256 * 4, 4);  // third block: 7
  EXPECT_EQ(block7, 1.0f + 2.0f);
}

}  // namespace
}  // namespace bytecomp::compress
