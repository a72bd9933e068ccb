// Reusable pieces for codec and memory tests: input generators, encode/decode helpers, the
// 3-sigma unbiasedness check, the error-feedback invariant check and two-round workers.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "bytecomp/compress.h"
#include "bytecomp/compress/two_round.h"
#include "gtest/gtest.h"

namespace bytecomp::compress::testing {

// n normally distributed values with standard deviation scale.
inline std::vector<float> RandomNormal(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// Gradient-like: mostly small values, a few large ones (heavy tail).
inline std::vector<float> RandomHeavyTail(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(gen) * (u(gen) < 0.01f ? 100.0f : 0.01f);
  return v;
}

struct NamedInput {
  std::string name;
  std::vector<float> values;
};

// Random and adversarial inputs: zeros, constants, one element, sizes that are not a multiple
// of 8, 32 or a 128 bucket, huge (1e30) and tiny (1e-30) magnitudes, mixed signs.
inline std::vector<NamedInput> AdversarialInputs() {
  std::vector<NamedInput> inputs;
  inputs.push_back({"random_1000", RandomNormal(1000, 1)});
  inputs.push_back({"random_4099", RandomNormal(4099, 2)});
  inputs.push_back({"heavy_tail_777", RandomHeavyTail(777, 3)});
  inputs.push_back({"zeros_100", std::vector<float>(100, 0.0f)});
  inputs.push_back({"constant_129", std::vector<float>(129, 0.75f)});
  inputs.push_back({"negative_constant_33", std::vector<float>(33, -2.5f)});
  inputs.push_back({"one_element", {0.3f}});
  inputs.push_back({"one_negative_element", {-7.0f}});
  inputs.push_back({"size_7", RandomNormal(7, 4)});
  inputs.push_back({"size_31", RandomNormal(31, 5)});
  inputs.push_back({"size_257", RandomNormal(257, 6)});
  {
    auto v = RandomNormal(131, 7);
    for (auto& x : v) x *= 1e30f;
    inputs.push_back({"huge_1e30_131", v});
  }
  {
    auto v = RandomNormal(133, 8);
    for (auto& x : v) x *= 1e-30f;
    inputs.push_back({"tiny_1e-30_133", v});
  }
  {
    std::vector<float> v(200);
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = (i % 3 == 0) ? 1e20f : ((i % 3 == 1) ? -1e-20f : 0.0f);
    inputs.push_back({"mixed_magnitudes_200", v});
  }
  return inputs;
}

inline CodecContext TestContext(uint64_t round = 7, uint32_t node = 0) {
  CodecContext ctx;
  ctx.key = (uint64_t{3} << 32) | 1;
  ctx.round = round;
  ctx.node = node;
  ctx.seed = 12345;
  ctx.learning_rate = 0.1f;
  return ctx;
}

inline std::unique_ptr<Codec> MustCreate(const std::string& name, const CodecParams& params = {}) {
  auto codec = CreateCodec(name, params);
  EXPECT_TRUE(codec.ok()) << codec.status();
  return codec.ok() ? std::move(*codec) : nullptr;
}

inline absl::StatusOr<std::vector<uint8_t>> EncodeToVector(Codec& codec,
                                                           absl::Span<const float> input,
                                                           const CodecContext& ctx) {
  std::vector<uint8_t> out(codec.MaxEncodedBytes(input.size()));
  auto bytes = codec.Encode(input, ctx, absl::MakeSpan(out));
  if (!bytes.ok()) return bytes.status();
  if (*bytes > out.size()) return absl::InternalError("Encode wrote past MaxEncodedBytes");
  out.resize(*bytes);
  return out;
}

inline absl::StatusOr<std::vector<float>> DecodeToVector(Codec& codec,
                                                         absl::Span<const uint8_t> encoded,
                                                         const CodecContext& ctx, size_t n) {
  std::vector<float> out(n, -12345.0f);  // poison: Decode must write every element
  if (auto s = codec.Decode(encoded, ctx, absl::MakeSpan(out)); !s.ok()) return s;
  return out;
}

inline absl::StatusOr<std::vector<float>> RoundTrip(Codec& codec, absl::Span<const float> input,
                                                    const CodecContext& ctx) {
  auto enc = EncodeToVector(codec, input, ctx);
  if (!enc.ok()) return enc.status();
  return DecodeToVector(codec, *enc, ctx, input.size());
}

// Unbiasedness: decode(encode(x)) over `trials` independent randomisations (round r uses
// make_ctx(r)); per element, the sample mean must lie within 3 standard errors of x. A few
// elements may fall outside by chance (0.27% each): at most max_outside_fraction may. An
// element whose samples never vary must equal x up to rel_tol.
inline void ExpectUnbiased(Codec& codec, absl::Span<const float> input, int trials,
                           const std::function<CodecContext(int)>& make_ctx,
                           double max_outside_fraction = 0.01, double rel_tol = 1e-5) {
  const size_t n = input.size();
  std::vector<double> sum(n, 0.0), sum_sq(n, 0.0);
  for (int t = 0; t < trials; ++t) {
    auto decoded = RoundTrip(codec, input, make_ctx(t));
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    for (size_t i = 0; i < n; ++i) {
      sum[i] += (*decoded)[i];
      sum_sq[i] += static_cast<double>((*decoded)[i]) * (*decoded)[i];
    }
  }
  size_t outside = 0;
  double max_abs = 0;
  for (float x : input) max_abs = std::max(max_abs, std::fabs(static_cast<double>(x)));
  for (size_t i = 0; i < n; ++i) {
    const double mean = sum[i] / trials;
    const double var = std::max(0.0, sum_sq[i] / trials - mean * mean) * trials / (trials - 1);
    const double stderr_mean = std::sqrt(var / trials);
    const double err = std::fabs(mean - input[i]);
    if (stderr_mean <= rel_tol * max_abs) {
      EXPECT_NEAR(mean, input[i], rel_tol * max_abs + 1e-30) << "element " << i << " never varies";
    } else if (err > 3 * stderr_mean) {
      ++outside;
    }
  }
  EXPECT_LE(static_cast<double>(outside), max_outside_fraction * n + 1)
      << outside << " of " << n << " elements have a mean outside 3 standard errors";
}

// Error feedback: over several rounds, decoded_t + residual_t == gamma * input_t +
// residual_{t-1}, where the memory compensates as residual + gamma * input. The residual is
// observed through the next round's compensation with a known input:
// residual_t = compensated_{t+1} - gamma * input_{t+1}.
inline void ExpectErrorFeedbackInvariant(Codec& codec, Memory& memory,
                                         const std::vector<std::vector<float>>& inputs,
                                         float gamma = 1.0f, double tol = 1e-5) {
  ASSERT_GE(inputs.size(), 2u);
  const size_t n = inputs[0].size();
  std::vector<std::vector<float>> compensated(inputs.size()), decoded(inputs.size());
  std::vector<float> comp_buf, dec_buf;
  for (size_t t = 0; t < inputs.size(); ++t) {
    ASSERT_EQ(inputs[t].size(), n);
    CodecContext ctx = TestContext(t);
    std::vector<uint8_t> out(codec.MaxEncodedBytes(n));
    auto bytes =
        EncodeWithMemory(codec, &memory, inputs[t], ctx, absl::MakeSpan(out), comp_buf, dec_buf);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    compensated[t] = comp_buf;
    auto d = DecodeToVector(codec, absl::MakeConstSpan(out.data(), *bytes), ctx, n);
    ASSERT_TRUE(d.ok()) << d.status();
    decoded[t] = *d;
  }
  std::vector<float> old_residual(n, 0.0f);
  for (size_t t = 0; t + 1 < inputs.size(); ++t) {
    double scale = 1e-30;
    for (size_t i = 0; i < n; ++i) {
      scale = std::max({scale, std::fabs(static_cast<double>(inputs[t][i])),
                        std::fabs(static_cast<double>(old_residual[i]))});
    }
    std::vector<float> residual(n);
    for (size_t i = 0; i < n; ++i) {
      residual[i] = compensated[t + 1][i] - gamma * inputs[t + 1][i];
      const double lhs = static_cast<double>(decoded[t][i]) + residual[i];
      const double rhs = static_cast<double>(gamma) * inputs[t][i] + old_residual[i];
      ASSERT_NEAR(lhs, rhs, tol * scale * 4) << "round " << t << " element " << i;
    }
    old_residual = residual;
  }
}

// One simulated worker of a two-round codec (two_round.h) with its error-feedback memory, and
// the vectors of its round: the compensated input, its local approximation, the result.
struct TwoRoundWorker {
  std::unique_ptr<Codec> codec;
  TwoRoundCodec* two_round = nullptr;
  std::unique_ptr<Memory> memory;
  std::vector<float> compensated, local, output;
};

inline std::vector<TwoRoundWorker> MakeTwoRoundWorkers(size_t count, const std::string& codec,
                                                       const CodecParams& params,
                                                       const std::string& memory) {
  std::vector<TwoRoundWorker> workers(count);
  for (TwoRoundWorker& w : workers) {
    w.codec = MustCreate(codec, params);
    w.two_round = AsTwoRound(*w.codec);
    EXPECT_NE(w.two_round, nullptr);
    auto made = CreateMemory(memory);
    EXPECT_TRUE(made.ok()) << made.status();
    w.memory = std::move(*made);
  }
  return workers;
}

// The second round of a two-round codec through `server` (its aggregator), after the servers
// returned `first_sum`: every worker's payload 2 (and, if `update_memory`, its memory update),
// the servers' sum, which it returns, and every worker's DecodeSecond into `output`, filled
// with -1 first so that an element the codec leaves unwritten shows.
inline std::vector<float> RunSecondRound(std::vector<TwoRoundWorker>& workers, Aggregator& server,
                                         absl::Span<const float> first_sum, size_t n,
                                         uint64_t round, bool update_memory = true) {
  server.Reset(n);
  for (size_t w = 0; w < workers.size(); ++w) {
    TwoRoundWorker& wk = workers[w];
    const CodecContext ctx = TestContext(round, static_cast<uint32_t>(w));
    std::vector<uint8_t> payload(wk.two_round->SecondRoundBytes(n));
    auto bytes = wk.two_round->EncodeSecond(first_sum, ctx, absl::MakeSpan(payload));
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ(*bytes, payload.size());
    wk.local.assign(n, 0.0f);
    EXPECT_TRUE(wk.two_round->LocalApproximation(absl::MakeSpan(wk.local)).ok());
    if (update_memory) {
      EXPECT_TRUE(wk.memory->Update(wk.compensated, wk.local, ctx).ok());
    }
    EXPECT_TRUE(server.Add(payload, ctx).ok());
  }
  auto second = server.Finish();
  EXPECT_TRUE(second.ok()) << second.status();
  std::vector<float> sum(second->begin(), second->end());
  for (size_t w = 0; w < workers.size(); ++w) {
    TwoRoundWorker& wk = workers[w];
    wk.output.assign(n, -1.0f);
    const absl::Status s = wk.two_round->DecodeSecond(
        sum, TestContext(round, static_cast<uint32_t>(w)), absl::MakeSpan(wk.output));
    EXPECT_TRUE(s.ok()) << s;
  }
  return sum;
}

}  // namespace bytecomp::compress::testing
