// artopk through its two-round interface: W simulated workers with residual memories, its
// aggregator standing in for the servers, each round checked bit for bit against a reference
// built from topk's own selection of the chooser's compensated input.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/match.h"
#include "bytecomp/compress/format/artopk_format.h"
#include "bytecomp/compress/format/sparse_format.h"
#include "bytecomp/compress/two_round.h"
#include "codec_test_util.h"

namespace bytecomp::compress {
namespace {

using testing::MustCreate;
using testing::RandomNormal;
using testing::TestContext;

std::unique_ptr<Aggregator> ServerAggregator(const CodecParams& params) {
  auto agg = CreateAggregator("artopk", params);
  EXPECT_TRUE(agg.ok()) << agg.status();
  return agg.ok() ? std::move(*agg) : nullptr;
}

// topk's indices of x: what the chooser sends.
std::vector<uint32_t> TopkIndices(absl::Span<const float> x, const std::string& ratio) {
  auto topk = MustCreate("topk", {{"ratio", ratio}});
  auto message = testing::EncodeToVector(*topk, x, TestContext());
  EXPECT_TRUE(message.ok()) << message.status();
  const sparse::Header h = sparse::ReadHeader(message->data());
  std::vector<uint32_t> idx(h.k);
  const FormatError e =
      sparse::ReadIndexSection(message->data() + sparse::kHeaderBytes + 4 * size_t{h.k},
                               h.index_bytes, h.k, x.size(), h.encoding, h.width, idx.data());
  EXPECT_TRUE(e.ok());
  return idx;
}

using Worker = testing::TwoRoundWorker;

std::vector<Worker> MakeWorkers(size_t count, const CodecParams& params) {
  return testing::MakeTwoRoundWorkers(count, "artopk", params, "residual");
}

// What one round through the servers looks like from the codec's side.
struct RoundResult {
  std::vector<size_t> first_push_bytes;  // per worker
  uint32_t chooser = 0;                  // from the stage 1 reply
  uint32_t next_chooser = 0;             // from the stage 2 reply
};

RoundResult RunRound(std::vector<Worker>& workers, Aggregator& server,
                     const std::vector<std::vector<float>>& inputs, uint64_t round) {
  RoundResult result;
  const size_t n = inputs[0].size();
  server.Reset(n);
  for (size_t w = 0; w < workers.size(); ++w) {
    Worker& wk = workers[w];
    const CodecContext ctx = TestContext(round, static_cast<uint32_t>(w));
    wk.compensated.assign(n, 0.0f);
    EXPECT_TRUE(wk.memory->Compensate(inputs[w], ctx, absl::MakeSpan(wk.compensated)).ok());
    std::vector<uint8_t> payload(wk.two_round->FirstRoundBytes(n));
    auto bytes = wk.two_round->EncodeFirst(wk.compensated, ctx, absl::MakeSpan(payload));
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    result.first_push_bytes.push_back(*bytes);
    payload.resize(*bytes);
    auto added = server.Add(payload, ctx);
    EXPECT_TRUE(added.ok()) << added;
  }
  auto first = server.Finish();
  EXPECT_TRUE(first.ok()) << first.status();
  const std::vector<float> reply1(first->begin(), first->end());
  std::memcpy(&result.chooser, reply1.data(), 4);
  const std::vector<float> reply2 = testing::RunSecondRound(workers, server, reply1, n, round);
  std::memcpy(&result.next_chooser, reply2.data() + reply2.size() - 1, 4);
  return result;
}

// The expected sum: the chooser's top-k indices, every worker's compensated values there,
// added in rank order in fp32; zeros elsewhere.
std::vector<float> Reference(const std::vector<Worker>& workers, uint32_t chooser,
                             const std::string& ratio) {
  const size_t n = workers[0].compensated.size();
  std::vector<float> out(n, 0.0f);
  for (uint32_t i : TopkIndices(workers[chooser].compensated, ratio)) {
    float sum = 0.0f;  // as the servers start their sum (0 + -0 is +0)
    for (const Worker& w : workers) sum += w.compensated[i];
    out[i] = sum;
  }
  return out;
}

void ExpectBitEqual(const std::vector<float>& got, const std::vector<float>& expected,
                    const std::string& what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::memcmp(&got[i], &expected[i], 4), 0)
        << what << " element " << i << ": got " << got[i] << " expected " << expected[i];
  }
}

