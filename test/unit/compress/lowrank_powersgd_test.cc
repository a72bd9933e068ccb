// PowerSGD through its two-round interface: W simulated workers, the two_round_sum aggregator
// standing in for the servers, the powersgd memory.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/match.h"
#include "bytecomp/compress/two_round.h"
#include "codec_test_util.h"

namespace bytecomp::compress {
namespace {

using testing::MustCreate;
using testing::RandomNormal;
using testing::TestContext;

using Worker = testing::TwoRoundWorker;

std::unique_ptr<Aggregator> ServerAggregator(const CodecParams& params) {
  const CodecSpec* spec = CodecRegistry::Global().Find("powersgd");
  EXPECT_NE(spec, nullptr);
  auto agg = spec->aggregator_factory(MustCreate("powersgd", params));
  EXPECT_TRUE(agg.ok()) << agg.status();
  return std::move(*agg);
}

// What the cluster does for one round: returns the summed P (for the reference check).
std::vector<float> RunRound(std::vector<Worker>& workers, Aggregator& server,
                            const std::vector<std::vector<float>>& inputs, uint64_t round,
                            bool use_memory = true) {
  const size_t n = inputs[0].size();
  server.Reset(n);
  for (size_t w = 0; w < workers.size(); ++w) {
    Worker& wk = workers[w];
    const CodecContext ctx = TestContext(round, static_cast<uint32_t>(w));
    wk.compensated.assign(n, 0.0f);
    if (use_memory) {
      EXPECT_TRUE(wk.memory->Compensate(inputs[w], ctx, absl::MakeSpan(wk.compensated)).ok());
    } else {
      wk.compensated = inputs[w];
    }
    std::vector<uint8_t> payload(wk.two_round->FirstRoundBytes(n));
    auto bytes = wk.two_round->EncodeFirst(wk.compensated, ctx, absl::MakeSpan(payload));
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ(*bytes, payload.size());
    EXPECT_TRUE(server.Add(payload, ctx).ok());
  }
  auto sum_p_span = server.Finish();
  EXPECT_TRUE(sum_p_span.ok());
  const std::vector<float> sum_p(sum_p_span->begin(), sum_p_span->end());
  testing::RunSecondRound(workers, server, sum_p, n, round, use_memory);
  return sum_p;
}

std::vector<Worker> MakeWorkers(size_t count, const CodecParams& params) {
  return testing::MakeTwoRoundWorkers(count, "powersgd", params, "powersgd");
}

TEST(PowerSgdTest, ShapeAndPayloadSizes) {
  auto codec = MustCreate("powersgd");
  EXPECT_TRUE(codec->properties().two_round);
  TwoRoundCodec* tr = AsTwoRound(*codec);
  ASSERT_NE(tr, nullptr);
  // n = 1000: cols = ceil(sqrt(1000)) = 32, rows = ceil(1000/32) = 32.
  EXPECT_EQ(tr->FirstRoundFloats(1000), 32u);
  EXPECT_EQ(tr->SecondRoundFloats(1000), 32u);
  EXPECT_EQ(tr->FirstRoundBytes(1000), 4u + 128u);
  // n = 10, rank 4: cols 4, rows 3, rank_eff 3.
  auto rank4 = MustCreate("powersgd", {{"rank", "4"}});
  EXPECT_EQ(AsTwoRound(*rank4)->FirstRoundFloats(10), 9u);
  EXPECT_EQ(AsTwoRound(*rank4)->SecondRoundFloats(10), 12u);
  EXPECT_EQ(tr->FirstRoundFloats(1), 1u);
  EXPECT_EQ(tr->SecondRoundFloats(1), 1u);
  // n = 2^20, rank 1: 1024 + 1024 floats against 2^20.
  EXPECT_EQ(tr->FirstRoundBytes(1 << 20), 4u + 4096u);
  // The single payload: u32 0, u32 n, P^ and Q'.
  EXPECT_EQ(codec->MaxEncodedBytes(1000), 8u + 4u * 64u);
  EXPECT_EQ(AsTwoRound(*MustCreate("qsgd")), nullptr);
}

TEST(PowerSgdTest, SinglePayloadReconstructsARankOneMatrixAndKeepsTheInvariant) {
  const size_t rows = 12, cols = 12, n = rows * cols;
  auto u = RandomNormal(rows, 5), v = RandomNormal(cols, 6);
  std::vector<float> m(n);
  for (size_t i = 0; i < rows; ++i) {
    for (size_t j = 0; j < cols; ++j) m[i * cols + j] = u[i] * v[j];
  }
  auto codec = MustCreate("powersgd");
  auto enc = testing::EncodeToVector(*codec, m, TestContext());
  ASSERT_TRUE(enc.ok()) << enc.status();
  EXPECT_EQ(enc->size(), 8 + 4 * (rows + cols));
  auto other = MustCreate("powersgd");  // any instance decodes (the payload carries both factors)
  auto dec = testing::DecodeToVector(*other, *enc, TestContext(), n);
  ASSERT_TRUE(dec.ok()) << dec.status();
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR((*dec)[i], m[i], 1e-5) << i;
  // With the powersgd memory: decoded + new residual == input + old residual.
  auto memory = CreateMemory("powersgd");
  ASSERT_TRUE(memory.ok());
  std::vector<std::vector<float>> inputs;
  for (int t = 0; t < 5; ++t) inputs.push_back(RandomNormal(300, 50 + t));
  auto fresh = MustCreate("powersgd", {{"rank", "3"}});
  testing::ExpectErrorFeedbackInvariant(*fresh, **memory, inputs);
}

TEST(PowerSgdTest, AggregatorDecodesAndAddsSinglePayloads) {
  auto server = ServerAggregator({});
  const size_t n = 30;
  server->Reset(n);
  std::vector<double> expected(n, 0.0);
  for (uint32_t w = 0; w < 3; ++w) {
    auto codec = MustCreate("powersgd");
    auto enc = testing::EncodeToVector(*codec, RandomNormal(n, w), TestContext(7, w));
    ASSERT_TRUE(enc.ok());
    auto dec = testing::DecodeToVector(*codec, *enc, TestContext(7, w), n);
    ASSERT_TRUE(dec.ok());
    for (size_t i = 0; i < n; ++i) expected[i] += (*dec)[i];
    ASSERT_TRUE(server->Add(*enc, TestContext(7, w)).ok());
  }
  auto sum = server->Finish();
  ASSERT_TRUE(sum.ok());
  ASSERT_EQ(sum->size(), n);
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR((*sum)[i], expected[i], 1e-5);
}

// Reference: output = P^ P^T sum_w M_w with P^ from the summed P, all in double.
TEST(PowerSgdTest, FourWorkersMatchTheReferenceProjectionAndAgree) {
  const size_t W = 4, n = 999;  // 32 x 32 with 25 padding zeros
  const size_t rows = 32, cols = 32, rank = 2;
  auto workers = MakeWorkers(W, {{"rank", "2"}});
  auto server = ServerAggregator({{"rank", "2"}});
  for (uint64_t round = 0; round < 3; ++round) {
    std::vector<std::vector<float>> inputs;
    for (size_t w = 0; w < W; ++w) inputs.push_back(RandomNormal(n, 100 * round + w));
    const std::vector<float> sum_p = RunRound(workers, *server, inputs, round);
    ASSERT_EQ(sum_p.size(), rows * rank);
    // Gram-Schmidt of sum_p.
    std::vector<double> basis(sum_p.begin(), sum_p.end());
    for (size_t k = 0; k < rank; ++k) {
      double* v = &basis[k * rows];
      for (size_t l = 0; l < k; ++l) {
        const double* u = &basis[l * rows];
        double dot = 0;
        for (size_t i = 0; i < rows; ++i) dot += u[i] * v[i];
        for (size_t i = 0; i < rows; ++i) v[i] -= dot * u[i];
      }
      double norm = 0;
      for (size_t i = 0; i < rows; ++i) norm += v[i] * v[i];
      for (size_t i = 0; i < rows; ++i) v[i] /= std::sqrt(norm);
    }
    std::vector<double> total(rows * cols, 0.0);
    for (const auto& wk : workers) {
      for (size_t i = 0; i < n; ++i) total[i] += wk.compensated[i];
    }
    double scale = 0;
    for (double t : total) scale = std::max(scale, std::fabs(t));
    for (size_t i = 0; i < rows; ++i) {
      for (size_t j = 0; j < cols && i * cols + j < n; ++j) {
        double expected = 0;
        for (size_t k = 0; k < rank; ++k) {
          double proj = 0;  // (P^_k^T total)_j
          for (size_t r = 0; r < rows; ++r) proj += basis[k * rows + r] * total[r * cols + j];
          expected += basis[k * rows + i] * proj;
        }
        ASSERT_NEAR(workers[0].output[i * cols + j], expected, 1e-5 * scale)
            << "round " << round << " element " << i * cols + j;
      }
    }
    for (size_t w = 1; w < W; ++w) {
      ASSERT_EQ(workers[w].output, workers[0].output) << "worker " << w << " disagrees";
    }
  }
}

TEST(PowerSgdTest, ErrorFeedbackInvariantWithLocalApproximation) {
  // local_t + residual_t == input_t + residual_{t-1}, residual_t observed as
  // compensated_{t+1} - input_{t+1}.
  const size_t W = 3, n = 200;
  auto workers = MakeWorkers(W, {});
  auto server = ServerAggregator({});
  std::vector<std::vector<std::vector<float>>> inputs(4);
  std::vector<std::vector<std::vector<float>>> compensated(4), local(4);
  for (uint64_t t = 0; t < 4; ++t) {
    for (size_t w = 0; w < W; ++w) inputs[t].push_back(RandomNormal(n, 10 * t + w));
    RunRound(workers, *server, inputs[t], t);
    for (auto& wk : workers) {
      compensated[t].push_back(wk.compensated);
      local[t].push_back(wk.local);
    }
  }
  for (size_t w = 0; w < W; ++w) {
    std::vector<float> old_residual(n, 0.0f);
    for (size_t t = 0; t + 1 < 4; ++t) {
      for (size_t i = 0; i < n; ++i) {
        const float residual = compensated[t + 1][w][i] - inputs[t + 1][w][i];
        ASSERT_NEAR(local[t][w][i] + residual, inputs[t][w][i] + old_residual[i], 1e-5)
            << "worker " << w << " round " << t << " element " << i;
        old_residual[i] = residual;
      }
    }
  }
}

TEST(PowerSgdTest, RankOneSumIsReconstructedExactly) {
  const size_t W = 4, rows = 20, cols = 20, n = rows * cols;
  auto u = RandomNormal(rows, 1), v = RandomNormal(cols, 2);
  std::vector<std::vector<float>> inputs(W, std::vector<float>(n));
  std::vector<double> total(n, 0.0);
  for (size_t w = 0; w < W; ++w) {
    const float a = 0.5f + static_cast<float>(w);
    for (size_t i = 0; i < rows; ++i) {
      for (size_t j = 0; j < cols; ++j) {
        inputs[w][i * cols + j] = a * u[i] * v[j];
        total[i * cols + j] += inputs[w][i * cols + j];
      }
    }
  }
  auto workers = MakeWorkers(W, {});
  auto server = ServerAggregator({});
  RunRound(workers, *server, inputs, 0, /*use_memory=*/false);
  double scale = 0;
  for (double t : total) scale = std::max(scale, std::fabs(t));
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(workers[0].output[i], total[i], 1e-5 * scale) << i;
}

// A layer's gradient as the framework shapes it: rows x cols, row-major. Two workers' rank-2
// gradients with the same left factors sum to a rank-2 layer matrix, which rank-2 PowerSGD on
// the layer's rows recovers exactly (the reference: the local sum); the near-square reading of
// the same 1440 elements (38 x 38) is not a rank-2 matrix.
TEST(PowerSgdTest, LayerShapeRecoversALowRankLayerThatTheNearSquareReadingDoesNot) {
  const size_t W = 2, rows = 48, cols = 30, n = rows * cols;
  const auto u1 = RandomNormal(rows, 11), u2 = RandomNormal(rows, 12);
  std::vector<std::vector<float>> inputs(W, std::vector<float>(n));
  std::vector<double> total(n, 0.0);
  for (size_t w = 0; w < W; ++w) {
    const auto v1 = RandomNormal(cols, 20 + w), v2 = RandomNormal(cols, 30 + w);
    for (size_t i = 0; i < rows; ++i) {
      for (size_t j = 0; j < cols; ++j) {
        inputs[w][i * cols + j] = u1[i] * v1[j] + u2[i] * v2[j];
        total[i * cols + j] += inputs[w][i * cols + j];
      }
    }
  }
  double scale = 0;
  for (double t : total) scale = std::max(scale, std::fabs(t));
  auto max_error = [&](const CodecParams& params) {
    auto workers = MakeWorkers(W, params);
    auto server = ServerAggregator(params);
    RunRound(workers, *server, inputs, 0, /*use_memory=*/false);
    EXPECT_EQ(workers[0].output, workers[1].output) << "the workers disagree";
    double error = 0;
    for (size_t i = 0; i < n; ++i) {
      error = std::max(error, std::fabs(workers[0].output[i] - total[i]));
    }
    return error / scale;
  };
  const CodecParams layer = {{"rank", "2"}, {"cols", "30"}};
  // P is 48 x 2 and Q 30 x 2: the layer's rows, as PyTorch's PowerSGD hook reads it.
  auto codec = MustCreate("powersgd", layer);
  EXPECT_EQ(AsTwoRound(*codec)->FirstRoundFloats(n), rows * 2);
  EXPECT_EQ(AsTwoRound(*codec)->SecondRoundFloats(n), cols * 2);
  EXPECT_LT(max_error(layer), 1e-5);
  EXPECT_GT(max_error({{"rank", "2"}}), 0.05);
  // A partition of whole rows (the scheduler cuts shaped tensors so): 10 rows of the layer.
  EXPECT_EQ(AsTwoRound(*codec)->FirstRoundFloats(10 * cols), 10u * 2);
  // A row longer than the partition: the near-square matrix.
  EXPECT_EQ(AsTwoRound(*codec)->SecondRoundFloats(20),
            AsTwoRound(*MustCreate("powersgd", {{"rank", "2"}}))->SecondRoundFloats(20));
}

TEST(PowerSgdTest, WarmStartConvergesToTheBestRankOneApproximation) {
  // M = 3 e0 f0^T + 1 e1 f1^T (orthonormal e, f): the best rank-1 error is 1 (Frobenius).
  const size_t rows = 16, cols = 16, n = rows * cols;
  std::vector<float> m(n, 0.0f);
  // e0 = (1,1,...)/4, e1 = alternating signs/4; f0 = first unit vector, f1 = second.
  for (size_t i = 0; i < rows; ++i) {
    m[i * cols + 0] += 3.0f * 0.25f;
    m[i * cols + 1] += 1.0f * ((i % 2) ? -0.25f : 0.25f);
  }
  auto workers = MakeWorkers(1, {});
  auto server = ServerAggregator({});
  std::vector<double> errors;
  for (uint64_t round = 0; round < 12; ++round) {
    RunRound(workers, *server, {m}, round, /*use_memory=*/false);
    double err = 0;
    for (size_t i = 0; i < n; ++i) {
      const double d = workers[0].output[i] - m[i];
      err += d * d;
    }
    errors.push_back(std::sqrt(err));
  }
  EXPECT_NEAR(errors.back(), 1.0, 1e-3) << "first round error " << errors.front();
  EXPECT_LE(errors.back(), errors.front() + 1e-6);
}

TEST(PowerSgdTest, OutOfOrderCallsAndBadSumsAreErrors) {
  auto codec = MustCreate("powersgd");
  TwoRoundCodec* tr = AsTwoRound(*codec);
  const size_t n = 50;  // cols 8, rows 7
  std::vector<uint8_t> out(codec->MaxEncodedBytes(n));
  std::vector<float> output(n);
  EXPECT_EQ(tr->EncodeSecond(std::vector<float>(7, 1.0f), TestContext(), absl::MakeSpan(out))
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(tr->LocalApproximation(absl::MakeSpan(output)).code(),
            absl::StatusCode::kFailedPrecondition);
  auto x = RandomNormal(n, 3);
  x[17] = std::numeric_limits<float>::quiet_NaN();
  auto bad = tr->EncodeFirst(x, TestContext(), absl::MakeSpan(out));
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "17")) << bad.status();
  x[17] = 1.0f;
  ASSERT_TRUE(tr->EncodeFirst(x, TestContext(), absl::MakeSpan(out)).ok());
  EXPECT_EQ(tr->EncodeSecond(std::vector<float>(6, 1.0f), TestContext(), absl::MakeSpan(out))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<float> nan_sum(7, 1.0f);
  nan_sum[3] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(tr->EncodeSecond(nan_sum, TestContext(), absl::MakeSpan(out)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      tr->EncodeSecond(std::vector<float>(7, 1.0f), TestContext(/*round=*/8), absl::MakeSpan(out))
          .status()
          .code(),
      absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(
      tr->EncodeSecond(std::vector<float>(7, 1.0f), TestContext(), absl::MakeSpan(out)).ok());
  EXPECT_EQ(
      tr->DecodeSecond(std::vector<float>(7, 1.0f), TestContext(), absl::MakeSpan(output)).code(),
      absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(
      tr->DecodeSecond(std::vector<float>(8, 1.0f), TestContext(), absl::MakeSpan(output)).ok());
  // The round is over: a second decode is out of order.
  EXPECT_EQ(
      tr->DecodeSecond(std::vector<float>(8, 1.0f), TestContext(), absl::MakeSpan(output)).code(),
      absl::StatusCode::kFailedPrecondition);
  // Another length restarts the state with the new shape (n + 1 = 51: cols 8, rows 7).
  std::vector<uint8_t> big(codec->MaxEncodedBytes(n + 1));
  auto restarted =
      tr->EncodeFirst(std::vector<float>(n + 1, 1.0f), TestContext(1), absl::MakeSpan(big));
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  EXPECT_EQ(*restarted, tr->FirstRoundBytes(n + 1));
}

TEST(PowerSgdTest, AggregatorRejectsMalformedPayloadsWithoutChangingTheSum) {
  auto server = ServerAggregator({});
  const size_t n = 50;  // 7 floats in stage 1, 8 in stage 2
  server->Reset(n);
  std::vector<uint8_t> good(4 + 4 * 7);
  uint32_t stage = 1;
  std::memcpy(good.data(), &stage, 4);
  for (size_t i = 0; i < 7; ++i) {
    const float v = static_cast<float>(i);
    std::memcpy(good.data() + 4 + 4 * i, &v, 4);
  }
  ASSERT_TRUE(server->Add(good, TestContext()).ok());
  auto bad_stage = good;
  bad_stage[0] = 3;
  EXPECT_FALSE(server->Add(bad_stage, TestContext()).ok());
  EXPECT_FALSE(server->Add(std::vector<uint8_t>(good.begin(), good.end() - 4), TestContext()).ok());
  EXPECT_FALSE(server->Add(std::vector<uint8_t>(2, 0), TestContext()).ok());
  auto nan = good;
  const float q = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(nan.data() + 8, &q, 4);
  EXPECT_FALSE(server->Add(nan, TestContext()).ok());
  std::vector<uint8_t> stage2(4 + 4 * 8, 0);
  stage2[0] = 2;
  EXPECT_FALSE(server->Add(stage2, TestContext()).ok()) << "stage 2 into a stage 1 round";
  EXPECT_FALSE(server->Add(good, TestContext(/*round=*/9)).ok());
  EXPECT_EQ(server->count(), 1u);
  auto sum = server->Finish();
  ASSERT_TRUE(sum.ok());
  ASSERT_EQ(sum->size(), 7u);
  for (size_t i = 0; i < 7; ++i) EXPECT_EQ((*sum)[i], static_cast<float>(i));
}

}  // namespace
}  // namespace bytecomp::compress
