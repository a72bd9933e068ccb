// The CUDA codecs' arithmetic without a GPU: the dense codecs (fp16, bf16, the sign codecs,
// qsgd, terngrad, natural) encoded and decoded on the host with the format headers' functions
// in the order compress/cuda/src/*_kernels.cu calls them (one GPU thread after another; sums
// in the GPU's order), against the CPU codecs: the same bytes, the same decoded values, the
// same errors for malformed payloads. Built with -ffp-contract=off, as the kernels are with
// --fmad=false.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bytecomp/compress.h"
#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/format_error.h"
#include "bytecomp/compress/format/half_format.h"
#include "bytecomp/compress/format/natural_format.h"
#include "bytecomp/compress/format/qsgd_format.h"
#include "bytecomp/compress/format/sign_format.h"
#include "bytecomp/compress/format/terngrad_format.h"
#include "bytecomp/compress/memory_math.h"
#include "gtest/gtest.h"
#include "shared_math_util.h"

namespace bytecomp::compress {
namespace {

using namespace shared_math;

// The parameters that the host emulations take (the codec's defaults unless a test says).
struct Params {
  uint32_t quantum = 127;
  size_t bucket = 128;
  sign::OnebitScaling scaling = sign::OnebitScaling::kMeans;
};

int SignValuesOf(absl::string_view name) {
  return name == "efsignsgd" ? 1 : (name == "onebit" ? 2 : 0);
}

// sign_kernels.cu's SignPackKernel: a word of 32 WordBit a warp, stored by StoreWord.
std::vector<uint8_t> HostSignBits(const std::vector<float>& x, std::vector<float>* decoded,
                                  sign::SignValues values) {
  const size_t n = x.size();
  std::vector<uint8_t> bits(sign::SignBytes(n));
  for (size_t base = 0; base < n; base += 32) {
    uint32_t word = 0;
    for (uint32_t lane = 0; lane < 32 && base + lane < n; ++lane) {
      word |= sign::WordBit(x[base + lane], lane);
      if (decoded) (*decoded)[base + lane] = sign::Decoded(x[base + lane], values);
    }
    sign::StoreWord(bits.data(), n, base, word);
  }
  return bits;
}

// The GPU encode of `name` on the host; decoded receives the values the fused memory uses.
std::vector<uint8_t> HostEncode(absl::string_view name, const std::vector<float>& x,
                                const CodecContext& ctx, std::vector<float>* decoded,
                                const Params& p = {}) {
  const size_t n = x.size();
  decoded->assign(n, 0.0f);
  std::vector<uint8_t> out;
  const CounterRandom random = MakeCounterRandom(ctx.seed, ctx.key, ctx.round, ctx.node);
  const uint32_t max_bits = MaxAbsBitsOf(x);
  auto update = [&](size_t i, float, float d) { (*decoded)[i] = d; };
  if (name == "fp16" || name == "bf16") {
    out.resize(half::PayloadBytes(n));
    for (size_t i = 0; i < n; ++i) {
      const bool bf = name == "bf16";
      const uint16_t h = bf ? half::SaturatingBFloat16Bits(x[i]) : half::SaturatingHalfBits(x[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
      (*decoded)[i] = bf ? BFloat16BitsToFloat(h) : HalfBitsToFloat(h);
    }
  } else if (name == "signsgd" || name == "efsignsgd" || name == "onebit") {
    const int count = SignValuesOf(name);
    sign::SignSums sums;
    sums.non_negative = GpuOrderSum(x, false, 1);
    sums.negative = GpuOrderSum(x, false, -1);
    for (float v : x) sums.negative_count += v < 0.0f ? 1 : 0;
    sign::SignValues values;
    if (name == "efsignsgd") {
      const float scale = sign::EfSignScale(sums, n);
      values = sign::SignValues{scale, -scale};
    } else if (name == "onebit") {
      values = sign::OnebitValues(p.scaling, sums, n);
    }
    out.resize(sign::HeaderBytes(count));
    sign::WriteHeader(out.data(), static_cast<uint32_t>(n), count, values);
    const std::vector<uint8_t> bits = HostSignBits(x, decoded, values);
    out.insert(out.end(), bits.begin(), bits.end());
  } else if (name == "qsgd") {
    const uint32_t level_bits = BitsFor(p.quantum);
    out.resize(qsgd::PayloadBytes(n, p.bucket, level_bits));
    PutU32(out.data(), static_cast<uint32_t>(n));
    std::vector<float> norms(qsgd::Buckets(n, p.bucket));
    for (size_t b = 0; b < norms.size(); ++b) {
      const std::vector<float> part(x.begin() + b * p.bucket,
                                    x.begin() + std::min(n, (b + 1) * p.bucket));
      norms[b] = qsgd::NormFromSumOfSquares(GpuOrderSum(part, true, 0));
      PutF32(out.data() + 4 + 4 * b, norms[b]);
    }
    uint8_t* packed = out.data() + 4 + 4 * norms.size();
    if (qsgd::CodesAreBytes(level_bits)) {  // a thread an element
      for (size_t i = 0; i < n; ++i) {
        packed[i] =
            qsgd::EncodeByte(x.data(), i, p.bucket, norms.data(), p.quantum, random, update);
      }
    } else {
      for (size_t g = 0; g < (n + 7) / 8; ++g) {
        qsgd::EncodeGroup(x.data(), n, g, p.bucket, norms.data(), p.quantum, level_bits, random,
                          packed, update);
      }
    }
  } else if (name == "terngrad") {
    const terngrad::ClipScale cs = terngrad::ClipAndScale(GpuOrderSum(x, true, 0), n, max_bits);
    out.resize(8);
    PutU32(out.data(), static_cast<uint32_t>(n));
    PutF32(out.data() + 4, cs.scale);
    for (size_t g = 0; g < terngrad::CodeBytes(n); ++g) {
      out.push_back(terngrad::EncodeByte(x.data(), n, g, cs.clip, cs.scale, random, update));
    }
  } else if (name == "natural") {
    const uint32_t exponent_low = NaturalExponentLow(max_bits >> 23);
    out.push_back(static_cast<uint8_t>(exponent_low));
    for (size_t i = 0; i < n; ++i) {
      const uint8_t code =
          NaturalCode(x[i], exponent_low, RandomBits(random, static_cast<uint32_t>(i)));
      EXPECT_TRUE(natural::CheckCode(code, exponent_low).ok());
      out.push_back(code);
      (*decoded)[i] = NaturalValue(code, exponent_low);
    }
  } else {
    ADD_FAILURE() << "no host emulation of " << name;
  }
  return out;
}

// The GPU decode of `name` on the host: the checks the host code makes on the header, then the
// kernels' per-element work; the first error a kernel records, as the codec reports it.
absl::StatusOr<std::vector<float>> HostDecode(absl::string_view name,
                                              const std::vector<uint8_t>& payload, size_t n,
                                              const Params& p = {}) {
  const uint8_t* in = payload.data();
  const size_t bytes = payload.size();
  std::vector<float> out(n);
  FormatError e;
  auto record = [&e](const FormatError& r) {
    if (e.ok()) e = r;
  };
  if (name == "fp16" || name == "bf16") {
    record(CheckPayloadSize(bytes, half::PayloadBytes(n), n));
    for (size_t i = 0; e.ok() && i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, in + 2 * i, 2);
      if (!half::IsFiniteHalfBits(h, name == "bf16")) {
        record(MakeFormatError(FormatErrorCode::kPayloadNotFinite));
      }
      out[i] = name == "bf16" ? BFloat16BitsToFloat(h) : HalfBitsToFloat(h);
    }
  } else if (name == "signsgd" || name == "efsignsgd" || name == "onebit" || name == "signum") {
    const int count = SignValuesOf(name);
    record(sign::CheckHeader(in, bytes, n, count));
    if (e.ok()) {
      const uint8_t* bits = in + sign::HeaderBytes(count);
      record(sign::CheckPadding(bits, n));
      const sign::SignValues v = sign::ReadValues(in, count);
      for (size_t i = 0; i < n; ++i) out[i] = ((bits[i / 8] >> (i % 8)) & 1u) ? v.set : v.clear;
    }
  } else if (name == "qsgd") {
    const uint32_t level_bits = BitsFor(p.quantum);
    record(CheckSizeAndCount(in, bytes, qsgd::PayloadBytes(n, p.bucket, level_bits), n));
    if (qsgd::CodesAreBytes(level_bits)) {
      for (size_t i = 0; e.ok() && i < n; ++i) {
        record(qsgd::DecodeByte(in + 4, n, i, p.bucket, p.quantum, out.data()));
      }
    } else {
      for (size_t g = 0; e.ok() && g < (n + 7) / 8; ++g) {
        record(qsgd::DecodeGroup(in + 4, n, g, p.bucket, p.quantum, level_bits, out.data()));
      }
    }
  } else if (name == "terngrad") {
    record(CheckSizeAndCount(in, bytes, terngrad::PayloadBytes(n), n));
    const float scale = e.ok() ? GetF32(in + 4) : 0.0f;
    if (e.ok()) record(CheckHeaderValue(scale, kScaleValue, true));
    for (size_t g = 0; e.ok() && g < terngrad::CodeBytes(n); ++g) {
      record(terngrad::DecodeByte(in[8 + g], n, g, scale, out.data()));
    }
  } else if (name == "natural") {
    record(CheckPayloadSize(bytes, natural::PayloadBytes(n), n));
    const uint32_t exponent_low = e.ok() ? in[0] : 0;
    if (e.ok()) record(natural::CheckExponentLow(exponent_low));
    for (size_t i = 0; e.ok() && i < n; ++i) {
      record(natural::CheckCode(in[1 + i], exponent_low));
      out[i] = NaturalValue(in[1 + i], exponent_low);
    }
  }
  if (!e.ok()) return FormatErrorStatus(name, e);
  return out;
}

const char* const kDenseCodecs[] = {"fp16",   "bf16", "signsgd",  "efsignsgd",
                                    "onebit", "qsgd", "terngrad", "natural"};

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
    // The values the fused error feedback uses are the CPU decoder's, bit for bit, and so are
    // the GPU decoder's.
    const std::vector<float> cpu_decoded = CpuDecode(*codec, cpu, n, ctx);
    ExpectSameBits(decoded, cpu_decoded);
    auto gpu_decoded = HostDecode(name, cpu, n);
    ASSERT_TRUE(gpu_decoded.ok()) << name << ": " << gpu_decoded.status();
    ExpectSameBits(*gpu_decoded, cpu_decoded);
  }
}

TEST_P(SharedMath, OnebitScalings) {
  const size_t n = GetParam();
  const std::vector<float> x = RandomGradient(n, 2);
  for (const char* scaling : {"means", "l1", "none"}) {
    auto codec = Make("onebit", {{"scaling", scaling}});
    Params p;
    p.scaling = sign::OnebitScalingNamed(scaling);
    std::vector<float> decoded;
    const std::vector<uint8_t> host = HostEncode("onebit", x, Context(), &decoded, p);
    ASSERT_EQ(host, CpuEncode(*codec, x, Context())) << scaling;
    ExpectSameBits(decoded, CpuDecode(*codec, host, n, Context()));
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
      for (size_t i = 0; i < n; ++i) {
        momentum[i] = SignumBlend(g[i], momentum[i], 1.0f - 0.9f, 0.9f);
      }
    }
    std::vector<float> decoded;
    EXPECT_EQ(HostEncode("signsgd", momentum, Context(round), &decoded),
              CpuEncode(*signum, g, Context(round)))
        << "round " << round;
  }
}

