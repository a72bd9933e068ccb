// The CUDA sparse codecs' arithmetic without a GPU: topk's radix select, dgc's sample and
// threshold search, randomk's indices (each from its counter), artopk's rounds, and the sparse
// message's writers
// and readers (the parallel one against the serial one),
// run on the host with the format headers' functions in the order
// compress/cuda/src/sparse_*.cu calls them, against the CPU codecs: the same bytes, the same
// decoded values, the same errors for malformed messages.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "bytecomp/compress.h"
#include "bytecomp/compress/artopk_round.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/format/artopk_format.h"
#include "bytecomp/compress/format/dgc_threshold.h"
#include "bytecomp/compress/format/randomk_format.h"
#include "bytecomp/compress/format/sparse_format.h"
#include "bytecomp/compress/format/topk_select.h"
#include "bytecomp/compress/memory_math.h"
#include "bytecomp/compress/params.h"
#include "bytecomp/compress/registry.h"
#include "bytecomp/compress/two_round.h"
#include "gtest/gtest.h"
#include "shared_math_sparse_util.h"
#include "shared_math_util.h"

namespace bytecomp::compress {
namespace {

using namespace shared_math;

// topk on the host: the four radix passes over the host's histograms, then the selection: every
// element at least the threshold where all its ties are kept, else the flags with tie ranks.
std::vector<bool> HostTopkFlags(const std::vector<float>& x, size_t k) {
  uint32_t prefix = 0, need = static_cast<uint32_t>(k), equal = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    uint32_t hist[256] = {};
    for (float v : x) {
      const uint32_t a = FloatBits(v) & 0x7fffffffu;
      if (topk::RadixMatches(a, prefix, shift)) ++hist[(a >> shift) & 255u];
    }
    topk::RadixSelectDigit(hist, shift, &prefix, &need);
    equal = hist[(prefix >> shift) & 255u];
  }
  std::vector<bool> keep(x.size());
  if (need == equal) {
    for (size_t i = 0; i < x.size(); ++i) keep[i] = (FloatBits(x[i]) & 0x7fffffffu) >= prefix;
    return keep;
  }
  uint32_t tie_rank = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t a = FloatBits(x[i]) & 0x7fffffffu;
    keep[i] = a > prefix || (a == prefix && tie_rank < need);
    tie_rank += a == prefix ? 1 : 0;
  }
  return keep;
}

// dgc on the host: the sample the host draws, the threshold search, the flags.
std::vector<bool> HostDgcFlags(const std::vector<float>& x, double ratio, const CodecContext& ctx) {
  const size_t n = x.size();
  std::vector<uint32_t> positions(dgc::SampleSize(n));
  dgc::ForEachSamplePosition(n, NodeSeed(ctx, dgc::kDgcSalt),
                             [&](size_t j, size_t i) { positions[j] = static_cast<uint32_t>(i); });
  std::vector<uint32_t> sample;
  for (uint32_t p : positions) sample.push_back(FloatBits(x[p]) & 0x7fffffffu);
  float threshold = dgc::SampleThreshold(sample, ratio);
  auto count_at_least = [&](float t) {
    size_t c = 0;
    for (float v : x) c += (FloatBits(v) & 0x7fffffffu) >= dgc::ThresholdBits(t) ? 1 : 0;
    return c;
  };
  const double target = dgc::Target(ratio, n);
  size_t count = count_at_least(threshold);
  for (int step = 0; step < dgc::kMaxSteps && dgc::AdjustThreshold(count, target, &threshold);
       ++step) {
    count = count_at_least(threshold);
  }
  std::vector<bool> keep(n);
  for (size_t i = 0; i < n; ++i) {
    keep[i] = (FloatBits(x[i]) & 0x7fffffffu) >= dgc::ThresholdBits(threshold);
  }
  return keep;
}

class SharedMathSparse : public ::testing::TestWithParam<size_t> {};

