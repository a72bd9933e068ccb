// The CUDA PowerSGD codec's arithmetic without a GPU: compress/cuda/src/lowrank_kernels.cu's
// kernels run on the host thread after thread (format/powersgd_format.h's functions in the
// kernels' order), with the host side the CUDA codec shares with the CPU one
// (powersgd_round.h), against the CPU codec: the same bytes for both stages and for the single
// payload, the same decoded values and the same memory over rounds with several workers, at
// odd shapes and ranks; the same errors for malformed payloads and bad rounds. Bit for bit, no
// tolerance: the kernels sum in the CPU codec's order. Built with -ffp-contract=off, as the
// kernels are with --fmad=false.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bytecomp/compress.h"
#include "bytecomp/compress/format/powersgd_format.h"
#include "bytecomp/compress/memory_math.h"
#include "bytecomp/compress/powersgd_round.h"
#include "bytecomp/compress/two_round.h"
#include "gtest/gtest.h"
#include "shared_math_util.h"

namespace bytecomp::compress {
namespace {

using namespace shared_math;
using powersgd::Shape;

// ---- The kernels, thread after thread.

// PKernel: entry o = k * rows + i from its 8 lane threads and the tail.
std::vector<float> HostP(const std::vector<float>& m, const Shape& s, const std::vector<float>& q) {
  std::vector<float> p(powersgd::FirstRoundFloats(s));
  for (size_t o = 0; o < p.size(); ++o) {
    const size_t row_begin = (o % s.rows) * s.cols;
    const float* q_column = q.data() + (o / s.rows) * s.cols;
    double lanes[powersgd::kDotLanes];
    for (size_t l = 0; l < powersgd::kDotLanes; ++l) {
      lanes[l] = powersgd::RowDotLane(m.data(), m.size(), row_begin, s.cols, q_column, l);
    }
    const double tail = powersgd::RowDotTail(m.data(), m.size(), row_begin, s.cols, q_column);
    p[o] = static_cast<float>(powersgd::CombineDotLanes(lanes, tail));
  }
  return p;
}

// QKernel: a thread an entry o = k * cols + j.
std::vector<float> HostQ(const std::vector<float>& m, const Shape& s,
                         const std::vector<float>& p_hat) {
  std::vector<float> q(powersgd::SecondRoundFloats(s));
  for (size_t o = 0; o < q.size(); ++o) {
    q[o] = powersgd::QEntry(m.data(), m.size(), s, p_hat.data(), o / s.cols, o % s.cols);
  }
  return q;
}

// ProductKernel: a thread an element.
std::vector<float> HostProduct(const float* p_hat, const float* q, const Shape& s, size_t n) {
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i)
    out[i] = powersgd::ProductEntry(p_hat, q, s, i / s.cols, i % s.cols);
  return out;
}

std::vector<uint8_t> StagePayload(uint32_t stage, const std::vector<float>& values) {
  std::vector<uint8_t> out;
  AppendU32(out, stage);
  for (float v : values) AppendF32(out, v);
  return out;
}

// The stage payloads' floats summed as the servers sum them (two_round_sum: in arrival order).
std::vector<float> ServerSum(const std::vector<std::vector<uint8_t>>& payloads) {
  std::vector<float> sum((payloads[0].size() - 4) / 4, 0.0f);
  for (const std::vector<uint8_t>& p : payloads) {
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += GetF32(p.data() + 4 + 4 * i);
  }
  return sum;
}

// PowerSgdCudaCodec's calls on the host: the same RoundState calls, the kernels above for the
// device's work, its fused memory (fused_memory.cu: the first round copies; lowrank_kernels.cu
// UpdateMemory: Feedback's ResidualUpdate with the local approximation).
class HostPowerSgd {
 public:
  HostPowerSgd(size_t rank, size_t cols, bool memory) : round_(rank, cols), memory_(memory) {}

  std::vector<uint8_t> EncodeFirst(const std::vector<float>& g, const CodecContext& ctx) {
    Compensate(g);
    return StagePayload(1, MultiplyByQ(ctx));
  }

  absl::StatusOr<std::vector<uint8_t>> EncodeSecond(const std::vector<float>& summed_first,
                                                    const CodecContext& ctx) {
    if (auto s = round_.Orthonormalise(summed_first, ctx); !s.ok()) return s;
    if (auto s = MultiplyByP(); !s.ok()) return s;
    UpdateMemory();
    return StagePayload(2, q_local_);
  }