TEST_P(SharedMath, QsgdLevelsAndBuckets) {
  const size_t n = GetParam();
  const std::vector<float> x = RandomGradient(n, 4);
  for (auto [quantum, bucket] :
       {std::pair<uint32_t, size_t>{127, 128}, {64, 33}, {5, 100}, {300, 64}, {1, 7}}) {
    auto codec = Make("qsgd", {{"quantum_num", std::to_string(quantum)},
                               {"bucket_size", std::to_string(bucket)}});
    Params p;
    p.quantum = quantum;
    p.bucket = bucket;
    std::vector<float> decoded;
    const std::vector<uint8_t> host = HostEncode("qsgd", x, Context(), &decoded, p);
    const std::vector<uint8_t> cpu = CpuEncode(*codec, x, Context());
    ASSERT_EQ(host, cpu) << "quantum " << quantum << " bucket " << bucket;
    const std::vector<float> cpu_decoded = CpuDecode(*codec, cpu, n, Context());
    ExpectSameBits(decoded, cpu_decoded);
    auto gpu_decoded = HostDecode("qsgd", cpu, n, p);
    ASSERT_TRUE(gpu_decoded.ok()) << gpu_decoded.status();
    ExpectSameBits(*gpu_decoded, cpu_decoded);
  }
}