TEST(ArtopkTest, PayloadSizesFollowTheirFormulas) {
  auto codec = MustCreate("artopk", {{"ratio", "0.01"}});
  EXPECT_TRUE(codec->properties().two_round);
  EXPECT_FALSE(codec->properties().sparse);
  TwoRoundCodec* two = AsTwoRound(*codec);
  ASSERT_NE(two, nullptr);
  // n = 4099: k = ceil(40.99) = 41. Stage 1 at most 28 + 4k, stage 2 exactly 8 + 4k.
  EXPECT_EQ(two->FirstRoundBytes(4099), 28u + 4u * 41u);
  EXPECT_EQ(two->SecondRoundBytes(4099), 8u + 4u * 41u);
  EXPECT_EQ(artopk::FirstReplyBytes(5), 16u + 8u);
  EXPECT_EQ(artopk::SecondReplyBytes(41), 4u * 41u + 4u);
  // The single payload is topk's message.
  EXPECT_EQ(codec->MaxEncodedBytes(4099),
            MustCreate("topk", {{"ratio", "0.01"}})->MaxEncodedBytes(4099));
}

TEST(ArtopkTest, FourWorkersRoundRobinMatchTheReferenceBitForBit) {
  const size_t W = 4, n = 4099;
  const std::string ratio = "0.01";
  auto workers = MakeWorkers(W, {{"ratio", ratio}});
  auto server = ServerAggregator({{"ratio", ratio}});
  const size_t k = sparse::KeptCount(0.01, n);
  const uint64_t key = TestContext().key;
  for (uint64_t round = 0; round < 6; ++round) {
    std::vector<std::vector<float>> inputs;
    for (size_t w = 0; w < W; ++w) inputs.push_back(testing::RandomHeavyTail(n, 100 * round + w));
    const RoundResult r = RunRound(workers, *server, inputs, round);
    const uint32_t chooser = static_cast<uint32_t>(artopk::RoundRobinPosition(round, key, W));
    EXPECT_EQ(r.chooser, chooser) << "round " << round;
    EXPECT_EQ(r.next_chooser, artopk::RoundRobinPosition(round + 1, key, W));
    for (size_t w = 0; w < W; ++w) {
      // Round 0: nobody knows the chooser, every worker sends a candidate; later only the
      // chooser does, the others send the 28-byte header.
      const std::vector<uint32_t> own = TopkIndices(workers[w].compensated, ratio);
      uint32_t max_delta = 0;
      size_t varint = 0;
      for (size_t j = 0; j < own.size(); ++j) {
        max_delta = std::max(max_delta, sparse::IndexDelta(own.data(), j));
        varint += sparse::VarintLength(sparse::IndexDelta(own.data(), j));
      }
      const size_t section = sparse::ChooseIndexPlan(k, max_delta, varint).bytes;
      const bool sends = round == 0 || w == chooser;
      EXPECT_EQ(r.first_push_bytes[w], 28u + (sends ? section : 0))
          << "round " << round << " worker " << w;
    }
    const std::vector<float> expected = Reference(workers, chooser, ratio);
    for (size_t w = 0; w < W; ++w) {
      ExpectBitEqual(workers[w].output, expected, "round " + std::to_string(round));
      // Error feedback: what was sent plus the new residual is the compensated input, exactly;
      // the residual is zero at the chosen indices.
      const std::vector<float>& residual = *workers[w].memory->StateVectors()[0];
      const std::vector<float>& local = workers[w].local;
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(local[i] + residual[i], workers[w].compensated[i]) << i;
      }
      for (uint32_t i : TopkIndices(workers[chooser].compensated, ratio)) {
        ASSERT_EQ(local[i], workers[w].compensated[i]) << i;
        ASSERT_EQ(residual[i], 0.0f) << i;
      }
    }
  }
}

