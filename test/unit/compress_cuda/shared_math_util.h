// Helpers of the shared-math tests: random gradients, the CPU codecs' encode and decode, the
// GPU's summation order, and byte builders.
#pragma once

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "bytecomp/compress.h"
#include "bytecomp/compress/elementwise.h"
#include "gtest/gtest.h"

namespace bytecomp::compress::shared_math {

// Gradient-like values over five decades, with zeros, negative zeros, a value above the fp16
// range and an fp16 subnormal; with_ties rounds to quarters (many equal magnitudes).
inline std::vector<float> RandomGradient(size_t n, uint32_t seed, bool with_ties = false) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 19);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    float v = normal(rng) * std::pow(10.0f, static_cast<float>(pick(rng) % 5) - 2.0f);
    if (with_ties) v = std::round(v * 4.0f) / 4.0f;
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

inline CodecContext Context(uint64_t round = 3) {
  CodecContext ctx;
  ctx.seed = 1234;
  ctx.key = (uint64_t{7} << 32) | 2;
  ctx.round = round;
  ctx.node = 1;
  return ctx;
}

inline std::unique_ptr<Codec> Make(absl::string_view name, const CodecParams& params = {}) {
  auto codec = CreateCodec(name, params);
  EXPECT_TRUE(codec.ok()) << codec.status();
  return codec.ok() ? std::move(*codec) : nullptr;
}

inline std::vector<uint8_t> CpuEncode(Codec& codec, const std::vector<float>& x,
                                      const CodecContext& ctx) {
  std::vector<uint8_t> out(codec.MaxEncodedBytes(x.size()));
  auto n = codec.Encode(x, ctx, absl::MakeSpan(out));
  EXPECT_TRUE(n.ok()) << n.status();
  out.resize(n.ok() ? *n : 0);
  return out;
}

inline std::vector<float> CpuDecode(Codec& codec, const std::vector<uint8_t>& bytes, size_t n,
                                    const CodecContext& ctx) {
  std::vector<float> out(n);
  const absl::Status s = codec.Decode(bytes, ctx, absl::MakeSpan(out));
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// EncodeWithMemory's payload; compensated and decoded are its scratch (compensated is left
// holding the round's compensated input).
inline std::vector<uint8_t> CpuEncodeWithMemory(Codec& codec, Memory& memory,
                                                const std::vector<float>& g,
                                                const CodecContext& ctx,
                                                std::vector<float>& compensated,
                                                std::vector<float>& decoded) {
  std::vector<uint8_t> out(codec.MaxEncodedBytes(g.size()));
  auto bytes = EncodeWithMemory(codec, &memory, g, ctx, absl::MakeSpan(out), compensated, decoded);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  out.resize(bytes.ok() ? *bytes : 0);
  return out;
}

// Bitwise equality of float vectors (0.0 vs -0.0 and NaN payloads count).
inline void ExpectSameBits(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(FloatBits(a[i]), FloatBits(b[i]))
        << "element " << i << ": " << a[i] << " vs " << b[i];
  }
}

// The GPU's double sums run in another order: 256 threads striding, then the threads' sums.
// Sums f(x[i]) over the elements where keep(x[i]).
template <typename Keep, typename Term>
double GpuOrderSumOf(const std::vector<float>& x, Keep keep, Term f) {
  double threads[256] = {};
  for (size_t i = 0; i < x.size(); ++i) {
    if (keep(x[i])) threads[i % 256] += f(static_cast<double>(x[i]));
  }
  double total = 0.0;
  for (double t : threads) total += t;
  return total;
}

// sign: 0 all elements, 1 those >= 0, -1 those < 0.
inline double GpuOrderSum(const std::vector<float>& x, bool squares, int sign) {
  return GpuOrderSumOf(
      x, [sign](float v) { return sign == 0 || (sign == 1 ? !(v < 0.0f) : v < 0.0f); },
      [squares](double d) { return squares ? d * d : d; });
}

inline uint32_t MaxAbsBitsOf(const std::vector<float>& x) {
  uint32_t m = 0;
  for (float v : x) m = std::max(m, FloatBits(v) & 0x7fffffffu);
  return m;
}

inline void AppendF32(std::vector<uint8_t>& out, float v) {
  uint8_t b[4];
  std::memcpy(b, &v, 4);
  out.insert(out.end(), b, b + 4);
}

// Overwrites the 4 bytes at `at` with v (a malformed payload's value).
inline void SetF32(std::vector<uint8_t>& p, size_t at, float v) {
  std::memcpy(p.data() + at, &v, 4);
}

inline void AppendU32(std::vector<uint8_t>& out, uint32_t v) {
  uint8_t b[4];
  std::memcpy(b, &v, 4);
  out.insert(out.end(), b, b + 4);
}

// What a CPU decoder says about a payload: OK or its error text.
inline std::string CpuDecodeStatus(Codec& codec, const std::vector<uint8_t>& bytes, size_t n,
                                   const CodecContext& ctx) {
  std::vector<float> out(n);
  return codec.Decode(bytes, ctx, absl::MakeSpan(out)).ToString();
}

// A malformed payload: what it is, and how it is made from a good one.
struct Malformation {
  const char* what;
  std::function<void(std::vector<uint8_t>&)> apply;
};

// Makes each malformation of `good` and expects host_decode (the GPU decoder's checks on the
// host, returning a StatusOr) to report what the CPU decoder reports, word for word.
template <typename HostDecode>
void ExpectTheCpuErrors(Codec& codec, const std::vector<uint8_t>& good, size_t n,
                        const std::vector<Malformation>& cases, HostDecode host_decode) {
  for (const Malformation& c : cases) {
    std::vector<uint8_t> m = good;
    c.apply(m);
    const std::string cpu = CpuDecodeStatus(codec, m, n, Context());
    EXPECT_NE(cpu, "OK") << c.what;
    EXPECT_EQ(host_decode(m).status().ToString(), cpu) << c.what;
  }
}

}  // namespace bytecomp::compress::shared_math
