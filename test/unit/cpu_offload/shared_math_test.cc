// The CUDA kernels' per-thread work (cuda_codec_threads.h, cuda_feedback.h, over the shared
// elementwise.h) run on the host, thread after thread, against the CPU codecs on random
// inputs: the bytes must be identical. This is how the GPU codecs' arithmetic is tested on
// machines without a GPU. Built with -ffp-contract=off, as the kernels are with --fmad=false.
#include <algorithm>
#include <limits>
#include <string>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "bytecomp/compress.h"
#include "bytecomp/compress/cuda_codec_threads.h"
#include "bytecomp/compress/cuda_feedback.h"
#include "bytecomp/compress/cuda_host_draws.h"
#include "gtest/gtest.h"

namespace bytecomp::compress {
namespace {

using namespace cuda_threads;

std::vector<float> RandomGradient(size_t n, uint32_t seed, bool with_ties = false) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 19);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    float v = normal(rng) * std::pow(10.0f, static_cast<float>(pick(rng) % 5) - 2.0f);
    if (with_ties) v = std::round(v * 4.0f) / 4.0f;  // many equal magnitudes
    if (pick(rng) == 0) v = 0.0f;
    if (pick(rng) == 1) v = -0.0f;
    x[i] = v;
  }
  if (n > 3) {
    x[1] = 1e5f;    // above the fp16 range: saturates
    x[2] = -7e-8f;  // an fp16 subnormal
  }
  return x;
}

CodecContext Context(uint64_t round = 3) {
  CodecContext ctx;
  ctx.seed = 1234;
  ctx.key = (uint64_t{7} << 32) | 2;
  ctx.round = round;
  ctx.node = 1;
  return ctx;
}

std::vector<uint8_t> CpuEncode(Codec& codec, const std::vector<float>& x, const CodecContext& ctx) {
  std::vector<uint8_t> out(codec.MaxEncodedBytes(x.size()));
  auto n = codec.Encode(x, ctx, absl::MakeSpan(out));
  EXPECT_TRUE(n.ok()) << n.status();
  out.resize(n.ok() ? *n : 0);
  return out;
}

std::vector<float> CpuDecode(Codec& codec, const std::vector<uint8_t>& bytes, size_t n,
                             const CodecContext& ctx) {
  std::vector<float> out(n);
  const absl::Status s = codec.Decode(bytes, ctx, absl::MakeSpan(out));
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

std::unique_ptr<Codec> Make(absl::string_view name, const CodecParams& params = {}) {
  auto codec = CreateCodec(name, params);
  EXPECT_TRUE(codec.ok()) << codec.status();
  return codec.ok() ? std::move(*codec) : nullptr;
}

// Bitwise equality of float vectors (0.0 vs -0.0 and NaN payloads count).
void ExpectSameBits(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(FloatBits(a[i]), FloatBits(b[i])) << "element " << i << ": " << a[i] << " vs " << b[i];
  }
}

// The GPU's double sums run in another order: 256 threads striding, then the threads' sums.
double GpuOrderSum(const std::vector<float>& x, bool squares, int sign /* 0 all, 1 >=0, -1 <0 */) {
  double threads[256] = {};
  for (size_t i = 0; i < x.size(); ++i) {
    if (sign == 1 && x[i] < 0.0f) continue;
    if (sign == -1 && !(x[i] < 0.0f)) continue;
    const double d = x[i];
    threads[i % 256] += squares ? d * d : d;
  }
  double total = 0.0;
  for (double t : threads) total += t;
  return total;
}

// The sign kernel on the host: a word of 32 SignWordBit per warp, stored by StoreSignWord.
std::vector<uint8_t> HostSignBits(const std::vector<float>& x, std::vector<float>* decoded,
                                  float clear_value, float set_value) {
  const size_t n = x.size();
  std::vector<uint8_t> bits((n + 7) / 8);
  for (size_t base = 0; base < n; base += 32) {
    uint32_t word = 0;
    for (uint32_t lane = 0; lane < 32 && base + lane < n; ++lane) {
      word |= SignWordBit(x[base + lane], lane);
      if (decoded) (*decoded)[base + lane] = SignDecoded(x[base + lane], clear_value, set_value);
    }
    StoreSignWord(bits.data(), n, base, word);
  }
  return bits;
}

void Append(std::vector<uint8_t>& out, float v) {
  uint8_t b[4];
  std::memcpy(b, &v, 4);
  out.insert(out.end(), b, b + 4);
}