// The fused memories over several rounds: compensate, encode and update as the kernels do
// (memory_math.h), against the CPU's EncodeWithMemory with the registered memories.
TEST_P(SharedMath, FusedMemoriesMatchEncodeWithMemory) {
  const size_t n = GetParam();
  for (const char* name : kDenseCodecs) {
    for (const char* memory_name : {"residual", "efsignsgd"}) {
      const bool residual = std::string(memory_name) == "residual";
      if (!residual && std::string(name) != "efsignsgd") continue;
      auto codec = Make(name);
      auto memory = CreateMemory(memory_name);
      ASSERT_TRUE(memory.ok()) << memory.status();
      std::vector<float> state(n, 0.0f), compensated(n), decoded, cpu_compensated, cpu_decoded;
      for (uint32_t round = 0; round < 4; ++round) {
        const std::vector<float> g = RandomGradient(n, 100 + round);
        CodecContext ctx = Context(round);
        ctx.learning_rate = round == 2 ? 0.05f : 0.0f;  // efsignsgd: the context's or 0.1
        const float lr = ctx.learning_rate > 0.0f ? ctx.learning_rate : 0.1f;
        for (size_t i = 0; i < n; ++i) {
          if (residual) {
            compensated[i] = ResidualCompensate(g[i], state[i], 1.0f, 1.0f);
          } else {
            compensated[i] = round == 0 ? g[i] : EfSignCompensate(g[i], state[i], 1.0f / lr);
          }
        }
        const std::vector<uint8_t> host = HostEncode(name, compensated, ctx, &decoded);
        for (size_t i = 0; i < n; ++i) {
          state[i] = residual ? ResidualUpdate(compensated[i], decoded[i])
                              : EfSignResidual(compensated[i], decoded[i], lr);
        }
        std::vector<uint8_t> cpu(codec->MaxEncodedBytes(n));
        auto bytes = EncodeWithMemory(*codec, memory->get(), g, ctx, absl::MakeSpan(cpu),
                                      cpu_compensated, cpu_decoded);
        ASSERT_TRUE(bytes.ok()) << bytes.status();
        cpu.resize(*bytes);
        ASSERT_EQ(host, cpu) << name << " with " << memory_name << ", round " << round;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, SharedMath, ::testing::Values(37, 1000, 4096, 100003));

// A malformed payload: the GPU decoder's checks (host code and kernels) report what the CPU
// decoder reports, word for word.
struct Corruption {
  const char* codec;
  const char* what;
  std::function<void(std::vector<uint8_t>&, size_t n)> apply;
  uint32_t quantum = 127;  // qsgd
};

TEST(SharedMathDecode, MalformedPayloadsAreReportedAsTheCpuCodecsReportThem) {
  const float nan = std::nanf("");
  const size_t norms = 4 + 4 * ((1001 + 127) / 128);  // qsgd's codes start there
  const std::vector<Corruption> corruptions = {
      {"fp16", "a NaN half", [](auto& p, size_t) { p[6] = 0xff, p[7] = 0x7f; }},
      {"bf16", "an Inf", [](auto& p, size_t) { p[2] = 0x80, p[3] = 0x7f; }},
      {"fp16", "one byte short", [](auto& p, size_t) { p.pop_back(); }},
      {"signsgd", "a wrong count", [](auto& p, size_t) { p[0] ^= 1; }},
      {"signsgd", "a padding bit", [](auto& p, size_t) { p.back() |= 0x80; }},
      {"efsignsgd", "a negative scale", [](auto& p, size_t) { SetF32(p, 4, -2.0f); }},
      {"onebit", "a NaN value of bit 0", [nan](auto& p, size_t) { SetF32(p, 4, nan); }},
      {"onebit", "a positive value of bit 1", [](auto& p, size_t) { SetF32(p, 8, 0.5f); }},
      {"onebit", "one byte too many", [](auto& p, size_t) { p.push_back(0); }},
      {"qsgd", "a NaN norm", [nan](auto& p, size_t) { SetF32(p, 4 + 4 * 2, nan); }},
      {"qsgd", "a negative norm", [](auto& p, size_t) { SetF32(p, 4 + 4 * 3, -1.0f); }},
      {"qsgd", "a level above quantum_num", [norms](auto& p, size_t) { p[norms + 40] = 0x7f; },
       100},
      {"qsgd", "a padding code", [](auto& p, size_t) { p.back() |= 0x80; }, 5},
      {"terngrad", "a code 3", [](auto& p, size_t) { p[8 + 17] = 0x03; }},
      {"terngrad", "a padding code", [](auto& p, size_t) { p.back() |= 0x40; }},
      {"terngrad", "an Inf scale", [](auto& p, size_t) { SetF32(p, 4, INFINITY); }},
      {"natural", "exponent_low 0", [](auto& p, size_t) { p[0] = 0; }},
      {"natural", "exponent_low 255", [](auto& p, size_t) { p[0] = 255; }},
      {"natural", "a negative zero", [](auto& p, size_t) { p[1 + 77] = 0x80; }},
      {"natural", "a code beyond the float range",
       [](auto& p, size_t) {
         std::fill(p.begin() + 1, p.end(), 0);
         p[0] = 200;
         p[1 + 5] = 0x7f;
       }},
  };
  const size_t n = 1001;  // not a multiple of 8 or 4: padding bits exist
  const std::vector<float> x = RandomGradient(n, 6);
  for (const Corruption& c : corruptions) {
    CodecParams params;
    Params p;
    if (std::string(c.codec) == "qsgd") {
      params["quantum_num"] = std::to_string(c.quantum);
      p.quantum = c.quantum;
    }
    auto codec = Make(c.codec, params);
    std::vector<uint8_t> payload = CpuEncode(*codec, x, Context());
    c.apply(payload, n);
    const std::string cpu = CpuDecodeStatus(*codec, payload, n, Context());
    auto gpu = HostDecode(c.codec, payload, n, p);
    EXPECT_NE(cpu, "OK") << c.codec << ", " << c.what;
    EXPECT_EQ(gpu.status().ToString(), cpu) << c.codec << ", " << c.what;
  }
}

// The format headers' small pieces.
TEST(SharedMathFormat, HeaderValueAndSizeChecks) {
  EXPECT_TRUE(CheckHeaderValue(0.0f, kScaleValue, true).ok());
  EXPECT_EQ(CheckHeaderValue(-0.5f, kScaleValue, true).code, FormatErrorCode::kHeaderValueNegative);
  EXPECT_TRUE(CheckHeaderValue(-0.5f, kScaleValue, false).ok());
  EXPECT_EQ(CheckHeaderValue(INFINITY, kNormValue, false).code,
            FormatErrorCode::kHeaderValueNotFinite);
  EXPECT_EQ(FormatErrorStatus("x", CheckHeaderValue(-0.5f, kNormValue, true)).message(),
            "codec 'x': malformed payload: norm is negative (-0.5)");
  EXPECT_EQ(FormatErrorText(CheckPayloadSize(9, 8, 30)), "9 bytes for 30 elements (expected 8)");
  uint8_t header[4];
  PutU32(header, 29);
  EXPECT_EQ(FormatErrorText(CheckSizeAndCount(header, 8, 8, 30)),
            "payload for 29 elements decoded into 30");
  EXPECT_TRUE(CheckSizeAndCount(header, 8, 8, 29).ok());
}

TEST(SharedMathFormat, NormsAndClipsClampToTheFloatRange) {
  EXPECT_EQ(qsgd::NormFromSumOfSquares(4.0), 2.0f);
  EXPECT_EQ(qsgd::NormFromSumOfSquares(1e80), FLT_MAX);
  const terngrad::ClipScale cs = terngrad::ClipAndScale(1e80, 4, FloatBits(3.0f));
  EXPECT_EQ(cs.clip, FLT_MAX);
  EXPECT_EQ(cs.scale, 3.0f);
  const terngrad::ClipScale small = terngrad::ClipAndScale(4.0 * 4, 4, FloatBits(9.0f));
  EXPECT_EQ(small.clip, 5.0f);  // 2.5 * rms, rms = 2
  EXPECT_EQ(small.scale, 5.0f);
  EXPECT_EQ(terngrad::ClipAndScale(0.0, 0, 0).scale, 0.0f);
}

}  // namespace
}  // namespace bytecomp::compress