  absl::StatusOr<std::vector<float>> DecodeSecond(const std::vector<float>& summed_second,
                                                  const CodecContext& ctx, size_t n) {
    if (auto s = round_.CheckDecodeSecond(summed_second, ctx, n); !s.ok()) return s;
    std::vector<float> out =
        HostProduct(round_.p_hat().data(), summed_second.data(), round_.shape(), round_.n());
    if (auto s = round_.FinishDecodeSecond(summed_second, MaxAbsBitsOf(out)); !s.ok()) return s;
    return out;
  }

  // Encode (EncodeChecked): the single payload.
  absl::StatusOr<std::vector<uint8_t>> Encode(const std::vector<float>& g,
                                              const CodecContext& ctx) {
    Compensate(g);
    const std::vector<float> p = MultiplyByQ(ctx);
    if (auto s = round_.Orthonormalise(p, ctx); !s.ok()) return s;
    if (auto s = MultiplyByP(); !s.ok()) return s;
    std::vector<uint8_t> out;
    AppendU32(out, 0);
    AppendU32(out, static_cast<uint32_t>(g.size()));
    for (float v : round_.p_hat()) AppendF32(out, v);
    for (float v : q_local_) AppendF32(out, v);
    round_.FinishSingle(q_local_);
    if (auto s = FormatErrorStatus("powersgd", powersgd::CheckProduct(UpdateMemory())); !s.ok()) {
      return s;
    }
    return out;
  }

  // Decode: the host's checks on the read-back payload, then the product kernel.
  absl::StatusOr<std::vector<float>> Decode(const std::vector<uint8_t>& payload, size_t n) const {
    const Shape s = round_.ShapeOf(n);
    FormatError e = powersgd::CheckSinglePayload(payload.data(), payload.size(), s, n);
    std::vector<float> factors;
    if (e.ok()) {
      factors.resize((s.rows + s.cols) * s.rank);
      if (!factors.empty()) std::memcpy(factors.data(), payload.data() + 8, 4 * factors.size());
      e = powersgd::CheckFactors(MaxAbsBitsOf(factors));
    }
    std::vector<float> out;
    if (e.ok()) {
      out = HostProduct(factors.data(), factors.data() + s.rows * s.rank, s, n);
      e = powersgd::CheckProduct(MaxAbsBitsOf(out));
    }
    if (!e.ok()) return FormatErrorStatus("powersgd", e);
    return out;
  }

  const std::vector<float>& residual() const { return state_; }

 private:
  void Compensate(const std::vector<float>& g) {
    const bool first = rounds_ == 0 || state_n_ != g.size();
    ++rounds_;
    state_n_ = g.size();
    if (!memory_) {
      m_ = g;
      return;
    }
    state_.resize(g.size());
    for (size_t i = 0; i < g.size(); ++i) {
      state_[i] = first ? g[i] : PowerSgdCompensate(g[i], state_[i]);
    }
    m_ = state_;
  }

  std::vector<float> MultiplyByQ(const CodecContext& ctx) {
    round_.Start(m_.size(), ctx);
    std::vector<float> p = HostP(m_, round_.shape(), round_.q());
    const absl::Status s = round_.FinishFirst(MaxAbsBitsOf(p), ctx);
    EXPECT_TRUE(s.ok()) << s;
    return p;
  }

  absl::Status MultiplyByP() {
    q_local_ = HostQ(m_, round_.shape(), round_.p_hat());
    return round_.FinishSecond(MaxAbsBitsOf(q_local_));
  }

  uint32_t UpdateMemory() {
    if (!memory_) return 0;
    const std::vector<float> approximation =
        HostProduct(round_.p_hat().data(), q_local_.data(), round_.shape(), round_.n());
    for (size_t i = 0; i < state_.size(); ++i) {
      state_[i] = ResidualUpdate(state_[i], approximation[i]);
    }
    return MaxAbsBitsOf(approximation);
  }