void AppendU32(std::vector<uint8_t>& out, uint32_t v) {
  uint8_t b[4];
  std::memcpy(b, &v, 4);
  out.insert(out.end(), b, b + 4);
}

// The GPU encode of `name` (default parameters, onebit: scaling=means) on the host: the same
// reductions (in the GPU's order), scalars and per-thread functions as cuda_codecs.cu.
// decoded receives the values the fused memory update uses.
std::vector<uint8_t> HostEncode(absl::string_view name, const std::vector<float>& x,
                                const CodecContext& ctx, std::vector<float>* decoded,
                                uint32_t quantum = 127, size_t bucket = 128) {
  const size_t n = x.size();
  decoded->assign(n, 0.0f);
  std::vector<uint8_t> out;
  const CounterRandom random = MakeCounterRandom(ctx.seed, ctx.key, ctx.round, ctx.node);
  uint32_t max_bits = 0;
  for (float v : x) max_bits = std::max(max_bits, FloatBits(v) & 0x7fffffffu);
  auto append_bits = [&](const std::vector<uint8_t>& b) { out.insert(out.end(), b.begin(), b.end()); };
  if (name == "fp16" || name == "bf16") {
    for (size_t i = 0; i < n; ++i) {
      const uint16_t h = name == "bf16" ? SaturatingBFloat16Bits(x[i]) : SaturatingHalfBits(x[i]);
      out.push_back(static_cast<uint8_t>(h));
      out.push_back(static_cast<uint8_t>(h >> 8));
      (*decoded)[i] = name == "bf16" ? BFloat16BitsToFloat(h) : HalfBitsToFloat(h);
    }
  } else if (name == "signsgd") {
    AppendU32(out, static_cast<uint32_t>(n));
    append_bits(HostSignBits(x, decoded, 1.0f, -1.0f));
  } else if (name == "efsignsgd" || name == "onebit") {
    const double pos = GpuOrderSum(x, false, 1), neg = GpuOrderSum(x, false, -1);
    size_t negative_count = 0;
    for (float v : x) negative_count += v < 0.0f ? 1 : 0;
    AppendU32(out, static_cast<uint32_t>(n));
    if (name == "efsignsgd") {
      const float scale = static_cast<float>((pos - neg) / n);
      Append(out, scale);
      append_bits(HostSignBits(x, decoded, scale, -scale));
    } else {
      const size_t non_negative_count = n - negative_count;
      const float clear_value = non_negative_count ? static_cast<float>(pos / non_negative_count) : 0.0f;
      const float set_value = negative_count ? static_cast<float>(neg / negative_count) : 0.0f;
      Append(out, clear_value);
      Append(out, set_value);
      append_bits(HostSignBits(x, decoded, clear_value, set_value));
    }
  } else if (name == "qsgd") {
    AppendU32(out, static_cast<uint32_t>(n));
    const size_t buckets = (n + bucket - 1) / bucket;
    const uint32_t level_bits = BitsFor(quantum);
    std::vector<float> norms(buckets);
    for (size_t b = 0; b < buckets; ++b) {
      const std::vector<float> part(x.begin() + b * bucket, x.begin() + std::min(n, (b + 1) * bucket));
      const double root = std::sqrt(GpuOrderSum(part, true, 0));
      norms[b] = static_cast<float>(std::min(root, static_cast<double>(FLT_MAX)));
      Append(out, norms[b]);
    }
    const size_t codes_at = out.size();
    out.resize(codes_at + (n * (level_bits + 1) + 7) / 8);
    for (size_t g = 0; g < (n + 7) / 8; ++g) {
      QsgdEncodeGroup(x.data(), n, g, bucket, norms.data(), quantum, level_bits, random,
                      out.data() + codes_at, [&](size_t i, float, float d) { (*decoded)[i] = d; });
    }
  } else if (name == "terngrad") {
    const double rms = std::sqrt(GpuOrderSum(x, true, 0) / n);
    const float clip = static_cast<float>(std::min(2.5 * rms, static_cast<double>(FLT_MAX)));
    const float scale = std::min(BitsToFloat(max_bits), clip);
    AppendU32(out, static_cast<uint32_t>(n));
    Append(out, scale);
    for (size_t g = 0; g < (n + 3) / 4; ++g) {
      out.push_back(TernEncodeByte(x.data(), n, g, clip, scale, random,
                                   [&](size_t i, float, float d) { (*decoded)[i] = d; }));
    }
  } else if (name == "natural") {
    const uint32_t exponent_low = NaturalExponentLow(max_bits >> 23);
    out.push_back(static_cast<uint8_t>(exponent_low));
    for (size_t i = 0; i < n; ++i) {
      const uint8_t code = NaturalCode(x[i], exponent_low, RandomBits(random, static_cast<uint32_t>(i)));
      EXPECT_TRUE(NaturalCodeValid(code, exponent_low));
      out.push_back(code);
      (*decoded)[i] = NaturalValue(code, exponent_low);
    }
  } else {
    ADD_FAILURE() << "no host emulation of " << name;
  }
  return out;
}