// The radix select against the definition: the k largest |x| bit patterns, ties at the
// threshold taken in index order.
TEST_P(SharedMathSparse, TopkRadixSelectKeepsTheKLargest) {
  const size_t n = GetParam();
  const std::vector<float> x = RandomGradient(n, 7, /*with_ties=*/true);
  for (double ratio : {0.001, 0.01, 0.3, 1.0}) {
    const size_t k = sparse::KeptCount(ratio, n);
    const std::vector<bool> keep = HostTopkFlags(x, k);
    std::vector<uint32_t> kept;
    for (size_t i = 0; i < n; ++i) {
      if (keep[i]) kept.push_back(static_cast<uint32_t>(i));
    }
    std::vector<uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      return (FloatBits(x[a]) & 0x7fffffffu) > (FloatBits(x[b]) & 0x7fffffffu);
    });
    order.resize(k);
    std::sort(order.begin(), order.end());
    EXPECT_EQ(kept, order) << "ratio " << ratio;
  }
}

TEST_P(SharedMathSparse, TopkMessageAsTheCpuCodec) {
  const size_t n = GetParam();
  for (bool ties : {false, true}) {
    const std::vector<float> x = RandomGradient(n, 21, ties);
    for (const char* ratio : {"0.001", "0.01", "0.3", "1"}) {
      auto codec = Make("topk", {{"ratio", ratio}});
      const size_t k = sparse::KeptCount(std::stod(ratio), n);
      const std::vector<uint8_t> cpu = CpuEncode(*codec, x, Context());
      ASSERT_EQ(HostSparseMessage(x, HostTopkFlags(x, k)), cpu)
          << "ratio " << ratio << (ties ? " with ties" : "");
      auto decoded = HostSparseDecode("topk", cpu, n, static_cast<int64_t>(k));
      ASSERT_TRUE(decoded.ok()) << decoded.status();
      ExpectSameBits(*decoded, CpuDecode(*codec, cpu, n, Context()));
    }
  }
}

TEST_P(SharedMathSparse, DgcMessageAsTheCpuCodec) {
  const size_t n = GetParam();
  const std::vector<float> x = RandomGradient(n, 22);
  for (const char* ratio : {"0.01", "0.3"}) {
    auto codec = Make("dgc", {{"ratio", ratio}});
    const std::vector<uint8_t> cpu = CpuEncode(*codec, x, Context());
    EXPECT_EQ(HostSparseMessage(x, HostDgcFlags(x, std::stod(ratio), Context())), cpu)
        << "ratio " << ratio;
    auto decoded = HostSparseDecode("dgc", cpu, n, -1);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    ExpectSameBits(*decoded, CpuDecode(*codec, cpu, n, Context()));
  }
}

// dgc with its fused dgc_momentum memory over rounds (memory_math.h, and the compaction that
// zeroes u and v where sent), and topk with residual (sent coordinates keep no error).
TEST_P(SharedMathSparse, FusedMemoriesMatchEncodeWithMemory) {
  const size_t n = GetParam();
  for (const char* name : {"dgc", "topk"}) {
    const bool dgc_codec = std::string(name) == "dgc";
    auto codec = Make(name, {{"ratio", "0.05"}});
    auto memory = CreateMemory(dgc_codec ? "dgc_momentum" : "residual");
    ASSERT_TRUE(memory.ok()) << memory.status();
    std::vector<float> u(n, 0.0f), v(n, 0.0f), compensated(n), cpu_compensated, cpu_decoded;
    for (uint32_t round = 0; round < 4; ++round) {
      const std::vector<float> g = RandomGradient(n, 200 + round);
      const CodecContext ctx = Context(round);
      for (size_t i = 0; i < n; ++i) {
        if (dgc_codec) {
          u[i] = DgcMomentumU(g[i], u[i], 0.9f);
          v[i] = DgcMomentumV(v[i], u[i]);
          compensated[i] = v[i];
        } else {
          compensated[i] = v[i] = ResidualCompensate(g[i], v[i], 1.0f, 1.0f);
        }
      }
      const std::vector<bool> keep = dgc_codec
                                         ? HostDgcFlags(compensated, 0.05, ctx)
                                         : HostTopkFlags(compensated, sparse::KeptCount(0.05, n));
      const std::vector<uint8_t> host = HostSparseMessage(compensated, keep);
      for (size_t i = 0; i < n; ++i) {
        if (!keep[i]) continue;
        v[i] = dgc_codec ? 0.0f : ResidualUpdate(compensated[i], compensated[i]);
        if (dgc_codec) u[i] = 0.0f;
      }
      ASSERT_EQ(host, CpuEncodeWithMemory(*codec, **memory, g, ctx, cpu_compensated, cpu_decoded))
          << name << ", round " << round;
    }
  }
}