TEST(ArtopkTest, LargestNormChoosesTheWorkerWithTheLargestSmoothedNorm) {
  const size_t W = 4, n = 1000;
  auto workers =
      MakeWorkers(W, {{"ratio", "0.05"}, {"chooser", "largest_norm"}, {"norm_smoothing", "0.5"}});
  auto server =
      ServerAggregator({{"ratio", "0.05"}, {"chooser", "largest_norm"}, {"norm_smoothing", "0.5"}});
  // Worker w's gradients have scale `scales[round][w]`: the largest moves from worker 3 to
  // worker 1, and the smoothing follows a round later.
  const std::vector<std::vector<float>> scales = {
      {1, 2, 3, 4}, {1, 2, 3, 4}, {1, 20, 3, 4}, {1, 20, 3, 4}, {1, 20, 3, 4}};
  std::vector<double> smoothed(W, 0.0);
  uint32_t expected_chooser = 0;
  for (uint64_t round = 0; round < scales.size(); ++round) {
    std::vector<std::vector<float>> inputs;
    for (size_t w = 0; w < W; ++w)
      inputs.push_back(RandomNormal(n, 7 * round + w, scales[round][w]));
    const RoundResult r = RunRound(workers, *server, inputs, round);
    for (size_t w = 0; w < W; ++w) {
      double sq = 0;
      for (float x : workers[w].compensated) sq += static_cast<double>(x) * x;
      smoothed[w] = round == 0 ? std::sqrt(sq) : 0.5 * smoothed[w] + 0.5 * std::sqrt(sq);
    }
    const uint32_t largest = static_cast<uint32_t>(
        std::max_element(smoothed.begin(), smoothed.end()) - smoothed.begin());
    // Round 0: chosen from the norms of this round's stage 1; later from the last stage 2's.
    if (round == 0) expected_chooser = largest;
    EXPECT_EQ(r.chooser, expected_chooser) << "round " << round;
    EXPECT_EQ(r.next_chooser, largest) << "round " << round;
    ExpectBitEqual(workers[0].output, Reference(workers, r.chooser, "0.05"),
                   "round " + std::to_string(round));
    expected_chooser = largest;
  }
  EXPECT_EQ(expected_chooser, 1u);
}

TEST(ArtopkTest, AdversarialInputsMatchTheReference) {
  for (const auto& in : testing::AdversarialInputs()) {
    const size_t W = 3;
    auto workers = MakeWorkers(W, {{"ratio", "0.1"}});
    auto server = ServerAggregator({{"ratio", "0.1"}});
    for (uint64_t round = 0; round < 3; ++round) {
      std::vector<std::vector<float>> inputs(W, in.values);
      for (size_t w = 0; w < W; ++w) {
        for (float& x : inputs[w]) x = x * static_cast<float>(w + 1) / 3.0f;
      }
      const RoundResult r = RunRound(workers, *server, inputs, round);
      for (size_t w = 0; w < W; ++w) {
        ExpectBitEqual(workers[w].output, Reference(workers, r.chooser, "0.1"),
                       in.name + " round " + std::to_string(round));
      }
    }
  }
}

TEST(ArtopkTest, NonFiniteInputIsRejectedNamingTheIndex) {
  auto codec = MustCreate("artopk");
  TwoRoundCodec* two = AsTwoRound(*codec);
  auto x = RandomNormal(300, 1);
  x[77] = std::numeric_limits<float>::infinity();
  std::vector<uint8_t> out(two->FirstRoundBytes(300));
  auto bytes = two->EncodeFirst(x, TestContext(), absl::MakeSpan(out));
  ASSERT_FALSE(bytes.ok());
  EXPECT_TRUE(absl::StrContains(bytes.status().message(), "element 77 of 300")) << bytes.status();
}