const char* const kDenseCodecs[] = {"fp16", "bf16", "signsgd", "efsignsgd", "onebit",
                                    "qsgd", "terngrad", "natural"};

class SharedMath : public ::testing::TestWithParam<size_t> {};

TEST_P(SharedMath, SameBytesAndDecodedValuesAsTheCpuCodecs) {
  const size_t n = GetParam();
  const std::vector<float> x = RandomGradient(n, 1);
  for (const char* name : kDenseCodecs) {
    auto codec = Make(name);
    const CodecContext ctx = Context();
    std::vector<float> decoded;
    const std::vector<uint8_t> host = HostEncode(name, x, ctx, &decoded);
    const std::vector<uint8_t> cpu = CpuEncode(*codec, x, ctx);
    ASSERT_EQ(host, cpu) << name;
    // The values the fused error feedback uses are the CPU decoder's, bit for bit.
    ExpectSameBits(decoded, CpuDecode(*codec, cpu, n, ctx));
  }
}

TEST_P(SharedMath, Signum) {
  const size_t n = GetParam();
  auto signum = Make("signum", {{"momentum", "0.9"}});
  std::vector<float> momentum;
  for (uint32_t round = 0; round < 3; ++round) {
    const std::vector<float> g = RandomGradient(n, 10 + round);
    if (momentum.empty()) {
      momentum = g;
    } else {
      for (size_t i = 0; i < n; ++i) momentum[i] = SignumBlend(g[i], momentum[i], 1.0f - 0.9f, 0.9f);
    }
    std::vector<uint8_t> host;
    AppendU32(host, static_cast<uint32_t>(n));
    const std::vector<uint8_t> bits = HostSignBits(momentum, nullptr, 1, -1);
    host.insert(host.end(), bits.begin(), bits.end());
    EXPECT_EQ(host, CpuEncode(*signum, g, Context(round))) << "round " << round;
  }
}

TEST_P(SharedMath, QsgdLevelsAndBucketsAndGpuDecode) {
  const size_t n = GetParam();
  const std::vector<float> x = RandomGradient(n, 4);
  for (auto [quantum, bucket] : {std::pair<uint32_t, size_t>{127, 128}, {5, 100}, {300, 64},
                                 {1, 7}}) {
    auto codec = Make("qsgd", {{"quantum_num", std::to_string(quantum)},
                               {"bucket_size", std::to_string(bucket)}});
    const CodecContext ctx = Context();
    std::vector<float> decoded;
    const std::vector<uint8_t> host = HostEncode("qsgd", x, ctx, &decoded, quantum, bucket);
    const std::vector<uint8_t> cpu = CpuEncode(*codec, x, ctx);
    ASSERT_EQ(host, cpu) << "quantum " << quantum << " bucket " << bucket;
    const std::vector<float> cpu_decoded = CpuDecode(*codec, cpu, n, ctx);
    ExpectSameBits(decoded, cpu_decoded);
    std::vector<float> gpu_decoded(n);
    for (size_t g = 0; g < (n + 7) / 8; ++g) {
      ASSERT_TRUE(QsgdDecodeGroup(cpu.data() + 4, n, g, bucket, quantum, BitsFor(quantum),
                                  gpu_decoded.data()));
    }
    ExpectSameBits(gpu_decoded, cpu_decoded);
  }
}

TEST_P(SharedMath, TernGradGpuDecode) {
  const size_t n = GetParam();
  auto codec = Make("terngrad");
  const std::vector<uint8_t> cpu = CpuEncode(*codec, RandomGradient(n, 5), Context());
  float scale;
  std::memcpy(&scale, cpu.data() + 4, 4);
  std::vector<float> gpu_decoded(n);
  for (size_t g = 0; g < (n + 3) / 4; ++g) {
    ASSERT_TRUE(TernDecodeByte(cpu[8 + g], n, g, scale, gpu_decoded.data()));
  }
  ExpectSameBits(gpu_decoded, CpuDecode(*codec, cpu, n, Context()));
}

