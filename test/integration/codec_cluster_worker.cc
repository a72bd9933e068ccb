// A worker for the codec integration test: every tensor of the strategy file (one per entry,
// named by its name_pattern) goes through the cluster with that entry's codec, one-way or
// two-way, for several rounds; each pulled result must equal, bit for bit, the reference this
// worker computes locally: every worker's encode (with its error-feedback memory, from the
// same deterministic inputs), the server's aggregation in rank order, and for two-way the
// server's re-encode and this worker's decode.
//
// Usage: codec_cluster_worker --strategy FILE --rounds R --elements N [--machines 0,0,1,1]
// --machines (a hierarchical job): the machine of each worker rank. The reference then sums
// each machine's inputs in fp32 in rank order (its local ranks) and applies the codec to that
// sum as the machine's local root (its lowest rank) would: one encode per machine.
// All tensors have N elements (one partition), so the scheduler's balancing puts tensor t on
// server t % S, which the reference needs for the server's codec context.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "bytecomp/c_api.h"
#include "bytecomp/common.h"
#include "bytecomp/compress.h"
#include "bytecomp/compress/strategy.h"
#include "bytecomp/compress/two_round.h"

ABSL_FLAG(std::string, strategy, "", "the strategy file the scheduler was given");
ABSL_FLAG(int, rounds, 4, "rounds");
ABSL_FLAG(int, elements, 4099, "elements per tensor");
ABSL_FLAG(std::string, machines, "", "hierarchical job: machine index of each worker rank, e.g. 0,0,1,1");

namespace bc = bytecomp::compress;

namespace {

float Input(int rank, int round, int tensor, size_t i) {
  uint64_t x = (static_cast<uint64_t>(rank) << 48) ^ (static_cast<uint64_t>(round) << 32) ^
               (static_cast<uint64_t>(tensor) << 24) ^ i;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  const float u = static_cast<float>(x >> 40) / static_cast<float>(1 << 24);  // [0, 1)
  return (u - 0.5f) * (1.0f + static_cast<float>(i % 7));
}

template <typename T>
T Must(absl::StatusOr<T> v, const std::string& what) {
  if (!v.ok()) {
    std::fprintf(stderr, "REFERENCE FAILED (%s): %s\n", what.c_str(), std::string(v.status().message()).c_str());
    std::exit(3);
  }
  return *std::move(v);
}

void Must(const absl::Status& s, const std::string& what) {
  if (!s.ok()) {
    std::fprintf(stderr, "REFERENCE FAILED (%s): %s\n", what.c_str(), std::string(s.message()).c_str());
    std::exit(3);
  }
}

// The whole job's computation for one tensor, simulated on this worker.
struct Reference {
  bc::TensorPlan plan;
  std::vector<uint32_t> nodes;                        // the pushing worker ranks
  std::vector<std::unique_ptr<bc::Codec>> codecs;    // per pushing worker
  std::vector<std::unique_ptr<bc::Memory>> memories;  // per worker
  std::vector<std::vector<float>> compensated, decoded;
  std::unique_ptr<bc::Codec> server_codec;
  std::unique_ptr<bc::Memory> server_memory;
  std::vector<float> server_compensated, server_decoded;
  std::unique_ptr<bc::Codec> pull_decoder;

  Reference(const bc::TensorPlan& p, std::vector<uint32_t> pushers) : plan(p), nodes(std::move(pushers)) {
    const int workers = static_cast<int>(nodes.size());
    for (int r = 0; r < workers; ++r) {
      codecs.push_back(Must(bc::CreateCodec(plan.push.name(), bc::ParamsOf(plan.push)), "codec"));
      memories.push_back(plan.push.memory().empty()
                             ? nullptr
                             : Must(bc::CreateMemory(plan.push.memory(), bc::MemoryParamsOf(plan.push)), "memory"));
    }
    compensated.resize(workers);
    decoded.resize(workers);
    if (plan.two_way()) {
      server_codec = Must(bc::CreateCodec(plan.pull.name(), bc::ParamsOf(plan.pull)), "pull codec");
      if (!plan.pull.memory().empty()) {
        server_memory = Must(bc::CreateMemory(plan.pull.memory(), bc::MemoryParamsOf(plan.pull)), "pull memory");
      }
      pull_decoder = Must(bc::CreateCodec(plan.pull.name(), bc::ParamsOf(plan.pull)), "pull decoder");
    }
  }

