// The arithmetic of compress/cuda/src/sparse_more_kernels.cu without a GPU: threshold's
// selection and adaq's sample, thresholds, flags, means and two index sections, run on the host
// with the format headers' functions in the order the kernels call them, against the CPU
// codecs: the same bytes, the same decoded values, the fused residual over rounds, the same
// errors for malformed messages.
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bytecomp/compress.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/format/adaq_format.h"
#include "bytecomp/compress/format/blocksparse_format.h"
#include "bytecomp/compress/format/dgc_threshold.h"
#include "bytecomp/compress/format/sparse_format.h"
#include "bytecomp/compress/memory_math.h"
#include "gtest/gtest.h"
#include "shared_math_sparse_util.h"
#include "shared_math_util.h"

namespace bytecomp::compress {
namespace {

using namespace shared_math;

// Inputs of the selection's edge cases besides random gradients: all zeros, none zero (every
// element above a threshold of 0 is kept), every magnitude a quarter (ties at 0.25).
std::vector<std::vector<float>> Inputs(size_t n, uint32_t seed) {
  std::vector<std::vector<float>> inputs = {RandomGradient(n, seed),
                                            RandomGradient(n, seed + 1, /*with_ties=*/true),
                                            std::vector<float>(n, 0.0f)};
  std::vector<float> none_zero = RandomGradient(n, seed + 2);
  for (float& v : none_zero) v = v == 0.0f ? 0.5f : v;
  inputs.push_back(none_zero);
  return inputs;
}

// ---- threshold

// ThresholdCudaCodec: the header alone when the reduction's largest |x| is below the kept
// range, else the flags of sparse_message.cu's FlagAtLeastKernel.
std::vector<uint8_t> HostThresholdMessage(const std::vector<float>& x, double threshold) {
  const uint32_t from = sparse::ThresholdKeptFromBits(threshold);
  if (MaxAbsBitsOf(x) < from) {
    std::vector<uint8_t> out(sparse::kHeaderBytes);
    sparse::WriteHeader(out.data(), static_cast<uint32_t>(x.size()), 0, sparse::IndexPlan());
    return out;
  }
  std::vector<bool> keep(x.size());
  for (size_t i = 0; i < x.size(); ++i) keep[i] = (FloatBits(x[i]) & 0x7fffffffu) >= from;
  return HostSparseMessage(x, keep);
}

// ---- adaq

struct HostAdaq {
  std::vector<uint8_t> message;
  std::vector<float> decoded;  // what the residual is updated from
};

// AdaqCudaCodec's encode: the sample gathered as bit patterns and split on the host, the
// thresholds, the flags pass with its sums in the GPU's order, each sign's indices and
// section, the header.
HostAdaq HostAdaqEncode(const std::vector<float>& x, double ratio, const CodecContext& ctx) {
  const size_t n = x.size();
  uint32_t pos_t = adaq::kKeepNone, neg_t = adaq::kKeepNone;
  if (n > 0) {
    std::vector<uint32_t> sample;
    dgc::ForEachSamplePosition(n, NodeSeed(ctx, adaq::kAdaqSalt),
                               [&](size_t, size_t i) { sample.push_back(FloatBits(x[i])); });
    std::vector<uint32_t> pos_sample, neg_sample;
    for (uint32_t bits : sample) adaq::AddSampled(BitsToFloat(bits), pos_sample, neg_sample);
    pos_t = adaq::SignThreshold(pos_sample, ratio);
    neg_t = adaq::SignThreshold(neg_sample, ratio);
  }
  const adaq::BitRange pos_range = adaq::PositiveRange(pos_t);
  const adaq::BitRange neg_range = adaq::NegativeRange(neg_t);
  auto kept_pos = [&](float v) { return adaq::InRange(FloatBits(v), pos_range); };
  auto kept_neg = [&](float v) { return adaq::InRange(FloatBits(v), neg_range); };
  auto same = [](double d) { return d; };
  std::vector<uint32_t> pos, neg;
  for (size_t i = 0; i < n; ++i) {
    if (kept_pos(x[i])) pos.push_back(static_cast<uint32_t>(i));
    if (kept_neg(x[i])) neg.push_back(static_cast<uint32_t>(i));
  }
  adaq::Header h;
  h.n = static_cast<uint32_t>(n);
  h.k_pos = static_cast<uint32_t>(pos.size());
  h.k_neg = static_cast<uint32_t>(neg.size());
  h.mean_pos = adaq::Mean(GpuOrderSumOf(x, kept_pos, same), pos.size());
  h.mean_neg = adaq::Mean(GpuOrderSumOf(x, kept_neg, same), neg.size());
  const std::vector<uint8_t> pos_section = HostIndexSection(pos, &h.pos);
  const std::vector<uint8_t> neg_section = HostIndexSection(neg, &h.neg);
  HostAdaq r;
  r.message.resize(adaq::kHeaderBytes);
  adaq::WriteHeader(r.message.data(), h);
  r.message.insert(r.message.end(), pos_section.begin(), pos_section.end());
  r.message.insert(r.message.end(), neg_section.begin(), neg_section.end());
  r.decoded.assign(n, 0.0f);
  for (uint32_t i : pos) r.decoded[i] = h.mean_pos;
  for (uint32_t i : neg) r.decoded[i] = h.mean_neg;
  return r;
}

// AdaqCudaCodec::Decode: the header checked on the host, each section read by the parallel
// reader, the disjointness by a lookup per negative index (the merge where one is shared), the
// means scattered.
absl::StatusOr<std::vector<float>> HostAdaqDecode(const std::vector<uint8_t>& m, size_t n) {
  FormatError e = adaq::CheckHeader(m.data(), m.size(), n);
  if (!e.ok()) return FormatErrorStatus("adaq", e);
  const adaq::Header h = adaq::ReadHeader(m.data());
  std::vector<uint32_t> pos(h.k_pos), neg(h.k_neg);
  const uint8_t* section = m.data() + adaq::kHeaderBytes;
  e = HostReadIndexSection(section, h.pos.bytes, h.k_pos, n, h.pos.encoding, h.pos.width,
                           pos.data());
  if (e.ok()) {
    e = HostReadIndexSection(section + h.pos.bytes, h.neg.bytes, h.k_neg, n, h.neg.encoding,
                             h.neg.width, neg.data());
  }
  // AdaqSharedIndexKernel, then AdaqDisjointKernel where it found a shared index.
  const bool shared = std::any_of(neg.begin(), neg.end(), [&pos](uint32_t i) {
    return std::binary_search(pos.begin(), pos.end(), i);
  });
  if (e.ok() && shared) e = adaq::CheckDisjoint(pos.data(), pos.size(), neg.data(), neg.size());
  if (!e.ok()) return FormatErrorStatus("adaq", e);
  std::vector<float> out(n, 0.0f);
  for (uint32_t i : pos) out[i] = h.mean_pos;
  for (uint32_t i : neg) out[i] = h.mean_neg;
  return out;
}

// ---- blocksparse

// BlocksparseCudaCodec's encode: no block when the reduction's largest |x| is below the
// threshold, else a flag per block that any of its elements may set, the flags' exclusive sums
// (rank); the header; the positions by each block's thread (an entry, or a bit ORed into its
// word); the values by each element's thread.
std::vector<uint8_t> HostBlocksparseEncode(const std::vector<float>& x, uint32_t block,
                                           double threshold) {
  const size_t n = x.size(), blocks = blocksparse::BlockCount(n, block);
  const uint32_t from = sparse::ThresholdKeptFromBits(threshold);
  std::vector<uint32_t> flags(blocks, 0u), rank(blocks, 0u);
  uint32_t m = 0;
  bool last_carried = false;
  if (blocks > 0 && blocksparse::Carries(MaxAbsBitsOf(x), from)) {
    for (size_t i = 0; i < n; ++i) {
      if (blocksparse::Carries(FloatBits(x[i]) & 0x7fffffffu, from)) flags[i / block] = 1u;
    }
    for (size_t b = 1; b < blocks; ++b) rank[b] = rank[b - 1] + flags[b - 1];
    m = rank[blocks - 1] + flags[blocks - 1];
    last_carried = flags[blocks - 1] != 0;
  }
  std::vector<uint8_t> out(blocksparse::PayloadBytes(n, block, m, last_carried));
  blocksparse::WriteHeader(out.data(), static_cast<uint32_t>(n), block, m);
  if (m == 0) return out;
  uint8_t* section = out.data() + blocksparse::kHeaderBytes;
  const bool bitmap = blocksparse::PositionsFor(blocks, m) == blocksparse::kBitmap;
  for (size_t b = 0; b < blocks; ++b) {
    if (!flags[b]) continue;
    const auto index = static_cast<uint32_t>(b);
    if (bitmap) {
      uint8_t* word = section + 4 * blocksparse::BitmapWord(index);
      PutU32(word, GetU32(word) | blocksparse::BitmapBit(index));
    } else {
      blocksparse::WriteListedPosition(section, rank[b], index);
    }
  }
  uint8_t* values = out.data() + blocksparse::ValuesOffset(n, block, m);
  for (size_t i = 0; i < n; ++i) {
    const size_t b = i / block;
    if (flags[b])
      PutF32(values + 4 * blocksparse::CarriedValueIndex(rank[b], block, i - b * block), x[i]);
  }
  return out;
}

// BlocksparseCudaCodec::Decode: the header checked on the host, the positions read by one
// thread, the values checked and scattered by a thread each.
absl::StatusOr<std::vector<float>> HostBlocksparseDecode(const std::vector<uint8_t>& p, size_t n,
                                                         uint32_t block) {
  blocksparse::Header h;
  FormatError e = blocksparse::CheckHeader(p.data(), p.size(), n, block, &h);
  if (!e.ok()) return FormatErrorStatus("blocksparse", e);
  std::vector<uint32_t> carried(h.m);
  e = blocksparse::ReadPositions(p.data(), p.size(), h, carried.data());
  const size_t offset = blocksparse::ValuesOffset(n, block, h.m);
  const size_t count = (p.size() - offset) / 4;
  for (size_t v = 0; v < count && e.ok(); ++v) {
    if (!sparse::ValuesFinite(p.data() + offset + 4 * v, 1)) {
      e = MakeFormatError(FormatErrorCode::kValuesNotFinite);
    }
  }
  if (!e.ok()) return FormatErrorStatus("blocksparse", e);
  std::vector<float> out(n, 0.0f);
  for (size_t v = 0; v < count; ++v) {
    out[blocksparse::ElementOfValue(v, block, carried.data())] = GetF32(p.data() + offset + 4 * v);
  }
  return out;
}

// Block-sparse gradients: every block but about one in `keep_one_in` (by a hash of its index)
// zeroed, so that both positions sections (an index list for few blocks) occur.
std::vector<float> BlockSparseGradient(size_t n, uint32_t block, uint32_t keep_one_in,
                                       uint32_t seed) {
  std::vector<float> x = RandomGradient(n, seed);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t b = i / block;
    if ((b * 2654435761u + seed) % keep_one_in != 0) x[i] = 0.0f;
  }
  return x;
}

class SharedMathSparseMore : public ::testing::TestWithParam<size_t> {};

TEST_P(SharedMathSparseMore, ThresholdMessageAsTheCpuCodec) {
  const size_t n = GetParam();
  for (const std::vector<float>& x : Inputs(n, 31)) {
    // 0.25: ties with the quartered input; 1e9: nothing kept; 0: every non-zero kept.
    for (const char* threshold : {"0", "0.01", "0.25", "1e9"}) {
      auto codec = Make("threshold", {{"threshold", threshold}});
      const std::vector<uint8_t> cpu = CpuEncode(*codec, x, Context());
      ASSERT_EQ(HostThresholdMessage(x, std::stod(threshold)), cpu) << "threshold " << threshold;
      auto decoded = HostSparseDecode("threshold", cpu, n, -1);
      ASSERT_TRUE(decoded.ok()) << decoded.status();
      ExpectSameBits(*decoded, CpuDecode(*codec, cpu, n, Context()));
    }
  }
}

TEST_P(SharedMathSparseMore, AdaqMessageAsTheCpuCodec) {
  const size_t n = GetParam();
  for (const std::vector<float>& x : Inputs(n, 41)) {
    for (const char* ratio : {"0.001", "0.01", "0.3", "1"}) {
      auto codec = Make("adaq", {{"ratio", ratio}});
      const std::vector<uint8_t> cpu = CpuEncode(*codec, x, Context());
      const HostAdaq host = HostAdaqEncode(x, std::stod(ratio), Context());
      ASSERT_EQ(host.message, cpu) << "ratio " << ratio;
      auto decoded = HostAdaqDecode(cpu, n);
      ASSERT_TRUE(decoded.ok()) << decoded.status();
      const std::vector<float> cpu_decoded = CpuDecode(*codec, cpu, n, Context());
      ExpectSameBits(*decoded, cpu_decoded);
      ExpectSameBits(host.decoded, cpu_decoded);
    }
  }
}

TEST_P(SharedMathSparseMore, BlocksparseMessageAsTheCpuCodec) {
  const size_t n = GetParam();
  for (uint32_t block : {1u, 7u, 256u}) {
    std::vector<std::vector<float>> inputs = Inputs(n, 61);
    inputs.push_back(BlockSparseGradient(n, block, 40, 62));  // m <= B / 32: an index list
    inputs.push_back(BlockSparseGradient(n, block, 3, 63));
    for (const std::vector<float>& x : inputs) {
      for (const char* threshold : {"0", "0.25", "1e9"}) {
        const std::string block_text = std::to_string(block);
        auto codec = Make("blocksparse", {{"block", block_text}, {"threshold", threshold}});
        const std::vector<uint8_t> cpu = CpuEncode(*codec, x, Context());
        ASSERT_EQ(HostBlocksparseEncode(x, block, std::stod(threshold)), cpu)
            << "block " << block << ", threshold " << threshold;
        auto decoded = HostBlocksparseDecode(cpu, n, block);
        ASSERT_TRUE(decoded.ok()) << decoded.status();
        ExpectSameBits(*decoded, CpuDecode(*codec, cpu, n, Context()));
      }
    }
  }
}

// The residual fused into both encodes over rounds: kept elements keep their error against
// what decoding gives them (the value itself; adaq: its sign's mean), the others all of it.
TEST_P(SharedMathSparseMore, FusedResidualMatchesEncodeWithMemory) {
  const size_t n = GetParam();
  for (const std::string name : {"threshold", "adaq", "blocksparse"}) {
    const bool adaq_codec = name == "adaq";
    auto codec = adaq_codec ? Make(name, {{"ratio", "0.05"}}) : Make(name, {{"threshold", "0.3"}});
    auto memory = CreateMemory("residual");
    ASSERT_TRUE(memory.ok()) << memory.status();
    std::vector<float> residual(n, 0.0f), compensated(n), cpu_compensated, cpu_decoded;
    for (uint32_t round = 0; round < 4; ++round) {
      const std::vector<float> g = RandomGradient(n, 300 + round, /*with_ties=*/round == 2);
      const CodecContext ctx = Context(round);
      for (size_t i = 0; i < n; ++i) {
        compensated[i] = residual[i] = ResidualCompensate(g[i], residual[i], 1.0f, 1.0f);
      }
      std::vector<uint8_t> host;
      if (adaq_codec) {
        const HostAdaq r = HostAdaqEncode(compensated, 0.05, ctx);
        host = r.message;
        for (size_t i = 0; i < n; ++i) {
          if (r.decoded[i] != 0.0f) residual[i] = ResidualUpdate(compensated[i], r.decoded[i]);
        }
      } else if (name == "threshold") {
        host = HostThresholdMessage(compensated, 0.3);
        const uint32_t from = sparse::ThresholdKeptFromBits(0.3);
        for (size_t i = 0; i < n; ++i) {
          if ((FloatBits(compensated[i]) & 0x7fffffffu) >= from) {
            residual[i] = ResidualUpdate(compensated[i], compensated[i]);
          }
        }
      } else {  // blocksparse's default block, 256: the elements of carried blocks are sent
        host = HostBlocksparseEncode(compensated, 256, 0.3);
        const auto decoded = HostBlocksparseDecode(host, n, 256);
        ASSERT_TRUE(decoded.ok()) << decoded.status();
        // The kernel updates the sent elements (to c - c); the others keep c, which is
        // c - 0 to the bit.
        for (size_t i = 0; i < n; ++i) residual[i] = ResidualUpdate(compensated[i], (*decoded)[i]);
      }
      ASSERT_EQ(host, CpuEncodeWithMemory(*codec, **memory, g, ctx, cpu_compensated, cpu_decoded))
          << name << ", round " << round;
    }
    // The residual the CPU memory holds after the last round is the fused one: a round of
    // zeros compensates to it.
    std::vector<float> last_compensated;
    CpuEncodeWithMemory(*codec, **memory, std::vector<float>(n, 0.0f), Context(9), last_compensated,
                        cpu_decoded);
    for (size_t i = 0; i < n; ++i) compensated[i] = ResidualCompensate(0.0f, residual[i], 1, 1);
    ExpectSameBits(last_compensated, compensated);
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, SharedMathSparseMore, ::testing::Values(37, 1000, 4096, 100003));

// A malformed adaq message: the GPU decoder's checks report what the CPU decoder reports.
TEST(SharedMathSparseMoreDecode, MalformedAdaqMessagesAreReportedAsTheCpuCodecReportsThem) {
  const size_t n = 5000;
  auto codec = Make("adaq", {{"ratio", "0.01"}});
  const std::vector<uint8_t> good = CpuEncode(*codec, RandomGradient(n, 51), Context());
  const adaq::Header h = adaq::ReadHeader(good.data());
  ASSERT_GT(h.k_pos, 2u);
  ASSERT_GT(h.k_neg, 2u);
  ASSERT_NE(h.pos.encoding, sparse::kRaw);  // "positive indices claimed raw" below
  // A message whose sections are raw, built by hand: positive {3, 7}, negative {7, 9}.
  auto raw_message = [&](std::vector<uint32_t> pos, std::vector<uint32_t> neg) {
    adaq::Header r;
    r.n = static_cast<uint32_t>(n);
    r.k_pos = static_cast<uint32_t>(pos.size());
    r.k_neg = static_cast<uint32_t>(neg.size());
    r.pos.bytes = 4 * pos.size();
    r.neg.bytes = 4 * neg.size();
    r.mean_pos = 0.5f;
    r.mean_neg = -0.5f;
    std::vector<uint8_t> m(adaq::kHeaderBytes);
    adaq::WriteHeader(m.data(), r);
    for (uint32_t i : pos) AppendU32(m, i);
    for (uint32_t i : neg) AppendU32(m, i);
    return m;
  };
  const float nan = std::nanf("");
  const std::vector<Malformation> cases = {
      {"shorter than the header", [](auto& m) { m.resize(35); }},
      {"version 2", [](auto& m) { m[0] = 2; }},
      {"another n", [n](auto& m) { PutU32(m.data() + 8, n + 1); }},
      {"k_pos + k_neg above n", [n](auto& m) { PutU32(m.data() + 12, n); }},
      {"a byte too many", [](auto& m) { m.push_back(0); }},
      {"a byte too few", [](auto& m) { m.pop_back(); }},
      {"a NaN mean", [nan](auto& m) { PutF32(m.data() + 28, nan); }},
      {"an infinite mean", [](auto& m) { PutF32(m.data() + 32, INFINITY); }},
      {"positive encoding 3", [](auto& m) { m[1] = 3; }},
      {"negative encoding 3", [](auto& m) { m[3] = 3; }},
      {"negative width 33", [](auto& m) { m[3] = sparse::kBitPack, m[4] = 33; }},
      {"positive indices claimed raw", [](auto& m) { m[1] = sparse::kRaw; }},
      {"a shared index",
       [&](auto& m) {
         m = raw_message({3, 7}, {7, 9});
       }},
      {"negative indices out of order",
       [&](auto& m) {
         m = raw_message({3}, {9, 7});
       }},
      {"a positive index out of range",
       [&](auto& m) {
         m = raw_message({3, 5000}, {});
       }},
  };
  ExpectTheCpuErrors(*codec, good, n, cases,
                     [&](const std::vector<uint8_t>& m) { return HostAdaqDecode(m, n); });
  // Disjoint hand-made sections decode as on the CPU.
  const std::vector<uint8_t> fine = raw_message({3, 8}, {7, 9});
  auto decoded = HostAdaqDecode(fine, n);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ExpectSameBits(*decoded, CpuDecode(*codec, fine, n, Context()));
}

// A malformed blocksparse message, each positions form: the GPU decoder's checks report what
// the CPU decoder reports.
TEST(SharedMathSparseMoreDecode, MalformedBlocksparseMessagesAreReportedAsTheCpuCodecReportsThem) {
  const size_t n = 5000;  // 313 blocks of 16, the last one of 8
  const uint32_t block = 16;
  auto codec = Make("blocksparse", {{"block", "16"}});
  const float nan = std::nanf("");
  const std::vector<Malformation> common = {
      {"shorter than the header", [](auto& m) { m.resize(15); }},
      {"another n", [](auto& m) { PutU32(m.data(), 4999); }},
      {"another block size", [](auto& m) { PutU32(m.data() + 4, 32); }},
      {"more blocks than the tensor has", [](auto& m) { PutU32(m.data() + 8, 1000); }},
      {"positions 2", [](auto& m) { PutU32(m.data() + 12, 2); }},
      {"the other positions section",
       [](auto& m) { PutU32(m.data() + 12, 1 - GetU32(m.data() + 12)); }},
      {"a byte too many", [](auto& m) { m.push_back(0); }},
      {"a byte too few", [](auto& m) { m.pop_back(); }},
      {"a NaN value", [nan](auto& m) { PutF32(m.data() + m.size() - 4, nan); }},
  };
  // An index list (few blocks): entries out of order or out of range; a bitmap (many):
  // padding bits, a count that is not m.
  const std::vector<float> few = BlockSparseGradient(n, block, 40, 71);
  const std::vector<float> many = RandomGradient(n, 72);
  for (const std::vector<float>* x : {&few, &many}) {
    const std::vector<uint8_t> good = CpuEncode(*codec, *x, Context());
    const bool bitmap = GetU32(good.data() + 12) == blocksparse::kBitmap;
    ASSERT_EQ(bitmap, x == &many);
    ASSERT_GE(GetU32(good.data() + 8), 2u);
    std::vector<Malformation> cases = common;
    if (bitmap) {
      const size_t blocks = blocksparse::BlockCount(n, block);
      cases.push_back({"a padding bit", [blocks](auto& m) {
                         uint8_t* last = m.data() + 16 + 4 * ((blocks - 1) / 32);
                         PutU32(last, GetU32(last) | (1u << (blocks % 32)));
                       }});
      cases.push_back({"a block missing from the bitmap", [](auto& m) { m[16] = 0; }});
    } else {
      cases.push_back({"entries out of order", [](auto& m) {
                         const uint32_t a = GetU32(m.data() + 16), b = GetU32(m.data() + 20);
                         PutU32(m.data() + 16, b);
                         PutU32(m.data() + 20, a);
                       }});
      cases.push_back({"an entry out of range", [](auto& m) { PutU32(m.data() + 16, 5000); }});
    }
    ExpectTheCpuErrors(*codec, good, n, cases, [&](const std::vector<uint8_t>& m) {
      return HostBlocksparseDecode(m, n, block);
    });
  }
}

TEST(SharedMathSparseMoreFormat, AdaqRangesAndThresholdBits) {
  // A sign without samples keeps nothing: an empty range.
  EXPECT_GT(adaq::PositiveRange(adaq::kKeepNone).lo, adaq::PositiveRange(adaq::kKeepNone).hi);
  EXPECT_GT(adaq::NegativeRange(adaq::kKeepNone).lo, adaq::NegativeRange(adaq::kKeepNone).hi);
  // Zeros, infinities and NaN are never in a range; the threshold itself is.
  const uint32_t t = FloatBits(0.25f);
  for (const adaq::BitRange r : {adaq::PositiveRange(t), adaq::NegativeRange(t)}) {
    EXPECT_FALSE(adaq::InRange(FloatBits(0.0f), r));
    EXPECT_FALSE(adaq::InRange(FloatBits(-0.0f), r));
    EXPECT_FALSE(adaq::InRange(FloatBits(INFINITY), r));
    EXPECT_FALSE(adaq::InRange(FloatBits(-INFINITY), r));
    EXPECT_FALSE(adaq::InRange(FloatBits(std::nanf("")), r));
  }
  EXPECT_TRUE(adaq::InRange(FloatBits(0.25f), adaq::PositiveRange(t)));
  EXPECT_FALSE(adaq::InRange(FloatBits(-0.25f), adaq::PositiveRange(t)));
  EXPECT_TRUE(adaq::InRange(FloatBits(-0.25f), adaq::NegativeRange(t)));
  EXPECT_FALSE(adaq::InRange(FloatBits(-0.2499f), adaq::NegativeRange(t)));
  EXPECT_EQ(adaq::Mean(3.0, 0), 0.0f);
  EXPECT_EQ(adaq::Mean(3.0, 2), 1.5f);
  // threshold: strictly above the threshold rounded to float.
  EXPECT_EQ(sparse::ThresholdKeptFromBits(0.0), 1u);
  EXPECT_EQ(sparse::ThresholdKeptFromBits(0.25), FloatBits(0.25f) + 1);
  EXPECT_EQ(sparse::ThresholdKeptFromBits(1e300), 0x7f800001u);  // keeps nothing finite
}

}  // namespace
}  // namespace bytecomp::compress