// The fused memories over several rounds: compensate, encode and update as the kernels do,
// against the CPU's EncodeWithMemory with the registered memories.
TEST_P(SharedMath, FusedMemoriesMatchEncodeWithMemory) {
  const size_t n = GetParam();
  struct Case {
    const char* codec;
    const char* memory;
  };
  for (const Case& c : {Case{"onebit", "residual"}, Case{"qsgd", "residual"},
                        Case{"terngrad", "residual"}, Case{"natural", "residual"},
                        Case{"fp16", "residual"}, Case{"signsgd", "residual"},
                        Case{"efsignsgd", "efsignsgd"}}) {
    auto codec = Make(c.codec);
    auto memory = CreateMemory(c.memory);
    ASSERT_TRUE(memory.ok()) << memory.status();
    std::vector<float> state(n, 0.0f), compensated(n), decoded;
    std::vector<float> cpu_compensated, cpu_decoded;
    for (uint32_t round = 0; round < 4; ++round) {
      const std::vector<float> g = RandomGradient(n, 100 + round);
      CodecContext ctx = Context(round);
      ctx.learning_rate = round == 2 ? 0.05f : 0.0f;  // efsignsgd: lr from the context or 0.1
      const float lr = ctx.learning_rate > 0.0f ? ctx.learning_rate : 0.1f;
      for (size_t i = 0; i < n; ++i) {
        if (std::string(c.memory) == "residual") {
          compensated[i] = ResidualCompensate(g[i], state[i], 1.0f, 1.0f);
        } else {
          compensated[i] = round == 0 ? g[i] : EfSignCompensate(g[i], state[i], 1.0f / lr);
        }
      }
      const std::vector<uint8_t> host = HostEncode(c.codec, compensated, ctx, &decoded);
      for (size_t i = 0; i < n; ++i) {
        state[i] = std::string(c.memory) == "residual"
                       ? ResidualUpdate(compensated[i], decoded[i])
                       : EfSignResidual(compensated[i], decoded[i], lr);
      }
      std::vector<uint8_t> cpu(codec->MaxEncodedBytes(n));
      auto bytes = EncodeWithMemory(*codec, memory->get(), g, ctx, absl::MakeSpan(cpu),
                                    cpu_compensated, cpu_decoded);
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      cpu.resize(*bytes);
      ASSERT_EQ(host, cpu) << c.codec << " with " << c.memory << ", round " << round;
    }
  }
}

// randomk's host-drawn indices are the CPU codec's: encoding 0, 1, 2, ... sends the indices.
TEST(SharedMathDraws, RandomkIndicesAreTheCpuCodecs) {
  for (size_t n : {10u, 1000u, 100003u}) {
    for (const char* ratio : {"0.01", "0.3", "1"}) {
      auto codec = Make("randomk", {{"ratio", ratio}});
      std::vector<float> iota(n);
      for (size_t i = 0; i < n; ++i) iota[i] = static_cast<float>(i);
      const std::vector<uint8_t> payload = CpuEncode(*codec, iota, Context());
      const size_t k = (payload.size() - 8) / 4;
      std::vector<uint32_t> idx(k), sizes(k);
      cuda::RandomkIndices(n, k, Context(), idx.data(), sizes.data());
      size_t covered = 0;
      for (size_t j = 0; j < k; ++j) {
        float v;
        std::memcpy(&v, payload.data() + 8 + 4 * j, 4);
        ASSERT_EQ(static_cast<uint32_t>(v), idx[j]) << "n " << n << " ratio " << ratio << " j " << j;
        covered += sizes[j];
      }
      EXPECT_EQ(covered, n);
    }
  }
}