  powersgd::RoundState round_;
  bool memory_;
  uint64_t rounds_ = 0;
  size_t state_n_ = 0;
  std::vector<float> state_;  // the fused memory's: the compensated input, then the residual
  std::vector<float> m_;
  std::vector<float> q_local_;
};

// ---- The CPU side: the worker engine's two-round sequence (two_round.h).

struct CpuWorker {
  std::unique_ptr<Codec> codec;
  TwoRoundCodec* two_round = nullptr;
  std::unique_ptr<Memory> memory;  // null: none
  std::vector<float> compensated;
};

CpuWorker MakeCpuWorker(const CodecParams& params, bool memory) {
  CpuWorker w;
  w.codec = Make("powersgd", params);
  w.two_round = AsTwoRound(*w.codec);
  if (memory) {
    auto m = CreateMemory("powersgd");
    EXPECT_TRUE(m.ok()) << m.status();
    w.memory = std::move(*m);
  }
  return w;
}

std::vector<uint8_t> CpuFirst(CpuWorker& w, const std::vector<float>& g, const CodecContext& ctx) {
  w.compensated = g;
  if (w.memory) {
    EXPECT_TRUE(w.memory->Compensate(g, ctx, absl::MakeSpan(w.compensated)).ok());
  }
  std::vector<uint8_t> out(w.two_round->FirstRoundBytes(g.size()));
  auto bytes = w.two_round->EncodeFirst(w.compensated, ctx, absl::MakeSpan(out));
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return out;
}

std::vector<uint8_t> CpuSecond(CpuWorker& w, const std::vector<float>& sum,
                               const CodecContext& ctx) {
  const size_t n = w.compensated.size();
  std::vector<uint8_t> out(w.two_round->SecondRoundBytes(n));
  auto bytes = w.two_round->EncodeSecond(sum, ctx, absl::MakeSpan(out));
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  if (w.memory) {
    std::vector<float> approximation(n);
    EXPECT_TRUE(w.two_round->LocalApproximation(absl::MakeSpan(approximation)).ok());
    EXPECT_TRUE(w.memory->Update(w.compensated, approximation, ctx).ok());
  }
  return out;
}

struct ShapeCase {
  size_t n;
  size_t rank;
  size_t cols;  // the parameter: 0 near-square
};

void PrintTo(const ShapeCase& c, std::ostream* os) {
  *os << "n=" << c.n << " rank=" << c.rank << " cols=" << c.cols;
}

CodecParams ParamsOf(const ShapeCase& c) {
  return {{"rank", std::to_string(c.rank)}, {"cols", std::to_string(c.cols)}};
}

class SharedMathPowerSgd : public ::testing::TestWithParam<ShapeCase> {};

// Three workers, five rounds (the third of zero gradients: zero columns, Q drawn again), with
// and without the memory: every payload, every decoded value and the residual, bit for bit.
TEST_P(SharedMathPowerSgd, TwoRoundsWithSeveralWorkersMatchTheCpuCodec) {
  const ShapeCase c = GetParam();
  constexpr size_t kWorkers = 3;
  for (bool memory : {true, false}) {
    std::vector<CpuWorker> cpu;
    std::vector<HostPowerSgd> gpu;
    for (size_t w = 0; w < kWorkers; ++w) {
      cpu.push_back(MakeCpuWorker(ParamsOf(c), memory));
      gpu.emplace_back(c.rank, c.cols, memory);
    }
    for (uint32_t round = 0; round < 5; ++round) {
      SCOPED_TRACE(testing::Message() << "memory " << memory << ", round " << round);
      std::vector<std::vector<uint8_t>> first(kWorkers), second(kWorkers);
      std::vector<CodecContext> ctx(kWorkers);
      std::vector<std::vector<float>> g(kWorkers);
      for (size_t w = 0; w < kWorkers; ++w) {
        ctx[w] = Context(round);
        ctx[w].node = static_cast<uint32_t>(w);
        g[w] = round == 2 ? std::vector<float>(c.n, 0.0f)
                          : RandomGradient(c.n, static_cast<uint32_t>(100 * round + w));
        first[w] = CpuFirst(cpu[w], g[w], ctx[w]);
        ASSERT_EQ(gpu[w].EncodeFirst(g[w], ctx[w]), first[w]) << "payload 1 of worker " << w;
      }
      const std::vector<float> sum_p = ServerSum(first);
      for (size_t w = 0; w < kWorkers; ++w) {
        second[w] = CpuSecond(cpu[w], sum_p, ctx[w]);
        auto host = gpu[w].EncodeSecond(sum_p, ctx[w]);
        ASSERT_TRUE(host.ok()) << host.status();
        ASSERT_EQ(*host, second[w]) << "payload 2 of worker " << w;
        if (memory) ExpectSameBits(gpu[w].residual(), *cpu[w].memory->StateVectors()[0]);
      }
      const std::vector<float> sum_q = ServerSum(second);
      for (size_t w = 0; w < kWorkers; ++w) {
        std::vector<float> out(c.n);
        ASSERT_TRUE(cpu[w].two_round->DecodeSecond(sum_q, ctx[w], absl::MakeSpan(out)).ok());
        auto host = gpu[w].DecodeSecond(sum_q, ctx[w], c.n);
        ASSERT_TRUE(host.ok()) << host.status();
        ExpectSameBits(*host, out);
      }
    }
  }
}

// The single payload (Codec::Encode) with the fused memory over rounds, against
// EncodeWithMemory; its decode against the CPU decoder.
TEST_P(SharedMathPowerSgd, SinglePayloadWithTheMemoryMatchesEncodeWithMemory) {
  const ShapeCase c = GetParam();
  auto codec = Make("powersgd", ParamsOf(c));
  auto memory = CreateMemory("powersgd");
  ASSERT_TRUE(memory.ok());
  HostPowerSgd gpu(c.rank, c.cols, true);
  std::vector<float> compensated, decoded;
  for (uint32_t round = 0; round < 4; ++round) {
    const std::vector<float> g =
        round == 1 ? std::vector<float>(c.n, 0.0f) : RandomGradient(c.n, 7 + round);
    std::vector<uint8_t> cpu(codec->MaxEncodedBytes(c.n));
    auto bytes = EncodeWithMemory(*codec, memory->get(), g, Context(round), absl::MakeSpan(cpu),
                                  compensated, decoded);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    cpu.resize(*bytes);
    auto host = gpu.Encode(g, Context(round));
    ASSERT_TRUE(host.ok()) << host.status();
    ASSERT_EQ(*host, cpu) << "round " << round;
    ExpectSameBits(gpu.residual(), *(*memory)->StateVectors()[0]);
    auto host_decoded = gpu.Decode(cpu, c.n);
    ASSERT_TRUE(host_decoded.ok()) << host_decoded.status();
    ExpectSameBits(*host_decoded, CpuDecode(*codec, cpu, c.n, Context(round)));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SharedMathPowerSgd,
    ::testing::Values(ShapeCase{37, 1, 0}, ShapeCase{1000, 2, 0}, ShapeCase{4099, 3, 0},
                      ShapeCase{1001, 4, 7},    // cols 7: no lanes, only the tail
                      ShapeCase{5003, 5, 130},  // rows 39, the last one short
                      ShapeCase{50, 64, 0},     // rank above rows and cols: 7
                      ShapeCase{2, 1, 0}, ShapeCase{20011, 2, 300}, ShapeCase{100003, 1, 0}));

// Values that show the order of a sum: small ones (1 to 2) and, per segment of `length`
// elements, pairs +-2^60: whether a small value survives depends on whether its pair cancels
// before or after it is added (2^60 + 1 == 2^60 in double). stride 1: the segments are rows of
// M (consecutive); stride `segments`: they are its columns.
std::vector<float> WithCancellingPairs(size_t segments, size_t length, size_t stride,
                                       uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> x(segments * length);
  for (float& v : x) v = 1.0f + static_cast<float>(rng() % 1000) / 1000.0f;
  for (size_t segment = 0; segment < segments; ++segment) {
    for (int pair = 0; pair < 3 && length > 1; ++pair) {
      const size_t a = rng() % length, b = (a + 1 + rng() % (length - 1)) % length;
      const float big = std::ldexp(static_cast<float>(1 + rng() % 4), 60);
      const size_t base = stride == 1 ? segment * length : segment;
      x[base + a * stride] = big;
      x[base + b * stride] = -big;
    }
  }
  return x;
}

// P's entry as the GPU sums it (8 lane threads, the tail, CombineDotLanes) is the CPU's Dot
// over the zero-padded row, bit for bit in double, at every width (lanes only, a tail only,
// both, the short last row).
TEST(SharedMathPowerSgdOrder, PLanesAreTheCpuDotInDouble) {
  int differs_from_a_plain_sum = 0;
  for (size_t cols : {5, 8, 13, 16, 37, 1000}) {
    std::vector<float> x = WithCancellingPairs(3, cols, 1, static_cast<uint32_t>(cols));
    const size_t n = x.size() - cols / 2;  // the last row short
    const std::vector<float> q(cols, 1.0f);
    for (size_t row_begin = 0; row_begin < n; row_begin += cols) {
      std::vector<float> row(cols, 0.0f);
      for (size_t j = 0; j < cols && row_begin + j < n; ++j) row[j] = x[row_begin + j];
      double lanes[powersgd::kDotLanes];
      for (size_t l = 0; l < powersgd::kDotLanes; ++l) {
        lanes[l] = powersgd::RowDotLane(x.data(), n, row_begin, cols, q.data(), l);
      }
      const double gpu = powersgd::CombineDotLanes(
          lanes, powersgd::RowDotTail(x.data(), n, row_begin, cols, q.data()));
      const double cpu = powersgd::Dot(row.data(), q.data(), cols);
      EXPECT_EQ(std::memcmp(&gpu, &cpu, sizeof(double)), 0)
          << "cols " << cols << ", row " << row_begin / cols << ": " << gpu << " vs " << cpu;
      double plain = 0;
      for (float v : row) plain += v;
      differs_from_a_plain_sum += plain != cpu ? 1 : 0;
    }
  }
  EXPECT_GT(differs_from_a_plain_sum, 0) << "the inputs do not show the order";
}

// Q = M^T P^ and P^ Q^T where the order of the sums shows in the floats: rank 1 with a flat P^
// (a summed P of ones: P^ = 1/8 everywhere) and columns of M with cancelling pairs, so the
// rows' order decides Q; a single payload whose products over the rank cancel (Q' all ones,
// P^'s rows a shuffle of 2^60, -2^60 and two small values), so the rank's order decides the
// decoded values.
TEST(SharedMathPowerSgdOrder, QAndTheProductSumInTheCpuCodecsOrder) {
  constexpr size_t kRows = 64, kCols = 40;
  const std::vector<float> x = WithCancellingPairs(kCols, kRows, kCols, 5);
  CpuWorker cpu = MakeCpuWorker({{"rank", "1"}, {"cols", "40"}}, false);
  HostPowerSgd gpu(1, kCols, false);
  ASSERT_EQ(gpu.EncodeFirst(x, Context()), CpuFirst(cpu, x, Context()));
  const std::vector<float> ones(kRows, 1.0f);
  auto host = gpu.EncodeSecond(ones, Context());
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ(*host, CpuSecond(cpu, ones, Context()));

  const size_t n = kRows * kCols;
  auto codec = Make("powersgd", {{"rank", "4"}, {"cols", "40"}});
  std::vector<float> p_hat(4 * kRows);
  std::mt19937 rng(8);
  for (size_t i = 0; i < kRows; ++i) {
    float row[4] = {std::ldexp(1.0f, 60), -std::ldexp(1.0f, 60), 1.5f, 1.25f};
    std::shuffle(row, row + 4, rng);
    for (size_t k = 0; k < 4; ++k) p_hat[k * kRows + i] = row[k];
  }
  std::vector<uint8_t> payload;
  AppendU32(payload, 0);
  AppendU32(payload, static_cast<uint32_t>(n));
  for (float v : p_hat) AppendF32(payload, v);
  for (size_t j = 0; j < 4 * kCols; ++j) AppendF32(payload, 1.0f);
  const std::vector<float> cpu_decoded = CpuDecode(*codec, payload, n, Context());
  auto host_decoded = HostPowerSgd(4, kCols, false).Decode(payload, n);
  ASSERT_TRUE(host_decoded.ok()) << host_decoded.status();
  ExpectSameBits(*host_decoded, cpu_decoded);
}

// A malformed single payload: the GPU decoder's host checks and kernel report what the CPU
// decoder reports, word for word.
TEST(SharedMathPowerSgdDecode, MalformedPayloadsAreReportedAsTheCpuCodecReportsThem) {
  const size_t n = 1001;
  const CodecParams params = {{"rank", "2"}};
  const Shape s = powersgd::ShapeFor(n, 2, 0);
  struct Corruption {
    const char* what;
    std::function<void(std::vector<uint8_t>&)> apply;
  };
  const std::vector<Corruption> corruptions = {
      {"one byte short", [](auto& p) { p.pop_back(); }},
      {"one byte too many", [](auto& p) { p.push_back(0); }},
      {"a stage 1 header", [](auto& p) { p[0] = 1; }},
      {"another count", [](auto& p) { p[4] ^= 1; }},
      {"a NaN factor", [](auto& p) { SetF32(p, 8 + 4 * 17, std::nanf("")); }},
      {"an Inf factor in Q", [s](auto& p) { SetF32(p, 8 + 4 * (2 * s.rows + 3), INFINITY); }},
      {"a product beyond the float range",
       [](auto& p) {
         for (size_t at = 8; at + 4 <= p.size(); at += 4) SetF32(p, at, 1e30f);
       }},
  };
  auto codec = Make("powersgd", params);
  const HostPowerSgd gpu(2, 0, false);
  const std::vector<uint8_t> good = CpuEncode(*codec, RandomGradient(n, 3), Context());
  ASSERT_EQ(good.size(), powersgd::SinglePayloadBytes(s));
  for (const Corruption& c : corruptions) {
    std::vector<uint8_t> payload = good;
    c.apply(payload);
    const std::string cpu = CpuDecodeStatus(*codec, payload, n, Context());
    EXPECT_NE(cpu, "OK") << c.what;
    EXPECT_EQ(gpu.Decode(payload, n).status().ToString(), cpu) << c.what;
  }
}

// The rounds' errors: both codecs return RoundState's, in the same order of checks.
TEST(SharedMathPowerSgdDecode, BadRoundsAreReportedAsTheCpuCodecReportsThem) {
  const size_t n = 300;
  const std::vector<float> g = RandomGradient(n, 5);
  CpuWorker cpu = MakeCpuWorker({}, false);
  HostPowerSgd gpu(1, 0, false);
  auto second_status = [&](const std::vector<float>& sum, const CodecContext& ctx) {
    std::vector<uint8_t> out(cpu.two_round->SecondRoundBytes(n));
    const std::string c =
        cpu.two_round->EncodeSecond(sum, ctx, absl::MakeSpan(out)).status().ToString();
    EXPECT_EQ(gpu.EncodeSecond(sum, ctx).status().ToString(), c);
    return c;
  };
  const size_t rows = powersgd::ShapeFor(n, 1, 0).rows;
  EXPECT_NE(second_status(std::vector<float>(rows, 1.0f), Context()), "OK");  // before stage 1
  ASSERT_EQ(gpu.EncodeFirst(g, Context()), CpuFirst(cpu, g, Context()));
  EXPECT_NE(second_status(std::vector<float>(rows, 1.0f), Context(4)), "OK");  // another round
  EXPECT_NE(second_status(std::vector<float>(rows + 1, 1.0f), Context()), "OK");
  std::vector<float> nan_sum(rows, 1.0f);
  nan_sum[5] = std::nanf("");
  EXPECT_NE(second_status(nan_sum, Context()), "OK");
  std::vector<float> out(n);
  const std::string cpu_decode =
      cpu.two_round->DecodeSecond(std::vector<float>(17, 1.0f), Context(), absl::MakeSpan(out))
          .ToString();
  EXPECT_NE(cpu_decode, "OK");  // before stage 2
  EXPECT_EQ(gpu.DecodeSecond(std::vector<float>(17, 1.0f), Context(), n).status().ToString(),
            cpu_decode);
}

// Inputs whose P overflows the float range (for some of the rounds' Q draws): the same error
// from both, the same payload otherwise.
TEST(SharedMathPowerSgdDecode, OverflowInPIsReportedAsTheCpuCodecReportsIt) {
  const std::vector<float> g(256, 3e38f);
  int overflows = 0;
  for (uint32_t round = 0; round < 20; ++round) {
    auto codec = Make("powersgd");
    std::vector<uint8_t> out(AsTwoRound(*codec)->FirstRoundBytes(g.size()));
    const absl::Status cpu =
        AsTwoRound(*codec)->EncodeFirst(g, Context(round), absl::MakeSpan(out)).status();
    powersgd::RoundState state(1, 0);
    state.Start(g.size(), Context(round));
    const std::vector<float> p = HostP(g, state.shape(), state.q());
    EXPECT_EQ(state.FinishFirst(MaxAbsBitsOf(p), Context(round)).ToString(), cpu.ToString());
    if (cpu.ok()) {
      EXPECT_EQ(StagePayload(1, p), out);
    }
    overflows += cpu.ok() ? 0 : 1;
  }
  EXPECT_GT(overflows, 0);
}

}  // namespace
}  // namespace bytecomp::compress