// randomk's indices drawn as the GPU codec draws them (on the host), the gather with and
// without the stratum scale, and the scatter of a decode.
TEST_P(SharedMathSparse, RandomkAsTheCpuCodec) {
  const size_t n = GetParam();
  const std::vector<float> x = RandomGradient(n, 23);
  for (const char* ratio : {"0.01", "0.3", "1"}) {
    for (const char* scale : {"false", "true"}) {
      auto codec = Make("randomk", {{"ratio", ratio}, {"scale", scale}});
      const size_t k = sparse::KeptCount(std::stod(ratio), n);
      std::vector<uint8_t> host(randomk::PayloadBytes(k));
      randomk::WriteHeader(host.data(), static_cast<uint32_t>(n), static_cast<uint32_t>(k));
      std::vector<uint32_t> idx(k);
      size_t covered = 0;
      randomk::ForEachRandomIndex(n, k, SharedSeed(Context(), randomk::kRandomkSalt),
                                  [&](size_t j, size_t i, size_t, uint32_t size) {
                                    idx[j] = static_cast<uint32_t>(i);
                                    const float s = static_cast<float>(size);
                                    PutF32(host.data() + 8 + 4 * j,
                                           std::string(scale) == "true" ? x[i] * s : x[i]);
                                    covered += size;
                                  });
      EXPECT_EQ(covered, n);
      const std::vector<uint8_t> cpu = CpuEncode(*codec, x, Context());
      ASSERT_EQ(host, cpu) << "ratio " << ratio << " scale " << scale;
      ASSERT_TRUE(randomk::CheckHeader(cpu.data(), cpu.size(), n, k).ok());
      std::vector<float> decoded(n, 0.0f);
      for (size_t j = 0; j < k; ++j) decoded[idx[j]] = GetF32(cpu.data() + 8 + 4 * j);
      ExpectSameBits(decoded, CpuDecode(*codec, cpu, n, Context()));
    }
  }
}