// topk's radix select against the definition: the k largest |x| bit patterns, ties at the
// threshold taken in index order.
TEST_P(SharedMath, TopkRadixSelectKeepsTheKLargest) {
  const size_t n = GetParam();
  const std::vector<float> x = RandomGradient(n, 7, /*with_ties=*/true);
  for (double ratio : {0.001, 0.01, 0.3, 1.0}) {
    const size_t k = std::clamp<size_t>(static_cast<size_t>(std::ceil(ratio * n)), 1, n);
    uint32_t prefix = 0, need = static_cast<uint32_t>(k);
    for (int shift = 24; shift >= 0; shift -= 8) {
      uint32_t hist[256] = {};
      for (float v : x) {
        const uint32_t a = FloatBits(v) & 0x7fffffffu;
        if (RadixMatches(a, prefix, shift)) ++hist[(a >> shift) & 255u];
      }
      RadixSelectDigit(hist, shift, &prefix, &need);
    }
    std::vector<uint32_t> kept;
    uint32_t tie_rank = 0;
    for (size_t i = 0; i < n; ++i) {
      const uint32_t a = FloatBits(x[i]) & 0x7fffffffu;
      const bool tie = a == prefix;
      if (a > prefix || (tie && tie_rank < need)) kept.push_back(static_cast<uint32_t>(i));
      tie_rank += tie ? 1 : 0;
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

// The index section plan and varint writer against sparse_format.h's definitions.
TEST(SharedMathIndexSection, PlanAndVarintsFollowTheFormat) {
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
      std::vector<uint8_t> varints;
      for (size_t j = 0; j < k; ++j) {
        const uint32_t d = IndexDelta(idx.data(), j);
        max_delta = std::max(max_delta, d);
        const uint32_t len = VarintLength(d);
        varint_bytes += len;
        uint8_t buffer[5];
        WriteVarint(buffer, d);
        varints.insert(varints.end(), buffer, buffer + len);
        EXPECT_EQ(buffer[len - 1] & 0x80u, 0u);  // the last byte ends the varint
      }
      // Read the varints back (LEB128) to the indices.
      size_t p = 0;
      uint64_t expect_next = 0;
      for (size_t j = 0; j < k; ++j) {
        uint64_t d = 0;
        for (int shift = 0;; shift += 7) {
          d |= static_cast<uint64_t>(varints[p] & 0x7f) << shift;
          if ((varints[p++] & 0x80) == 0) break;
        }
        ASSERT_EQ(expect_next + d, idx[j]);
        expect_next = idx[j] + 1;
      }
      const IndexSectionPlan plan = ChooseIndexPlan(k, max_delta, varint_bytes);
      int width = 0;
      while (width < 32 && (max_delta >> width) != 0) ++width;
      const size_t packed = (k * width + 7) / 8;
      const size_t best = std::min({4 * k, packed, varint_bytes});
      EXPECT_EQ(plan.bytes, best);
      if (plan.encoding == 0) {
        EXPECT_EQ(best, 4 * k);
      } else if (plan.encoding == 1) {
        EXPECT_TRUE(packed == best && packed < 4 * k);
      } else {
        EXPECT_TRUE(varint_bytes < std::min(4 * k, packed));
      }
    }
  }
}

// The sparse message (topk, dgc) as the GPU writes it: values and indices of the kept
// elements in index order, the index plan, the section by the per-thread writers.
std::vector<uint8_t> HostSparseMessage(const std::vector<float>& x,
                                       const std::vector<bool>& keep) {
  std::vector<uint32_t> idx;
  std::vector<uint8_t> values;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!keep[i]) continue;
    idx.push_back(static_cast<uint32_t>(i));
    Append(values, x[i]);
  }
  const size_t k = idx.size();
  uint32_t max_delta = 0;
  size_t varint_bytes = 0;
  for (size_t j = 0; j < k; ++j) {
    max_delta = std::max(max_delta, IndexDelta(idx.data(), j));
    varint_bytes += VarintLength(IndexDelta(idx.data(), j));
  }
  const IndexSectionPlan plan = ChooseIndexPlan(k, max_delta, varint_bytes);
  std::vector<uint8_t> section;
  if (plan.encoding == 0) {
    for (uint32_t i : idx) AppendU32(section, i);
  } else if (plan.encoding == 1) {
    std::vector<uint32_t> words((plan.bytes + 3) / 4 + 1, 0u);
    for (size_t j = 0; j < k && plan.width > 0; ++j) {
      size_t word;
      uint32_t low, high;
      BitPackDeltaWords(j, plan.width, IndexDelta(idx.data(), j), &word, &low, &high);
      words[word] |= low;
      if (high != 0) words[word + 1] |= high;
    }
    section.resize(plan.bytes);
    std::memcpy(section.data(), words.data(), plan.bytes);
  } else {
    for (size_t j = 0; j < k; ++j) {
      uint8_t buffer[5];
      WriteVarint(buffer, IndexDelta(idx.data(), j));
      section.insert(section.end(), buffer, buffer + VarintLength(IndexDelta(idx.data(), j)));
    }
  }
  std::vector<uint8_t> out = {1, plan.encoding, plan.width, 0};
  AppendU32(out, static_cast<uint32_t>(x.size()));
  AppendU32(out, static_cast<uint32_t>(k));
  AppendU32(out, static_cast<uint32_t>(section.size()));
  out.insert(out.end(), values.begin(), values.end());
  out.insert(out.end(), section.begin(), section.end());
  return out;
}