  std::vector<float> Sum(const std::vector<std::vector<uint8_t>>& payloads, bc::CodecContext ctx,
                         size_t n) {
    std::unique_ptr<bc::Aggregator> agg =
        Must(bc::CreateAggregator(plan.push.name(), bc::ParamsOf(plan.push)), "aggregator");
    agg->Reset(n);
    for (size_t r = 0; r < payloads.size(); ++r) {
      ctx.node = nodes[r];
      Must(agg->Add(payloads[r], ctx), "aggregate");
    }
    absl::Span<const float> sum = Must(agg->Finish(), "finish");
    return std::vector<float>(sum.begin(), sum.end());
  }

  std::vector<float> Round(const std::vector<std::vector<float>>& inputs, bc::CodecContext ctx,
                           uint32_t server) {
    const size_t n = inputs[0].size();
    const int workers = static_cast<int>(inputs.size());
    std::vector<std::vector<uint8_t>> payloads(workers);
    if (bc::AsTwoRound(*codecs[0]) != nullptr) {
      for (int r = 0; r < workers; ++r) {
        bc::CodecContext c = ctx;
        c.node = nodes[r];
        compensated[r].resize(n);
        if (memories[r]) {
          Must(memories[r]->Compensate(inputs[r], c, absl::MakeSpan(compensated[r])), "compensate");
        } else {
          compensated[r] = inputs[r];
        }
        bc::TwoRoundCodec* two = bc::AsTwoRound(*codecs[r]);
        payloads[r].resize(4 + 4 * two->FirstRoundFloats(n));
        payloads[r].resize(Must(two->EncodeFirst(compensated[r], c, absl::MakeSpan(payloads[r])), "first"));
      }
      std::vector<float> sum1 = Sum(payloads, ctx, n);
      for (int r = 0; r < workers; ++r) {
        bc::CodecContext c = ctx;
        c.node = nodes[r];
        bc::TwoRoundCodec* two = bc::AsTwoRound(*codecs[r]);
        payloads[r].resize(4 + 4 * two->SecondRoundFloats(n));
        payloads[r].resize(Must(two->EncodeSecond(sum1, c, absl::MakeSpan(payloads[r])), "second"));
        if (memories[r]) {
          decoded[r].resize(n);
          Must(two->LocalApproximation(absl::MakeSpan(decoded[r])), "approximation");
          Must(memories[r]->Update(compensated[r], decoded[r], c), "update");
        }
      }
      std::vector<float> sum2 = Sum(payloads, ctx, n);
      std::vector<float> out(n);
      for (int r = 0; r < workers; ++r) {
        bc::CodecContext c = ctx;
        c.node = nodes[r];
        Must(bc::AsTwoRound(*codecs[r])->DecodeSecond(sum2, c, absl::MakeSpan(out)), "decode second");
      }
      return out;
    }
    for (int r = 0; r < workers; ++r) {
      bc::CodecContext c = ctx;
      c.node = nodes[r];
      payloads[r].resize(codecs[r]->MaxEncodedBytes(n));
      payloads[r].resize(Must(bc::EncodeWithMemory(*codecs[r], memories[r].get(), inputs[r], c,
                                                   absl::MakeSpan(payloads[r]), compensated[r], decoded[r]),
                              "encode"));
    }
    std::vector<float> sum = Sum(payloads, ctx, n);
    if (!plan.two_way()) return sum;
    bc::CodecContext c = ctx;
    c.node = server;
    std::vector<uint8_t> encoded(server_codec->MaxEncodedBytes(n));
    encoded.resize(Must(bc::EncodeWithMemory(*server_codec, server_memory.get(), sum, c,
                                             absl::MakeSpan(encoded), server_compensated, server_decoded),
                        "server encode"));
    std::vector<float> out(n);
    Must(pull_decoder->Decode(encoded, c, absl::MakeSpan(out)), "pull decode");
    return out;
  }
};

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<bytecomp::proto::Strategy> strategy = bc::LoadStrategyFile(absl::GetFlag(FLAGS_strategy));
  if (!strategy.ok()) {
    std::fprintf(stderr, "%s\n", std::string(strategy.status().message()).c_str());
    return 2;
  }
  strategy->set_version(1);
  const size_t n = static_cast<size_t>(absl::GetFlag(FLAGS_elements));
  const int rounds = absl::GetFlag(FLAGS_rounds);
  if (bytecomp_init(nullptr) != BYTECOMP_OK) {
    std::fprintf(stderr, "init: %s\n", bytecomp_last_error());
    return 2;
  }
  const int rank = bytecomp_rank();
  const int workers = bytecomp_size();
  const int servers = bytecomp_num_servers();
  const int tensors = strategy->tensors_size();
  // Machine of each worker rank (default: one machine each); the pushers are each machine's
  // lowest rank.
  std::vector<int> machine_of(workers);
  for (int r = 0; r < workers; ++r) machine_of[r] = r;
  if (const std::string m = absl::GetFlag(FLAGS_machines); !m.empty()) {
    std::vector<std::string> parts = absl::StrSplit(m, ',');
    if (static_cast<int>(parts.size()) != workers) {
      std::fprintf(stderr, "--machines names %zu workers, the job has %d\n", parts.size(), workers);
      return 2;
    }
    for (int r = 0; r < workers; ++r) machine_of[r] = std::atoi(parts[r].c_str());
  }
  std::vector<uint32_t> pushers;
  for (int r = 0; r < workers; ++r) {
    bool first = true;
    for (int q = 0; q < r; ++q) first = first && machine_of[q] != machine_of[r];
    if (first) pushers.push_back(static_cast<uint32_t>(r));
  }
  std::vector<std::string> names;
  std::vector<std::unique_ptr<Reference>> refs;
  for (const auto& t : strategy->tensors()) {
    names.push_back(t.name_pattern());
    refs.push_back(std::make_unique<Reference>(bc::PlanFor(*strategy, t.name_pattern(), n * 4), pushers));
  }
  std::vector<std::vector<float>> data(tensors, std::vector<float>(n));
  int mismatches = 0;
  for (int round = 0; round < rounds; ++round) {
    std::vector<bytecomp_handle_t> handles(tensors);
    for (int t = 0; t < tensors; ++t) {
      for (size_t i = 0; i < n; ++i) data[t][i] = Input(rank, round, t, i);
      if (bytecomp_push_pull(names[t].c_str(), data[t].data(), n, BYTECOMP_FLOAT32, 0, 0, &handles[t]) != BYTECOMP_OK) {
        std::fprintf(stderr, "push_pull %s: %s\n", names[t].c_str(), bytecomp_last_error());
        return 2;
      }
      // Round 0 declares the tensors one after another, so tensor t gets id t.
      if (round == 0 && bytecomp_wait(handles[t], 60000) != BYTECOMP_OK) {
        std::fprintf(stderr, "OPERATION FAILED %s: %s\n", names[t].c_str(), bytecomp_last_error());
        return 2;
      }
    }
    for (int t = 0; t < tensors; ++t) {
      if (round > 0 && bytecomp_wait(handles[t], 60000) != BYTECOMP_OK) {
        std::fprintf(stderr, "OPERATION FAILED %s round %d: %s\n", names[t].c_str(), round, bytecomp_last_error());
        return 2;
      }
      // Per pusher: the sum of its machine's inputs, in rank order, in fp32.
      std::vector<std::vector<float>> inputs(pushers.size(), std::vector<float>(n, 0.0f));
      for (size_t p = 0; p < pushers.size(); ++p) {
        bool first = true;
        for (int r = 0; r < workers; ++r) {
          if (machine_of[r] != machine_of[pushers[p]]) continue;
          for (size_t i = 0; i < n; ++i) {
            inputs[p][i] = first ? Input(r, round, t, i) : inputs[p][i] + Input(r, round, t, i);
          }
          first = false;
        }
      }
      bc::CodecContext ctx;
      ctx.key = bytecomp::MakeKey(static_cast<uint32_t>(t), 0);
      ctx.round = static_cast<uint64_t>(round);
      ctx.seed = strategy->seed();
      const std::vector<float> expected = refs[t]->Round(inputs, ctx, static_cast<uint32_t>(t % servers));
      size_t bad = 0, first_bad = 0;
      for (size_t i = 0; i < n; ++i) {
        if (std::memcmp(&expected[i], &data[t][i], 4) != 0) {
          if (bad++ == 0) first_bad = i;
        }
      }
      if (bad > 0) {
        ++mismatches;
        std::fprintf(stderr, "MISMATCH %s round %d: %zu of %zu elements differ, first [%zu]: got %.9g expected %.9g\n",
                     names[t].c_str(), round, bad, n, first_bad, data[t][first_bad], expected[first_bad]);
      }
    }
  }
  if (mismatches == 0) {
    std::printf("ALL %d TENSORS MATCH THE REFERENCE for %d rounds (W=%d S=%d)\n", tensors, rounds, workers, servers);
  }
  bytecomp_shutdown();
  return mismatches == 0 ? 0 : 1;
}