TEST(ArtopkTest, CallsOutOfOrderAndBadRepliesAreErrors) {
  auto codec = MustCreate("artopk", {{"ratio", "0.1"}});
  TwoRoundCodec* two = AsTwoRound(*codec);
  const size_t n = 100;
  std::vector<uint8_t> out(two->FirstRoundBytes(n));
  std::vector<float> output(n);
  EXPECT_EQ(two->EncodeSecond({}, TestContext(), absl::MakeSpan(out)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(two->LocalApproximation(absl::MakeSpan(output)).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(two->EncodeFirst(RandomNormal(n, 2), TestContext(4), absl::MakeSpan(out)).ok());
  // Another round's call.
  EXPECT_EQ(two->EncodeSecond({}, TestContext(5), absl::MakeSpan(out)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // A reply with the wrong k, then one whose index is out of range.
  std::vector<uint8_t> reply(artopk::FirstReplyBytes(4 * 10));
  artopk::WriteFirstReplyHeader(reply.data(), {.chooser = 0, .k = 9, .index_bytes = 40});
  std::vector<float> words(reply.size() / 4);
  std::memcpy(words.data(), reply.data(), reply.size());
  auto bad_k = two->EncodeSecond(words, TestContext(4), absl::MakeSpan(out));
  EXPECT_EQ(bad_k.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad_k.status().message(), "k = 9, expected 10")) << bad_k.status();
  artopk::WriteFirstReplyHeader(reply.data(), {.chooser = 0, .k = 10, .index_bytes = 40});
  for (uint32_t j = 0; j < 10; ++j) PutU32(reply.data() + 16 + 4 * j, 95 + j);
  std::memcpy(words.data(), reply.data(), reply.size());
  auto out_of_range = two->EncodeSecond(words, TestContext(4), absl::MakeSpan(out));
  EXPECT_TRUE(
      absl::StrContains(out_of_range.status().message(), "not strictly increasing below 100"))
      << out_of_range.status();
}

// Pushes as a test writes them.
std::vector<uint8_t> FirstPush(size_t n, size_t k, uint32_t expected, float norm,
                               const std::vector<uint32_t>& candidate) {
  std::vector<uint8_t> p(artopk::kFirstPushHeaderBytes + 4 * candidate.size());
  artopk::WriteFirstPushHeader(p.data(),
                               {.n = static_cast<uint32_t>(n),
                                .k = static_cast<uint32_t>(k),
                                .norm = norm,
                                .expected_chooser = expected,
                                .has_candidate = !candidate.empty(),
                                .encoding = sparse::kRaw,
                                .index_bytes = static_cast<uint32_t>(4 * candidate.size())});
  for (size_t j = 0; j < candidate.size(); ++j) PutU32(p.data() + 28 + 4 * j, candidate[j]);
  return p;
}

TEST(ArtopkTest, AggregatorRejectsMalformedAndInconsistentPushes) {
  const size_t n = 100, k = 10;  // ratio 0.1
  auto server = ServerAggregator({{"ratio", "0.1"}});
  std::vector<uint32_t> good(k);
  for (uint32_t j = 0; j < k; ++j) good[j] = 3 * j;
  auto rejected = [&](const std::vector<uint8_t>& push, uint32_t node, absl::string_view text) {
    auto s = server->Add(push, TestContext(7, node));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), text)) << s;
  };
  server->Reset(n);
  rejected({1, 0, 0}, 0, "no stage field");
  rejected({3, 0, 0, 0}, 0, "stage 3 payload, expected stage 2");
  auto truncated = FirstPush(n, k, artopk::kUnknownChooser, 1.0f, good);
  truncated.pop_back();
  rejected(truncated, 0, "header says");
  rejected(FirstPush(n, k - 1, artopk::kUnknownChooser, 1.0f, {}), 0, "k = 9, expected 10");
  rejected(FirstPush(n + 1, k, artopk::kUnknownChooser, 1.0f, good), 0, "101");
  rejected(FirstPush(n, k, artopk::kUnknownChooser, std::nanf(""), good), 0, "norm");
  rejected(FirstPush(n, k, artopk::kUnknownChooser, -1.0f, good), 0, "negative");
  auto descending = good;
  std::reverse(descending.begin(), descending.end());
  rejected(FirstPush(n, k, artopk::kUnknownChooser, 1.0f, descending), 0,
           "not strictly increasing");
  auto flags = FirstPush(n, k, 2, 1.0f, {});
  flags[21] = 1;  // an index encoding without a candidate
  rejected(flags, 0, "candidate flag 0, index encoding 1");
  // Unknown chooser: every worker must send a candidate.
  rejected(FirstPush(n, k, artopk::kUnknownChooser, 1.0f, {}), 0, "did not send a candidate");
  EXPECT_EQ(server->count(), 0u);  // nothing bad was kept
  // Known chooser 2: worker 0 must not send one; then the workers must agree.
  rejected(FirstPush(n, k, 2, 1.0f, good), 0, "sent a candidate while the chooser is worker 2");
  ASSERT_TRUE(server->Add(FirstPush(n, k, 2, 1.0f, {}), TestContext(7, 0)).ok());
  rejected(FirstPush(n, k, 1, 1.0f, {}), 1,
           "worker 1 expects chooser worker 1, worker 0 expects worker 2");
  rejected(FirstPush(n, k, 2, 1.0f, good), 1, "sent a candidate");
  // Stage 2 payloads in a stage 1 round; another round's payload.
  std::vector<uint8_t> second(artopk::SecondPushBytes(k), 0);
  PutU32(second.data(), 2);
  rejected(second, 1, "stage 2 payload added to a stage 1 round");
  auto other_round = server->Add(FirstPush(n, k, 2, 1.0f, {}), TestContext(8, 1));
  EXPECT_TRUE(absl::StrContains(other_round.message(), "round 8")) << other_round;
  // The expected chooser never pushed: Finish fails naming it.
  ASSERT_TRUE(server->Add(FirstPush(n, k, 2, 1.0f, {}), TestContext(7, 1)).ok());
  auto finished = server->Finish();
  ASSERT_FALSE(finished.ok());
  EXPECT_TRUE(
      absl::StrContains(finished.status().message(), "worker 2 to choose, which did not push"))
      << finished.status();
  // Stage 2: size and finite values.
  server->Reset(n);
  auto short_second = second;
  short_second.pop_back();
  rejected(short_second, 0, "47 bytes for 100 elements (expected 48)");
  auto nan_second = second;
  PutF32(nan_second.data() + 8 + 4 * 3, std::numeric_limits<float>::infinity());
  rejected(nan_second, 0, "NaN or Inf");
}

TEST(ArtopkTest, BadParametersNameTheParameter) {
  for (const auto& [params, text] : std::vector<std::pair<CodecParams, std::string>>{
           {{{"ratio", "0"}}, "ratio"},
           {{{"ratio", "1.5"}}, "ratio"},
           {{{"chooser", "best"}}, "chooser"},
           {{{"norm_smoothing", "1"}}, "norm_smoothing"},
           {{{"norm_smoothing", "-0.1"}}, "norm_smoothing"},
           {{{"rank", "2"}}, "rank"}}) {
    auto codec = CreateCodec("artopk", params);
    ASSERT_FALSE(codec.ok()) << text;
    EXPECT_TRUE(absl::StrContains(codec.status().message(), text)) << codec.status();
  }
}

}  // namespace
}  // namespace bytecomp::compress