TEST_P(SharedMath, TopkMessageAsTheCpuCodec) {
  const size_t n = GetParam();
  for (bool ties : {false, true}) {
    const std::vector<float> x = RandomGradient(n, 21, ties);
    for (const char* ratio : {"0.001", "0.01", "0.3", "1"}) {
      auto codec = Make("topk", {{"ratio", ratio}});
      const size_t k = std::clamp<size_t>(
          static_cast<size_t>(std::ceil(std::stod(ratio) * static_cast<double>(n))), 1, n);
      uint32_t prefix = 0, need = static_cast<uint32_t>(k);
      for (int shift = 24; shift >= 0; shift -= 8) {
        uint32_t hist[256] = {};
        for (float v : x) {
          const uint32_t a = FloatBits(v) & 0x7fffffffu;
          if (RadixMatches(a, prefix, shift)) ++hist[(a >> shift) & 255u];
        }
        RadixSelectDigit(hist, shift, &prefix, &need);
      }
      std::vector<bool> keep(n);
      uint32_t tie_rank = 0;
      for (size_t i = 0; i < n; ++i) {
        const uint32_t a = FloatBits(x[i]) & 0x7fffffffu;
        keep[i] = a > prefix || (a == prefix && tie_rank < need);
        tie_rank += a == prefix ? 1 : 0;
      }
      EXPECT_EQ(HostSparseMessage(x, keep), CpuEncode(*codec, x, Context()))
          << "ratio " << ratio << (ties ? " with ties" : "");
    }
  }
}

// dgc: the host-drawn sample, the threshold search as cuda_codecs.cu runs it, the message.
TEST_P(SharedMath, DgcMessageAsTheCpuCodec) {
  const size_t n = GetParam();
  const std::vector<float> x = RandomGradient(n, 22);
  for (double ratio : {0.01, 0.3}) {
    auto codec = Make("dgc", {{"ratio", std::to_string(ratio)}});
    const CodecContext ctx = Context();
    const std::vector<uint32_t> positions = cuda::DgcSamplePositions(n, ctx);
    std::vector<uint32_t> sample;
    for (uint32_t p : positions) sample.push_back(FloatBits(x[p]) & 0x7fffffffu);
    const double parsed_ratio = std::stod(std::to_string(ratio));
    const size_t m = std::clamp<size_t>(
        static_cast<size_t>(std::ceil(parsed_ratio * static_cast<double>(sample.size()))), 1,
        sample.size());
    std::nth_element(sample.begin(), sample.begin() + (m - 1), sample.end(), std::greater<>());
    const float kMinPositive = std::numeric_limits<float>::denorm_min();
    float threshold = std::max(BitsToFloat(sample[m - 1]), kMinPositive);
    auto count_at_least = [&](float t) {
      size_t c = 0;
      for (float v : x) c += (FloatBits(v) & 0x7fffffffu) >= (FloatBits(t) & 0x7fffffffu) ? 1 : 0;
      return c;
    };
    const double target = parsed_ratio * static_cast<double>(n);
    size_t count = count_at_least(threshold);
    for (int step = 0; step < 10; ++step) {
      if (count > 1.3 * target) {
        threshold *= 1.3f;
      } else if (count < 0.7 * target) {
        threshold = std::max(threshold * 0.7f, kMinPositive);
      } else {
        break;
      }
      count = count_at_least(threshold);
    }
    std::vector<bool> keep(n);
    for (size_t i = 0; i < n; ++i) {
      keep[i] = (FloatBits(x[i]) & 0x7fffffffu) >= (FloatBits(threshold) & 0x7fffffffu);
    }
    EXPECT_EQ(HostSparseMessage(x, keep), CpuEncode(*codec, x, ctx)) << "ratio " << ratio;
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, SharedMath, ::testing::Values(37, 1000, 4096, 100003));

}  // namespace
}  // namespace bytecomp::compress
