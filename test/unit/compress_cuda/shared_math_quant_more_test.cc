// The CUDA codecs' arithmetic without a GPU, for u8bit, dithering, inceptionn and sketch: each
// encoded and decoded on the host with the format headers' functions in the order
// compress/cuda/src/quant_more_kernels.cu calls them (one GPU thread after another; sums in
// another order than the CPU's), against the CPU codecs: the same bytes, the same decoded
// values, the fused residual over rounds, the same errors for malformed payloads. Built with
// -ffp-contract=off, as the kernels are with --fmad=false.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bytecomp/compress.h"
#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/dithering_format.h"
#include "bytecomp/compress/format/format_error.h"
#include "bytecomp/compress/format/inceptionn_format.h"
#include "bytecomp/compress/format/sketch_format.h"
#include "bytecomp/compress/format/u8bit_format.h"
#include "bytecomp/compress/memory_math.h"
#include "gtest/gtest.h"
#include "shared_math_util.h"

// A namespace of its own: the unity build compiles this file with the other shared-math tests.
namespace bytecomp::compress::quant_more_test {
namespace {

using namespace shared_math;

// A codec with its parameters, as the CPU registry and the host emulation take them.
struct Case {
  std::string name;
  CodecParams params;
};

std::string Describe(const Case& c) {
  std::string s = c.name;
  for (const auto& [key, value] : c.params) s += " " + key + "=" + value;
  return s;
}

// The parameters, defaults filled in by the CPU registry's specs.
CodecParams Filled(const Case& c) {
  auto filled = ValidateParams(c.name, CodecRegistry::Global().Find(c.name)->params, c.params);
  EXPECT_TRUE(filled.ok()) << filled.status();
  return filled.ok() ? *filled : CodecParams();
}

// CUB's radix order of floats (what the GPU's sort of sketch's sample gives): by the bits with
// the sign bit flipped for positives and all bits for negatives, so -0.0 comes before 0.0.
uint32_t RadixKey(float v) {
  const uint32_t bits = FloatBits(v);
  return (bits >> 31) ? ~bits : bits ^ 0x80000000u;
}

// The GPU encode on the host; decoded receives the values the fused memory uses.
std::vector<uint8_t> HostEncode(const Case& c, const std::vector<float>& x, const CodecContext& ctx,
                                std::vector<float>* decoded) {
  const CodecParams p = Filled(c);
  ParamReader r(p);
  const size_t n = x.size();
  decoded->assign(n, 0.0f);
  auto update = [&](size_t i, float, float d) { (*decoded)[i] = d; };
  std::vector<uint8_t> out;
  if (c.name == "u8bit") {
    // The reduction pass's largest |x|, then one code an element (U8bitEncodeKernel).
    const float max_abs = BitsToFloat(MaxAbsBitsOf(x));
    out.resize(u8bit::PayloadBytes(n));
    PutF32(out.data(), max_abs);
    for (size_t i = 0; i < n; ++i) {
      const uint8_t code = U8bitCode(x[i], max_abs);
      out[u8bit::kHeaderBytes + i] = code;
      update(i, x[i], U8bitValue(code, max_abs));
    }
  } else if (c.name == "dithering") {
    const auto k = static_cast<uint32_t>(r.Int("k"));
    const bool natural = r.String("partition") == "natural";
    const bool l2 = r.String("normalize") == "l2";
    const uint32_t level_bits = BitsFor(k);
    const float norm = dithering::Norm(l2, GpuOrderSum(x, true, 0), MaxAbsBitsOf(x));
    out.resize(dithering::PayloadBytes(n, level_bits));
    PutU32(out.data(), static_cast<uint32_t>(n));
    PutF32(out.data() + 4, norm);
    const CounterRandom random = MakeCounterRandom(ctx.seed, ctx.key, ctx.round, ctx.node);
    for (size_t g = 0; g < (n + 7) / 8; ++g) {
      dithering::EncodeGroup(x.data(), n, g, norm, k, level_bits, natural, random,
                             out.data() + dithering::kHeaderBytes, update);
    }
  } else if (c.name == "inceptionn") {
    const auto eb = static_cast<float>(r.Double("error_bound"));
    // InceptionnTagKernel, the exclusive scan of the counts, InceptionnValuesKernel.
    out.assign(inceptionn::MaxPayloadBytes(n), 0xee);  // what the kernels leave unwritten shows
    PutU32(out.data(), static_cast<uint32_t>(n));
    const size_t groups = inceptionn::TagBytes(n);
    std::vector<inceptionn::TagCounts> before(groups + 1);
    for (size_t g = 0; g < groups; ++g) {
      inceptionn::TagCounts counts;
      out[4 + g] = inceptionn::EncodeTagByte(x.data(), n, g, eb, &counts);
      before[g + 1] = before[g] + counts;
    }
    const inceptionn::TagCounts totals = before[groups];
    for (size_t g = 0; g < groups; ++g) {
      inceptionn::EncodeValues(x.data(), n, g, eb, totals, before[g], out.data(), update);
    }
    out.resize(inceptionn::PayloadBytes(n, totals));
  } else if (c.name == "sketch") {
    const auto q = static_cast<uint32_t>(r.Int("quantiles"));
    // The sample, sorted in CUB's radix order; the search table.
    const size_t m = sketch::SampleSize(n);
    std::vector<float> sample(m);
    for (size_t s = 0; s < m; ++s) sample[s] = x[sketch::SampleIndex(s, n, m)];
    std::sort(sample.begin(), sample.end(),
              [](float a, float b) { return RadixKey(a) < RadixKey(b); });
    const size_t padded = sketch::SearchSize(q);
    std::vector<float> table(padded);
    for (size_t slot = 0; slot < padded; ++slot) {
      table[slot] = sketch::SearchEntry(sample.data(), m, q, slot);
    }
    // The ids, and the sums in another order than the CPU's (which adds in element order): per
    // block of 256 threads of 8 elements, then the blocks' sums. The GPU's atomics have no fixed
    // order; like a norm, the rounded mean is the same unless the sums straddle a rounding
    // boundary of the float.
    out.assign(sketch::PayloadBytes(n, q), 0);
    PutU32(out.data(), static_cast<uint32_t>(n));
    uint8_t* packed = out.data() + sketch::IdsStart(q);
    std::vector<double> sums(q, 0.0), block_sums(q, 0.0);
    std::vector<uint64_t> counts(q, 0);
    const size_t groups = (n + 7) / 8;
    for (size_t g = 0; g < groups; ++g) {
      sketch::EncodeGroup(x.data(), n, g, table.data(), padded, q, packed,
                          [&](size_t, float v, uint32_t id) {
                            block_sums[id] += static_cast<double>(v);
                            ++counts[id];
                          });
      if ((g + 1) % 256 == 0 || g + 1 == groups) {
        for (uint32_t b = 0; b < q; ++b) sums[b] += block_sums[b];
        std::fill(block_sums.begin(), block_sums.end(), 0.0);
      }
    }
    for (uint32_t b = 0; b < q; ++b) {
      PutF32(out.data() + 4 + 4 * b, sketch::BucketMean(sums[b], counts[b]));
    }
    // SketchFeedbackKernel: the decoded values from the payload.
    for (size_t g = 0; g < groups; ++g) {
      EXPECT_TRUE(sketch::DecodeGroup(out.data(), n, g, q, [&](size_t i, float v) {
                    (*decoded)[i] = v;
                  }).ok());
    }
  } else {
    ADD_FAILURE() << "no host emulation of " << c.name;
  }
  return out;
}

// The GPU decode on the host: the checks the host code makes on the header, then the kernels'
// per-thread work; the first error a kernel records, as the codec reports it.
absl::StatusOr<std::vector<float>> HostDecode(const Case& c, const std::vector<uint8_t>& payload,
                                              size_t n) {
  const CodecParams p = Filled(c);
  ParamReader r(p);
  const uint8_t* in = payload.data();
  const size_t bytes = payload.size();
  std::vector<float> out(n);
  FormatError e;
  auto record = [&e](const FormatError& f) {
    if (e.ok()) e = f;
  };
  if (c.name == "u8bit") {
    record(u8bit::CheckHeader(in, bytes, n));
    const float max_abs = e.ok() ? GetF32(in) : 0.0f;
    for (size_t i = 0; e.ok() && i < n; ++i) {
      const uint8_t code = in[u8bit::kHeaderBytes + i];
      record(u8bit::CheckCode(code, i));
      out[i] = U8bitValue(code, max_abs);
    }
  } else if (c.name == "dithering") {
    const auto k = static_cast<uint32_t>(r.Int("k"));
    const bool natural = r.String("partition") == "natural";
    const uint32_t level_bits = BitsFor(k);
    record(CheckSizeAndCount(in, bytes, dithering::PayloadBytes(n, level_bits), n));
    const float norm = e.ok() ? GetF32(in + 4) : 0.0f;
    if (e.ok()) record(CheckHeaderValue(norm, kNormValue, true));
    for (size_t g = 0; e.ok() && g < (n + 7) / 8; ++g) {
      record(dithering::DecodeGroup(in + dithering::kHeaderBytes, n, g, norm, k, level_bits,
                                    natural, out.data()));
    }
  } else if (c.name == "inceptionn") {
    const auto eb = static_cast<float>(r.Double("error_bound"));
    record(inceptionn::CheckHeader(in, bytes, n));
    const size_t groups = e.ok() ? inceptionn::TagBytes(n) : 0;
    // InceptionnCountKernel (the padding checked by the last byte's thread), the scan, the
    // readback of the totals and the size check, InceptionnDecodeKernel.
    std::vector<inceptionn::TagCounts> before(groups + 1);
    for (size_t g = 0; g < groups; ++g) {
      before[g + 1] = before[g] + inceptionn::CountTagByte(in[4 + g], n, g);
      if (g + 1 == groups) record(inceptionn::CheckPadding(in + 4, n));
    }
    if (e.ok()) record(CheckPayloadSize(bytes, inceptionn::PayloadBytes(n, before[groups]), n));
    for (size_t g = 0; e.ok() && g < groups; ++g) {
      record(inceptionn::DecodeValues(in, n, g, eb, before[groups], before[g], out.data()));
    }
  } else if (c.name == "sketch") {
    const auto q = static_cast<uint32_t>(r.Int("quantiles"));
    record(CheckSizeAndCount(in, bytes, sketch::PayloadBytes(n, q), n));
    // SketchCheckMeansKernel, then SketchDecodeKernel.
    for (uint32_t b = 0; e.ok() && b < q; ++b) record(sketch::CheckMean(GetF32(in + 4 + 4 * b), b));
    for (size_t g = 0; e.ok() && g < (n + 7) / 8; ++g) {
      record(sketch::DecodeGroup(in, n, g, q, [&](size_t i, float v) { out[i] = v; }));
    }
  }
  if (!e.ok()) return FormatErrorStatus(c.name, e);
  return out;
}

const std::vector<Case>& Cases() {
  static const std::vector<Case>* const cases = new std::vector<Case>{
      {"u8bit", {}},
      {"dithering", {}},
      {"dithering", {{"k", "5"}, {"partition", "natural"}, {"normalize", "l2"}}},
      {"dithering", {{"k", "127"}, {"partition", "natural"}}},
      {"dithering", {{"k", "1"}, {"normalize", "l2"}}},
      {"dithering", {{"k", "300"}}},
      {"dithering", {{"k", "32767"}, {"normalize", "l2"}}},  // 16-bit codes
      {"inceptionn", {}},
      {"inceptionn", {{"error_bound", "0.1"}}},
      {"inceptionn", {{"error_bound", "1e-20"}}},  // every nonzero value an fp32
      {"inceptionn", {{"error_bound", "1e25"}}},   // every value dropped
      {"sketch", {}},
      {"sketch", {{"quantiles", "5"}}},
      {"sketch", {{"quantiles", "2"}}},
      {"sketch", {{"quantiles", "3000"}}},  // above the kernel's shared-memory buckets
      {"sketch", {{"quantiles", "65536"}}},
  };
  return *cases;
}

class SharedMathQuantMore : public ::testing::TestWithParam<size_t> {};

TEST_P(SharedMathQuantMore, SameBytesAndDecodedValuesAsTheCpuCodecs) {
  const size_t n = GetParam();
  for (bool ties : {false, true}) {
    const std::vector<float> x = RandomGradient(n, ties ? 21 : 20, ties);
    for (const Case& c : Cases()) {
      auto codec = Make(c.name, c.params);
      ASSERT_NE(codec, nullptr);
      const CodecContext ctx = Context();
      std::vector<float> decoded;
      const std::vector<uint8_t> host = HostEncode(c, x, ctx, &decoded);
      const std::vector<uint8_t> cpu = CpuEncode(*codec, x, ctx);
      ASSERT_EQ(host, cpu) << Describe(c) << (ties ? ", ties" : "");
      // The values the fused residual uses are the CPU decoder's, bit for bit, and so are the
      // GPU decoder's.
      const std::vector<float> cpu_decoded = CpuDecode(*codec, cpu, n, ctx);
      ExpectSameBits(decoded, cpu_decoded);
      auto gpu_decoded = HostDecode(c, cpu, n);
      ASSERT_TRUE(gpu_decoded.ok()) << Describe(c) << ": " << gpu_decoded.status();
      ExpectSameBits(*gpu_decoded, cpu_decoded);
    }
  }
}

// The fused residual over rounds: compensate, encode and update as the kernels do
// (memory_math.h), against the CPU's EncodeWithMemory.
TEST_P(SharedMathQuantMore, FusedResidualMatchesEncodeWithMemory) {
  const size_t n = GetParam();
  for (const Case& c : Cases()) {
    auto codec = Make(c.name, c.params);
    ASSERT_NE(codec, nullptr);
    auto memory = CreateMemory("residual", {{"beta", "0.9"}, {"gamma", "1.0"}});
    ASSERT_TRUE(memory.ok()) << memory.status();
    std::vector<float> state(n, 0.0f), compensated(n), decoded, cpu_compensated, cpu_decoded;
    for (uint32_t round = 0; round < 4; ++round) {
      const std::vector<float> g = RandomGradient(n, 200 + round);
      const CodecContext ctx = Context(round);
      for (size_t i = 0; i < n; ++i) {
        compensated[i] = ResidualCompensate(g[i], state[i], 0.9f, 1.0f);
      }
      const std::vector<uint8_t> host = HostEncode(c, compensated, ctx, &decoded);
      for (size_t i = 0; i < n; ++i) state[i] = ResidualUpdate(compensated[i], decoded[i]);
      std::vector<uint8_t> cpu(codec->MaxEncodedBytes(n));
      auto bytes = EncodeWithMemory(*codec, memory->get(), g, ctx, absl::MakeSpan(cpu),
                                    cpu_compensated, cpu_decoded);
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      cpu.resize(*bytes);
      ASSERT_EQ(host, cpu) << Describe(c) << ", round " << round;
      ExpectSameBits(decoded, cpu_decoded);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, SharedMathQuantMore, ::testing::Values(37, 1000, 4099, 100003));

// An empty tensor: the header alone (sketch: the count and q zero means).
TEST(SharedMathQuantMore, EmptyInput) {
  for (const Case& c : Cases()) {
    auto codec = Make(c.name, c.params);
    std::vector<float> decoded;
    const std::vector<uint8_t> host = HostEncode(c, {}, Context(), &decoded);
    EXPECT_EQ(host, CpuEncode(*codec, {}, Context())) << Describe(c);
    EXPECT_TRUE(HostDecode(c, host, 0).ok()) << Describe(c);
  }
}

// A malformed payload: the GPU decoder's checks (host code and kernels) report what the CPU
// decoder reports, word for word.
struct Corruption {
  Case codec;
  const char* what;
  std::function<void(std::vector<uint8_t>&, size_t n)> apply;
};

void SetF32(std::vector<uint8_t>& p, size_t at, float v) { std::memcpy(p.data() + at, &v, 4); }

TEST(SharedMathQuantMoreDecode, MalformedPayloadsAreReportedAsTheCpuCodecsReportThem) {
  const float nan = std::nanf("");
  const Case u8bit{"u8bit", {}}, dithering{"dithering", {}}, inceptionn{"inceptionn", {}};
  const Case dithering10{"dithering", {{"k", "10"}}};  // 4 level bits: levels 11..15 invalid
  const Case sketch5{"sketch", {{"quantiles", "5"}}}, sketch{"sketch", {}};
  // inceptionn of the gradient below: the tags end at 4 + ceil(1001/4) = 255.
  const std::vector<Corruption> corruptions = {
      {u8bit, "one byte short", [](auto& p, size_t) { p.pop_back(); }},
      {u8bit, "a NaN max", [nan](auto& p, size_t) { SetF32(p, 0, nan); }},
      {u8bit, "a negative max", [](auto& p, size_t) { SetF32(p, 0, -1.0f); }},
      {u8bit, "a negative zero", [](auto& p, size_t) { p[4 + 333] = 0x80; }},
      {dithering, "a wrong count", [](auto& p, size_t) { p[0] ^= 1; }},
      {dithering, "an Inf norm", [](auto& p, size_t) { SetF32(p, 4, INFINITY); }},
      {dithering, "a negative norm", [](auto& p, size_t) { SetF32(p, 4, -3.0f); }},
      {dithering10, "a level above k", [](auto& p, size_t) { p[8 + 50] |= 0x1f; }},  // code 80
      {dithering, "a padding bit", [](auto& p, size_t) { p.back() |= 0x80; }},
      {inceptionn, "shorter than the tags", [](auto& p, size_t) { p.resize(100); }},
      {inceptionn, "a wrong count", [](auto& p, size_t) { p[1] ^= 1; }},
      {inceptionn, "a padding tag", [](auto& p, size_t) { p[4 + 250] |= 0x40; }},
      {inceptionn, "one byte too many", [](auto& p, size_t) { p.push_back(0); }},
      {inceptionn, "a tag that claims another value", [](auto& p, size_t) { p[4 + 9] ^= 0x03; }},
      {inceptionn, "a NaN fp32 value", [nan](auto& p, size_t) { SetF32(p, p.size() - 4, nan); }},
      {sketch, "a wrong count", [](auto& p, size_t) { p[0] ^= 2; }},
      {sketch, "one byte short", [](auto& p, size_t) { p.pop_back(); }},
      {sketch, "a NaN mean", [nan](auto& p, size_t) { SetF32(p, 4 + 4 * 17, nan); }},
      {sketch5, "an id above q", [](auto& p, size_t) { p[4 + 20 + 30] |= 0x07; }},
      {sketch5, "a padding bit", [](auto& p, size_t) { p.back() |= 0x80; }},
  };
  const size_t n = 1001;  // 3003 sketch5 bits and 5005 dithering bits: padding bits exist
  const std::vector<float> x = RandomGradient(n, 6);
  for (const Corruption& c : corruptions) {
    auto codec = Make(c.codec.name, c.codec.params);
    std::vector<uint8_t> payload = CpuEncode(*codec, x, Context());
    c.apply(payload, n);
    const std::string cpu = CpuDecodeStatus(*codec, payload, n, Context());
    auto gpu = HostDecode(c.codec, payload, n);
    EXPECT_NE(cpu, "OK") << Describe(c.codec) << ", " << c.what;
    EXPECT_EQ(gpu.status().ToString(), cpu) << Describe(c.codec) << ", " << c.what;
  }
}

// inceptionn's multiples overflow only with a huge error bound and a forged multiple.
TEST(SharedMathQuantMoreDecode, InceptionnMultipleThatOverflows) {
  const Case c{"inceptionn", {{"error_bound", "1e37"}}};
  auto codec = Make(c.name, c.params);
  std::vector<float> x(9, 0.0f);
  x[4] = 3e38f;  // 3e38 / 2e37 = 15 steps: an int8
  std::vector<uint8_t> payload = CpuEncode(*codec, x, Context());
  ASSERT_EQ(payload.size(), 4u + 3 + 1);
  payload.back() = 100;  // 100 * 2e37 overflows
  const std::string cpu = CpuDecodeStatus(*codec, payload, x.size(), Context());
  EXPECT_NE(cpu.find("overflows"), std::string::npos) << cpu;
  EXPECT_EQ(HostDecode(c, payload, x.size()).status().ToString(), cpu);
}

// The parameter checks beyond the specs' ranges, which both codecs' factories make.
TEST(SharedMathQuantMoreFormat, ParameterChecks) {
  EXPECT_TRUE(dithering::CheckParams(127, true).ok());
  EXPECT_TRUE(dithering::CheckParams(32767, false).ok());
  EXPECT_EQ(dithering::CheckParams(128, true).message(),
            CreateCodec("dithering", {{"k", "128"}, {"partition", "natural"}}).status().message());
  EXPECT_TRUE(inceptionn::CheckParams(1e-37).ok());
  EXPECT_EQ(inceptionn::CheckParams(1e38).message(),
            CreateCodec("inceptionn", {{"error_bound", "1e38"}}).status().message());
}

// The groups of 8 codes against the CPU's packing, at every width the codecs use.
TEST(SharedMathQuantMoreFormat, CodeGroupsAtEveryWidth) {
  for (uint32_t bits = 1; bits <= 16; ++bits) {
    for (size_t n : {1, 7, 8, 9, 61}) {
      std::vector<uint32_t> codes(n);
      for (size_t i = 0; i < n; ++i)
        codes[i] = static_cast<uint32_t>(i * 2654435761u) >> (32 - bits);
      std::vector<uint8_t> packed(PackedBytes(n, static_cast<int>(bits)), 0xff);
      for (size_t g = 0; g < (n + 7) / 8; ++g) {
        PutCodeGroup(n, g, bits, packed.data(), [&](size_t i) { return codes[i]; });
      }
      std::vector<uint8_t> expected(packed.size() + 8);
      BitWriter w(expected.data());
      for (uint32_t code : codes) w.Put(code, static_cast<int>(bits));
      w.Finish();
      expected.resize(packed.size());
      ASSERT_EQ(packed, expected) << bits << " bits, n " << n;
      EXPECT_TRUE(PaddingBitsZero(packed.data(), n, static_cast<int>(bits)));
      for (size_t g = 0; g < (n + 7) / 8; ++g) {
        uint32_t group[8];
        GetCodeGroup(packed.data(), n, g, bits, group);
        for (size_t j = 0; j < 8; ++j) {
          EXPECT_EQ(group[j], 8 * g + j < n ? codes[8 * g + j] : 0u) << bits << " bits, n " << n;
        }
      }
    }
  }
}

}  // namespace
}  // namespace bytecomp::compress::quant_more_test