// artopk's rounds as compress/cuda/src/artopk_kernels.cu runs them, on the host, for two workers
// with the fused residual and both choosers: the compensation, the norm (the GPU's order of
// the sum of squares), the round's host side (artopk_round.h), the chooser's candidate (topk's
// message and its index section), the chosen section read by the parallel reader, the gather
// that forgets the sent values in the memory, the scatter of the sums; against the CPU codec
// with its residual memory, the replies from the CPU aggregator, over rounds.
TEST_P(SharedMathSparse, ArtopkRoundsAsTheCpuCodec) {
  const size_t n = GetParam();
  constexpr size_t kWorkers = 2;
  for (const char* chooser : {"round_robin", "largest_norm"}) {
    const CodecParams params = {{"ratio", "0.05"}, {"chooser", chooser}};
    auto filled = ValidateParams("artopk", CodecRegistry::Global().Find("artopk")->params, params);
    ASSERT_TRUE(filled.ok()) << filled.status();
    auto read = artopk::ReadParams(*filled);
    ASSERT_TRUE(read.ok()) << read.status();
    std::vector<artopk::RoundState> host(kWorkers, artopk::RoundState(*read));
    std::vector<std::vector<float>> state(kWorkers, std::vector<float>(n, 0.0f));
    std::vector<std::vector<uint32_t>> chosen(kWorkers);
    std::vector<std::unique_ptr<Codec>> cpu;
    std::vector<std::unique_ptr<Memory>> memory;
    std::vector<std::vector<float>> compensated(kWorkers, std::vector<float>(n));
    for (size_t w = 0; w < kWorkers; ++w) {
      cpu.push_back(Make("artopk", params));
      auto m = CreateMemory("residual");
      ASSERT_TRUE(m.ok());
      memory.push_back(std::move(*m));
    }
    auto server = CreateAggregator("artopk", params);
    ASSERT_TRUE(server.ok()) << server.status();
    for (uint32_t round = 0; round < 3; ++round) {
      const std::string at = absl::StrCat(chooser, ", round ", round);
      auto ctx_of = [&](size_t w) {
        CodecContext ctx = Context(round);
        ctx.node = static_cast<uint32_t>(w);
        return ctx;
      };
      (*server)->Reset(n);
      for (size_t w = 0; w < kWorkers; ++w) {
        const std::vector<float> g = RandomGradient(n, 300 + round * kWorkers + w);
        std::vector<float>& x = state[w];  // the fused residual holds the compensated input
        for (size_t i = 0; i < n; ++i) x[i] = ResidualCompensate(g[i], x[i], 1.0f, 1.0f);
        const float norm =
            host[w].uses_norm() ? artopk::NormFromSumOfSquares(GpuOrderSum(x, true, 0)) : 0.0f;
        artopk::FirstPush h = host[w].Start(n, norm, ctx_of(w));
        std::vector<uint8_t> section;
        if (h.has_candidate) {
          const std::vector<uint8_t> m = HostSparseMessage(x, HostTopkFlags(x, host[w].k()));
          const sparse::Header mh = sparse::ReadHeader(m.data());
          h.encoding = mh.encoding;
          h.width = mh.width;
          h.index_bytes = mh.index_bytes;
          const size_t at_section = sparse::kHeaderBytes + 4 * size_t{mh.k};
          section.assign(m.begin() + at_section, m.begin() + at_section + mh.index_bytes);
        }
        std::vector<uint8_t> push(artopk::kFirstPushHeaderBytes);
        artopk::WriteFirstPushHeader(push.data(), h);
        push.insert(push.end(), section.begin(), section.end());
        host[w].FinishFirst(ctx_of(w));
        ASSERT_TRUE(memory[w]->Compensate(g, ctx_of(w), absl::MakeSpan(compensated[w])).ok());
        std::vector<uint8_t> expected(AsTwoRound(*cpu[w])->FirstRoundBytes(n));
        auto bytes =
            AsTwoRound(*cpu[w])->EncodeFirst(compensated[w], ctx_of(w), absl::MakeSpan(expected));
        ASSERT_TRUE(bytes.ok()) << bytes.status();
        expected.resize(*bytes);
        ASSERT_EQ(push, expected) << "payload 1, worker " << w << ", " << at;
        ASSERT_TRUE((*server)->Add(expected, ctx_of(w)).ok());
      }
      auto reply1 = (*server)->Finish();
      ASSERT_TRUE(reply1.ok()) << reply1.status();
      const std::vector<float> first(reply1->begin(), reply1->end());
      const auto* r = reinterpret_cast<const uint8_t*>(first.data());
      ASSERT_TRUE(artopk::CheckFirstReply(r, 4 * first.size(), host[0].k()).ok());
      const artopk::FirstReply rh = artopk::ReadFirstReplyHeader(r);
      (*server)->Reset(n);
      for (size_t w = 0; w < kWorkers; ++w) {
        ASSERT_TRUE(host[w].CheckStage(1, ctx_of(w), "EncodeSecond").ok());
        const size_t k = host[w].k();
        chosen[w].assign(k, 0);
        ASSERT_TRUE(HostReadIndexSection(r + artopk::kFirstReplyHeaderBytes, rh.index_bytes, k, n,
                                         rh.encoding, rh.width, chosen[w].data())
                        .ok());
        std::vector<uint8_t> push(artopk::kSecondPushHeaderBytes);
        PutU32(push.data(), 2);
        PutF32(push.data() + 4, host[w].smoothed_norm());
        for (uint32_t i : chosen[w]) {  // GatherSelectedKernel
          AppendF32(push, state[w][i]);
          state[w][i] = ResidualUpdate(state[w][i], state[w][i]);
        }
        host[w].FinishSecond();
        TwoRoundCodec* two = AsTwoRound(*cpu[w]);
        std::vector<uint8_t> expected(two->SecondRoundBytes(n));
        ASSERT_TRUE(two->EncodeSecond(first, ctx_of(w), absl::MakeSpan(expected)).ok());
        std::vector<float> approximation(n);
        ASSERT_TRUE(two->LocalApproximation(absl::MakeSpan(approximation)).ok());
        ASSERT_TRUE(memory[w]->Update(compensated[w], approximation, ctx_of(w)).ok());
        ASSERT_EQ(push, expected) << "payload 2, worker " << w << ", " << at;
        ASSERT_TRUE((*server)->Add(expected, ctx_of(w)).ok());
      }
      auto reply2 = (*server)->Finish();
      ASSERT_TRUE(reply2.ok()) << reply2.status();
      const std::vector<float> second(reply2->begin(), reply2->end());
      for (size_t w = 0; w < kWorkers; ++w) {
        ASSERT_TRUE(host[w].CheckStage(2, ctx_of(w), "DecodeSecond").ok());
        ASSERT_TRUE(host[w].CheckSecondReply(4 * second.size(), n).ok());
        const size_t k = host[w].k();
        std::vector<float> out(n, 0.0f);
        for (size_t j = 0; j < k; ++j) out[chosen[w][j]] = second[j];  // ScatterValuesKernel
        host[w].FinishDecodeSecond(GetU32(reinterpret_cast<const uint8_t*>(&second[k])), ctx_of(w));
        std::vector<float> expected(n);
        ASSERT_TRUE(
            AsTwoRound(*cpu[w])->DecodeSecond(second, ctx_of(w), absl::MakeSpan(expected)).ok());
        ExpectSameBits(out, expected);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, SharedMathSparse, ::testing::Values(37, 1000, 4096, 100003));

// A malformed message: the GPU decoder's checks report what the CPU decoder reports.
TEST(SharedMathSparseDecode, MalformedMessagesAreReportedAsTheCpuCodecsReportThem) {
  const size_t n = 5000;
  const std::vector<float> x = RandomGradient(n, 24);
  auto topk = Make("topk", {{"ratio", "0.01"}});  // k = 50: a bit-packed or varint section
  auto dense = Make("topk", {{"ratio", "0.9"}});  // deltas of 0: a bit-packed section
  const std::vector<uint8_t> packed = CpuEncode(*topk, x, Context());
  const int64_t k = static_cast<int64_t>(sparse::KeptCount(0.01, n));
  const float nan = std::nanf("");
  const std::vector<Malformation> cases = {
      {"shorter than the header", [](auto& m) { m.resize(9); }},
      {"version 2", [](auto& m) { m[0] = 2; }},
      {"another n", [](auto& m) { PutU32(m.data() + 4, 4999); }},
      {"another k", [](auto& m) { PutU32(m.data() + 8, 51); }},
      {"a byte too many", [](auto& m) { m.push_back(0); }},
      {"a NaN value", [nan](auto& m) { PutF32(m.data() + 16 + 4 * 7, nan); }},
      {"encoding 3", [](auto& m) { m[1] = 3; }},
      {"width 33", [](auto& m) { m[1] = sparse::kBitPack, m[2] = 33; }},
      {"a raw section of the wrong size", [](auto& m) { m[1] = sparse::kRaw; }},
  };
  ExpectTheCpuErrors(*topk, packed, n, cases, [&](const std::vector<uint8_t>& m) {
    return HostSparseDecode("topk", m, n, k);
  });
  // Index sections: raw indices out of order or out of range, varints that end early or leave
  // bytes, bit-packed deltas that run past n.
  const std::vector<uint32_t> raw_bad[] = {{3, 2}, {0, 5000}};
  for (const auto& indices : raw_bad) {
    std::vector<uint8_t> section;
    for (uint32_t i : indices) AppendU32(section, i);
    std::vector<uint32_t> out(indices.size());
    EXPECT_EQ(sparse::ReadIndexSection(section.data(), section.size(), indices.size(), n,
                                       sparse::kRaw, 0, out.data())
                  .code,
              FormatErrorCode::kIndicesNotIncreasing);
  }
  const uint8_t varints[] = {0x85, 0x01, 0x02};  // 133, 2
  uint32_t out[2];
  EXPECT_EQ(sparse::ReadIndexSection(varints, 2, 2, n, sparse::kVarint, 0, out).code,
            FormatErrorCode::kVarintEndsEarly);
  EXPECT_TRUE(sparse::ReadIndexSection(varints, 3, 2, n, sparse::kVarint, 0, out).ok());
  EXPECT_EQ(out[0], 133u);
  EXPECT_EQ(out[1], 136u);
  EXPECT_EQ(sparse::ReadIndexSection(varints, 3, 1, n, sparse::kVarint, 0, out).code,
            FormatErrorCode::kVarintTrailingBytes);
  EXPECT_EQ(sparse::ReadIndexSection(varints, 3, 2, 135, sparse::kVarint, 0, out).code,
            FormatErrorCode::kIndexOutOfRange);
  const uint8_t too_long[] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x01};
  EXPECT_EQ(sparse::ReadIndexSection(too_long, 6, 1, n, sparse::kVarint, 0, out).code,
            FormatErrorCode::kVarintTooLong);
  // A dense message's bit-packed section read back by ReadIndexSection equals the CPU's decode.
  const std::vector<uint8_t> bitpacked = CpuEncode(*dense, x, Context());
  EXPECT_EQ(bitpacked[1], sparse::kBitPack);
  auto decoded = HostSparseDecode("topk", bitpacked, n, -1);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ExpectSameBits(*decoded, CpuDecode(*dense, bitpacked, n, Context()));
}

// The parallel index reader against the serial one on valid sections of every encoding and on
// their corruptions (a byte changed, cut, added; another k or n): the same indices where the
// section is valid, the same error where it is not.
TEST(SharedMathSparseDecode, TheParallelIndexReaderReadsAsTheSerialOne) {
  std::mt19937 rng(31);
  int valid = 0, invalid = 0;
  for (size_t k : {1u, 2u, 7u, 64u, 1000u}) {
    for (uint32_t spread : {1u, 2u, 130u, 20000u, 300000000u}) {
      std::vector<uint32_t> idx(k);
      uint64_t next = 0;
      for (size_t j = 0; j < k; ++j) {
        next += rng() % spread;
        idx[j] = static_cast<uint32_t>(std::min<uint64_t>(next, 0xfffffff0u - k + j));
        next = idx[j] + 1;
      }
      const size_t n = static_cast<size_t>(next);
      for (uint8_t encoding : {sparse::kRaw, sparse::kBitPack, sparse::kVarint}) {
        std::vector<uint8_t> section;
        uint8_t width = 0;
        if (encoding == sparse::kRaw) {
          for (uint32_t i : idx) AppendU32(section, i);
        } else {
          uint32_t max_delta = 0;
          for (size_t j = 0; j < k; ++j) {
            max_delta = std::max(max_delta, sparse::IndexDelta(idx.data(), j));
          }
          width = static_cast<uint8_t>(BitWidth(max_delta));
          if (encoding == sparse::kBitPack) {
            section.assign(PackedBytes(k, width) + 8, 0);  // room for BitWriter's last word
            BitWriter w(section.data());
            for (size_t j = 0; j < k; ++j) w.Put(sparse::IndexDelta(idx.data(), j), width);
            w.Finish();
            section.resize(PackedBytes(k, width));
          } else {
            section.resize(5 * k);
            uint8_t* p = section.data();
            for (size_t j = 0; j < k; ++j)
              p = sparse::WriteVarint(p, sparse::IndexDelta(idx.data(), j));
            section.resize(p - section.data());
          }
        }
        auto compare = [&](const std::vector<uint8_t>& m, size_t mk, size_t mn, uint8_t mwidth) {
          std::vector<uint32_t> serial(mk + 1, 0), parallel(mk + 1, 0);
          const FormatError want =
              sparse::ReadIndexSection(m.data(), m.size(), mk, mn, encoding, mwidth, serial.data());
          const FormatError got =
              HostReadIndexSection(m.data(), m.size(), mk, mn, encoding, mwidth, parallel.data());
          ASSERT_EQ(FormatErrorStatus("s", got).ToString(), FormatErrorStatus("s", want).ToString())
              << "encoding " << int{encoding} << " k " << mk << " n " << mn;
          if (want.ok()) {
            EXPECT_EQ(parallel, serial);
            ++valid;
          } else {
            ++invalid;
          }
        };
        compare(section, k, n, width);
        compare(section, k, n - 1, width);
        compare(section, k + 1, n, width);
        if (k > 1) compare(section, k - 1, n, width);
        for (int trial = 0; trial < 20; ++trial) {
          std::vector<uint8_t> m = section;
          switch (trial % 4) {
            case 0:
              if (!m.empty()) m[rng() % m.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
              break;
            case 1:
              if (!m.empty()) m.pop_back();
              break;
            case 2:
              m.push_back(static_cast<uint8_t>(rng()));
              break;
            default:
              if (!m.empty()) m[rng() % m.size()] = static_cast<uint8_t>(rng() | 0x80u);
          }
          compare(m, k, n, width);
        }
      }
    }
  }
  EXPECT_GT(valid, 100);
  EXPECT_GT(invalid, 100);
}

// floor(j r / k) through a double, settled in integers, at the edges of its range.
TEST(SharedMathSparseFormat, RandomkFloorMulDivIsExact) {
  std::mt19937_64 rng(5);
  for (int t = 0; t < 200000; ++t) {
    const uint64_t k = 1 + rng() % (t % 2 == 0 ? (uint64_t{1} << 31) : 1000u);
    const uint64_t j = rng() % (k + 1), r = rng() % k;
    ASSERT_EQ(randomk::FloorMulDiv(j, r, k, 1.0 / static_cast<double>(k)), j * r / k)
        << j << " " << r << " " << k;
  }
  const uint64_t k = (uint64_t{1} << 31) - 1;
  const double inverse = 1.0 / static_cast<double>(k);
  EXPECT_EQ(randomk::FloorMulDiv(k, k - 1, k, inverse), k - 1);
  EXPECT_EQ(randomk::FloorMulDiv(k - 1, k - 1, k, inverse), (k - 1) * (k - 1) / k);
}

// Each randomk index drawn on its own (RandomIndexAt, a GPU thread's) is the sequential walk's.
TEST(SharedMathSparseFormat, RandomkIndexAtIsTheWalksIndex) {
  for (size_t n : {1u, 7u, 1000u, 4099u, 1000003u, 2147483647u}) {
    for (double ratio : {0.001, 0.01, 0.3, 0.999, 1.0}) {
      if (n > 1000003u && ratio > 0.001) continue;  // 2^31 - 1: the large products, once
      const size_t k = sparse::KeptCount(ratio, n);
      size_t checked = 0;
      randomk::ForEachRandomIndex(n, k, 77, [&](size_t j, size_t i, size_t start, uint32_t size) {
        size_t s = 0;
        uint32_t z = 0;
        ASSERT_EQ(randomk::RandomIndexAt(randomk::StrataOf(n, k), 77, j, &s, &z), i)
            << n << " " << k << " " << j;
        ASSERT_EQ(s, start);
        ASSERT_EQ(z, size);
        ASSERT_LT(i - start, size);
        ++checked;
      });
      EXPECT_EQ(checked, k);
    }
  }
}

// The randomk header checks against the CPU decoder's.
TEST(SharedMathSparseDecode, RandomkHeaderChecks) {
  const size_t n = 3000;
  auto codec = Make("randomk", {{"ratio", "0.1"}});
  const std::vector<uint8_t> payload = CpuEncode(*codec, RandomGradient(n, 25), Context());
  const size_t k = sparse::KeptCount(0.1, n);
  for (auto apply : std::vector<std::function<void(std::vector<uint8_t>&)>>{
           [](auto& m) { m.resize(5); }, [](auto& m) { PutU32(m.data(), 2999); },
           [](auto& m) { PutU32(m.data() + 4, 7); }, [](auto& m) { m.pop_back(); }}) {
    std::vector<uint8_t> m = payload;
    apply(m);
    const std::string cpu = CpuDecodeStatus(*codec, m, n, Context());
    EXPECT_NE(cpu, "OK");
    EXPECT_EQ(
        FormatErrorStatus("randomk", randomk::CheckHeader(m.data(), m.size(), n, k)).ToString(),
        cpu);
  }
}

// The index plan and varint writer against the format's definitions.
TEST(SharedMathSparseFormat, PlanAndVarintsFollowTheFormat) {
  std::mt19937 rng(9);
  for (size_t k : {1u, 5u, 100u, 3000u}) {
    for (uint32_t spread : {1u, 3u, 200u, 100000u}) {
      std::vector<uint32_t> idx(k);
      uint32_t next = 0;
      for (size_t j = 0; j < k; ++j) {
        idx[j] = next + rng() % spread;
        next = idx[j] + 1;
      }
      uint32_t max_delta = 0;
      size_t varint_bytes = 0;
      std::vector<uint8_t> varints(5 * k);
      uint8_t* p = varints.data();
      for (size_t j = 0; j < k; ++j) {
        const uint32_t d = sparse::IndexDelta(idx.data(), j);
        max_delta = std::max(max_delta, d);
        varint_bytes += sparse::VarintLength(d);
        uint8_t* end = sparse::WriteVarint(p, d);
        ASSERT_EQ(end - p, static_cast<ptrdiff_t>(sparse::VarintLength(d)));
        EXPECT_EQ(end[-1] & 0x80u, 0u);  // the last byte ends the varint
        p = end;
      }
      std::vector<uint32_t> back(k);
      ASSERT_TRUE(sparse::ReadIndexSection(varints.data(), varint_bytes, k, next, sparse::kVarint,
                                           0, back.data())
                      .ok());
      EXPECT_EQ(back, idx);
      const sparse::IndexPlan plan = sparse::ChooseIndexPlan(k, max_delta, varint_bytes);
      const size_t packed = PackedBytes(k, BitWidth(max_delta));
      EXPECT_EQ(plan.bytes, std::min({4 * k, packed, varint_bytes}));
      if (plan.encoding == sparse::kBitPack) {
        EXPECT_LT(packed, 4 * k);
      } else if (plan.encoding == sparse::kVarint) {
        EXPECT_LT(varint_bytes, std::min(4 * k, packed));
      }
    }
  }
}

TEST(SharedMathSparseFormat, SelectBinAndDgcSteps) {
  const uint32_t counts[5] = {7, 0, 3, 2, 4};  // bins 0..4
  uint64_t above = 0;
  auto count = [&counts](uint32_t b) -> uint64_t { return counts[b]; };
  EXPECT_EQ(topk::SelectBin(4, 4, count, &above), 4u);
  EXPECT_EQ(above, 0u);
  EXPECT_EQ(topk::SelectBin(4, 5, count, &above), 3u);
  EXPECT_EQ(above, 4u);
  EXPECT_EQ(topk::SelectBin(4, 10, count, &above), 0u);  // bins 4..1 hold 9
  EXPECT_EQ(above, 9u);
  float t = 1.0f;
  EXPECT_TRUE(dgc::AdjustThreshold(140, 100.0, &t));
  EXPECT_EQ(t, 1.3f);
  t = 1.0f;
  EXPECT_TRUE(dgc::AdjustThreshold(60, 100.0, &t));
  EXPECT_EQ(t, 0.7f);
  EXPECT_FALSE(dgc::AdjustThreshold(100, 100.0, &t));
  t = dgc::kMinThreshold;
  EXPECT_TRUE(dgc::AdjustThreshold(0, 100.0, &t));
  EXPECT_EQ(t, dgc::kMinThreshold);  // never below the smallest positive float
  EXPECT_EQ(dgc::SampleSize(500), 500u);
  EXPECT_EQ(dgc::SampleSize(50000), 1000u);
  EXPECT_EQ(dgc::SampleSize(1000000), 10000u);
  std::vector<uint32_t> zeros(10, 0u);
  EXPECT_EQ(dgc::SampleThreshold(zeros, 0.5), dgc::kMinThreshold);
}

}  // namespace
}  // namespace bytecomp::compress
