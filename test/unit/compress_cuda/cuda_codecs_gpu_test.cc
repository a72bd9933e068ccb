// The CUDA codecs. The registry's checks run everywhere (no device needed: a bad name,
// parameter or memory is refused before any allocation). The kernels run only where a CUDA
// device exists (none in CI here: those tests skip themselves): they must produce the CPU
// codecs' bytes, with and without a fused memory, decode what the CPU encodes, and refuse
// malformed payloads.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "bytecomp/compress.h"
#include "bytecomp/compress/artopk_round.h"
#include "bytecomp/compress/cuda_codecs.h"
#include "bytecomp/compress/format/artopk_format.h"
#include "bytecomp/compress/format/little_endian.h"
#include "bytecomp/compress/format/sparse_format.h"
#include "bytecomp/compress/gpu_codecs.h"
#include "bytecomp/compress/strategy.h"
#include "bytecomp/compress/two_round.h"
#include "cuda_registry.h"  // compress/cuda/src: the registry the facts are checked against
#include "gtest/gtest.h"

namespace bytecomp {
namespace {

using compress::cuda::CudaCodec;

bool HaveDevice() {
  int devices = 0;
  const bool ok = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
  if (!ok) cudaGetLastError();
  return ok;
}

std::vector<float> Gradient(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

template <typename T>
struct DeviceArray {
  T* data = nullptr;
  explicit DeviceArray(size_t n) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
    data = static_cast<T*>(p);
  }
  ~DeviceArray() { cudaFree(data); }
};

TEST(CudaCodecRegistry, RefusesWhatTheCpuRegistryRefuses) {
  auto unknown = CudaCodec::Create("nosuchcodec", {});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound) << unknown.status();
  EXPECT_TRUE(absl::StrContains(unknown.status().message(), "topk")) << unknown.status();
  // The CPU codecs' parameter ranges: ratio in (0, 1], signum's momentum below 1.
  auto ratio = CudaCodec::Create("topk", {{"ratio", "1.5"}});
  EXPECT_EQ(ratio.status().code(), absl::StatusCode::kInvalidArgument) << ratio.status();
  EXPECT_TRUE(absl::StrContains(ratio.status().message(), "ratio")) << ratio.status();
  auto momentum = CudaCodec::Create("signum", {{"momentum", "1"}});
  EXPECT_EQ(momentum.status().code(), absl::StatusCode::kInvalidArgument);
  auto parameter = CudaCodec::Create("qsgd", {{"levels", "4"}});
  EXPECT_TRUE(absl::StrContains(parameter.status().message(), "quantum_num")) << parameter.status();
  auto memory = CudaCodec::Create("dgc", {}, "residual");
  EXPECT_EQ(memory.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(memory.status().message(), "dgc_momentum: dgc")) << memory.status();
  auto lr = CudaCodec::Create("efsignsgd", {}, "efsignsgd", {{"lr", "0"}});
  EXPECT_EQ(lr.status().code(), absl::StatusCode::kInvalidArgument) << lr.status();
  // The checks beyond the ranges that the CPU factories make: the same words.
  for (const auto& [codec, params] : std::vector<std::pair<std::string, compress::CodecParams>>{
           {"dithering", {{"k", "200"}, {"partition", "natural"}}},
           {"inceptionn", {{"error_bound", "1e-40"}}}}) {
    auto gpu = CudaCodec::Create(codec, params);
    EXPECT_EQ(gpu.status().code(), absl::StatusCode::kInvalidArgument) << gpu.status();
    EXPECT_EQ(gpu.status().message(), compress::CreateCodec(codec, params).status().message());
  }
}

// The codecs' facts (CodecFacts::gpu_kernel) and the CUDA registrations name the same codecs
// (the registry also checks this when it is built, and aborts).
TEST(CudaCodecRegistry, HoldsExactlyTheCodecsWhoseFactsSayGpuKernel) {
  std::set<std::string> declared;
  for (const std::string& name : compress::CodecRegistry::Global().Names()) {
    if (compress::CodecFactsOf(name)->gpu_kernel) declared.insert(name);
  }
  EXPECT_EQ(declared.size(), 21u);  // every codec but "none"
  const std::vector<std::string> registered = compress::cuda::CudaCodecRegistry::Global().Names();
  EXPECT_EQ(std::set<std::string>(registered.begin(), registered.end()), declared);
  const std::vector<std::string> names = compress::cuda::CudaCodecNames();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), declared);
}

// Each memory a codec's facts say its kernels fuse gets as far as its own parameters (read by
// its kind); every other memory is refused as not fusable. No device needed.
TEST(CudaCodecRegistry, FusesTheMemoriesTheFactsNameAndNoOther) {
  const compress::MemoryRegistry& memories = compress::MemoryRegistry::Global();
  for (const std::string& codec : compress::cuda::CudaCodecNames()) {
    const compress::CodecFacts* facts = compress::CodecFactsOf(codec);
    for (const std::string& memory : memories.Names()) {
      if (compress::IsNoneName(memory)) continue;
      const compress::MemoryKind kind = memories.Find(memory)->kind;
      const bool fused = std::find(facts->gpu_memories.begin(), facts->gpu_memories.end(), kind) !=
                         facts->gpu_memories.end();
      auto made = CudaCodec::Create(codec, {}, memory, {{"nosuch", "1"}});
      ASSERT_EQ(made.status().code(), absl::StatusCode::kInvalidArgument) << codec << memory;
      const std::string message(made.status().message());
      EXPECT_EQ(absl::StrContains(message, "nosuch"), fused)
          << codec << " " << memory << ": " << message;
      EXPECT_EQ(absl::StrContains(message, "cannot fuse"), !fused)
          << codec << " " << memory << ": " << message;
    }
  }
}

// Odd sizes, and partitions: a slice of a larger tensor starting at an odd element (the
// engine encodes each partition from inside the tensor, so inputs are not 16-byte aligned).
TEST(CudaCodecsOnGpu, SameBytesAsTheCpuCodecsAndRoundTrip) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  const size_t total = 300007;
  compress::CodecContext ctx;
  ctx.seed = 5;
  ctx.key = 9;
  ctx.round = 2;
  const std::vector<float> x = Gradient(total, 1);
  DeviceArray<float> d_x(total), d_out(total);
  ASSERT_EQ(cudaMemcpy(d_x.data, x.data(), 4 * total, cudaMemcpyHostToDevice), cudaSuccess);
  // (offset, elements): whole inputs of odd sizes, then partitions inside the tensor.
  const std::pair<size_t, size_t> inputs[] = {{0, 1},        {0, 37},         {0, 4099},
                                              {0, 100003},   {0, total},      {4099, 65536},
                                              {70001, 4097}, {200003, 100004}};
  for (const std::string& name : compress::cuda::CudaCodecNames()) {
    for (const auto& [offset, n] : inputs) {
      SCOPED_TRACE(absl::StrCat(name, ": ", n, " elements from ", offset));
      ctx.key = (uint64_t{9} << 32) | (offset % 7);  // each partition its own key
      auto gpu = CudaCodec::Create(name, {});
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      auto cpu = compress::CreateCodec(name);
      ASSERT_TRUE(cpu.ok()) << cpu.status();
      const size_t capacity = (*gpu)->MaxEncodedBytes(n);
      ASSERT_EQ(capacity, (*cpu)->MaxEncodedBytes(n));
      DeviceArray<uint8_t> d_payload(capacity);
      auto bytes = (*gpu)->Encode(d_x.data + offset, n, ctx, d_payload.data, capacity, nullptr);
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      std::vector<uint8_t> payload(*bytes);
      ASSERT_EQ(cudaMemcpy(payload.data(), d_payload.data, *bytes, cudaMemcpyDeviceToHost),
                cudaSuccess);
      std::vector<uint8_t> expected(capacity);
      auto m =
          (*cpu)->Encode(absl::MakeConstSpan(x).subspan(offset, n), ctx, absl::MakeSpan(expected));
      ASSERT_TRUE(m.ok()) << m.status();
      expected.resize(*m);
      EXPECT_EQ(payload, expected);
      const absl::Status decoded =
          (*gpu)->Decode(d_payload.data, *bytes, ctx, d_out.data + offset, n, nullptr);
      EXPECT_TRUE(decoded.ok()) << decoded;
      std::vector<float> gpu_values(n), cpu_values(n);
      ASSERT_EQ(cudaMemcpy(gpu_values.data(), d_out.data + offset, 4 * n, cudaMemcpyDeviceToHost),
                cudaSuccess);
      ASSERT_TRUE((*cpu)->Decode(payload, ctx, absl::MakeSpan(cpu_values)).ok());
      EXPECT_EQ(std::memcmp(gpu_values.data(), cpu_values.data(), 4 * n), 0);
      // A payload one byte short is refused, as on the CPU.
      EXPECT_EQ(
          (*gpu)->Decode(d_payload.data, *bytes - 1, ctx, d_out.data + offset, n, nullptr).code(),
          absl::StatusCode::kInvalidArgument);
    }
  }
}

// Every codec with every memory it fuses, over rounds: the bytes of EncodeWithMemory.
TEST(CudaCodecsOnGpu, FusedMemoriesMatchEncodeWithMemory) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  const size_t n = 20011;
  DeviceArray<float> d_x(n);
  for (const std::string& name : compress::cuda::CudaCodecNames()) {
    for (const char* memory_name : {"residual", "efsignsgd", "dgc_momentum", "powersgd"}) {
      if (!compress::GpuMemorySupported(name, memory_name)) continue;
      auto gpu = CudaCodec::Create(name, {}, memory_name);
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      auto cpu = compress::CreateCodec(name);
      auto memory = compress::CreateMemory(memory_name);
      ASSERT_TRUE(cpu.ok() && memory.ok());
      DeviceArray<uint8_t> d_payload((*gpu)->MaxEncodedBytes(n));
      std::vector<float> compensated, decoded;
      for (uint64_t round = 0; round < 3; ++round) {
        compress::CodecContext ctx;
        ctx.key = 4;
        ctx.round = round;
        const std::vector<float> x = Gradient(n, 10 + static_cast<uint32_t>(round));
        ASSERT_EQ(cudaMemcpy(d_x.data, x.data(), 4 * n, cudaMemcpyHostToDevice), cudaSuccess);
        auto bytes =
            (*gpu)->Encode(d_x.data, n, ctx, d_payload.data, (*gpu)->MaxEncodedBytes(n), nullptr);
        ASSERT_TRUE(bytes.ok()) << bytes.status();
        std::vector<uint8_t> payload(*bytes);
        ASSERT_EQ(cudaMemcpy(payload.data(), d_payload.data, *bytes, cudaMemcpyDeviceToHost),
                  cudaSuccess);
        std::vector<uint8_t> expected((*cpu)->MaxEncodedBytes(n));
        auto m = compress::EncodeWithMemory(**cpu, memory->get(), x, ctx, absl::MakeSpan(expected),
                                            compensated, decoded);
        ASSERT_TRUE(m.ok()) << m.status();
        expected.resize(*m);
        EXPECT_EQ(payload, expected) << name << " with " << memory_name << ", round " << round;
      }
    }
  }
}

// Workers of a two-round codec: each a GPU codec with the memory fused, beside the CPU codec
// and memory it must match.
struct TwoRoundWorkers {
  std::vector<std::unique_ptr<CudaCodec>> gpu;
  std::vector<std::unique_ptr<compress::Codec>> cpu;
  std::vector<std::unique_ptr<compress::Memory>> memory;

  void Make(size_t count, const std::string& codec, const compress::CodecParams& params,
            const std::string& memory_name) {
    for (size_t w = 0; w < count; ++w) {
      auto g = CudaCodec::Create(codec, params, memory_name);
      auto c = compress::CreateCodec(codec, params);
      auto m = compress::CreateMemory(memory_name);
      ASSERT_TRUE(g.ok() && c.ok() && m.ok()) << g.status();
      ASSERT_NE(compress::cuda::AsCudaTwoRound(**g), nullptr);
      gpu.push_back(std::move(*g));
      cpu.push_back(std::move(*c));
      memory.push_back(std::move(*m));
    }
  }
};

// powersgd's two rounds (CudaTwoRoundCodec) with two workers, its memory fused, at an odd
// shape: the CPU codec's payloads for both stages, its decoded values, over rounds.
TEST(CudaCodecsOnGpu, PowerSgdTwoRoundsMatchTheCpuCodec) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  const size_t n = 20011;
  const compress::CodecParams params = {{"rank", "3"}, {"cols", "300"}};
  constexpr size_t kWorkers = 2;
  TwoRoundWorkers workers;
  ASSERT_NO_FATAL_FAILURE(workers.Make(kWorkers, "powersgd", params, "powersgd"));
  auto& [gpu, cpu, memory] = workers;
  compress::cuda::CudaTwoRoundCodec& probe = *compress::cuda::AsCudaTwoRound(*gpu[0]);
  const size_t p_floats = probe.FirstRoundFloats(n), q_floats = probe.SecondRoundFloats(n);
  DeviceArray<float> d_x(n), d_out(n), d_sum(std::max(p_floats, q_floats));
  DeviceArray<uint8_t> d_payload(probe.FirstRoundBytes(n) + probe.SecondRoundBytes(n));
  auto fetch = [&](size_t bytes) {
    std::vector<uint8_t> p(bytes);
    EXPECT_EQ(cudaMemcpy(p.data(), d_payload.data, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return p;
  };
  auto upload_sum = [&](const std::vector<float>& sum) {
    EXPECT_EQ(cudaMemcpy(d_sum.data, sum.data(), 4 * sum.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
  };
  std::vector<std::vector<float>> compensated(kWorkers, std::vector<float>(n));
  for (uint64_t round = 0; round < 3; ++round) {
    compress::CodecContext ctx;
    ctx.key = 6;
    ctx.round = round;
    std::vector<float> sum_p(p_floats, 0.0f), sum_q(q_floats, 0.0f);
    for (size_t w = 0; w < kWorkers; ++w) {
      const std::vector<float> x = Gradient(n, 30 + static_cast<uint32_t>(round * kWorkers + w));
      ASSERT_EQ(cudaMemcpy(d_x.data, x.data(), 4 * n, cudaMemcpyHostToDevice), cudaSuccess);
      auto bytes = compress::cuda::AsCudaTwoRound(*gpu[w])->EncodeFirst(
          d_x.data, n, ctx, d_payload.data, probe.FirstRoundBytes(n), nullptr);
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      const std::vector<uint8_t> payload = fetch(*bytes);
      ASSERT_TRUE(memory[w]->Compensate(x, ctx, absl::MakeSpan(compensated[w])).ok());
      std::vector<uint8_t> expected(probe.FirstRoundBytes(n));
      ASSERT_TRUE(compress::AsTwoRound(*cpu[w])
                      ->EncodeFirst(compensated[w], ctx, absl::MakeSpan(expected))
                      .ok());
      EXPECT_EQ(payload, expected) << "payload 1, worker " << w << ", round " << round;
      for (size_t i = 0; i < p_floats; ++i) sum_p[i] += compress::GetF32(&expected[4 + 4 * i]);
    }
    for (size_t w = 0; w < kWorkers; ++w) {
      upload_sum(sum_p);
      auto bytes = compress::cuda::AsCudaTwoRound(*gpu[w])->EncodeSecond(
          d_sum.data, p_floats, ctx, d_payload.data, probe.SecondRoundBytes(n), nullptr);
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      const std::vector<uint8_t> payload = fetch(*bytes);
      compress::TwoRoundCodec* two = compress::AsTwoRound(*cpu[w]);
      std::vector<uint8_t> expected(probe.SecondRoundBytes(n));
      ASSERT_TRUE(two->EncodeSecond(sum_p, ctx, absl::MakeSpan(expected)).ok());
      std::vector<float> approximation(n);
      ASSERT_TRUE(two->LocalApproximation(absl::MakeSpan(approximation)).ok());
      ASSERT_TRUE(memory[w]->Update(compensated[w], approximation, ctx).ok());
      EXPECT_EQ(payload, expected) << "payload 2, worker " << w << ", round " << round;
      for (size_t i = 0; i < q_floats; ++i) sum_q[i] += compress::GetF32(&expected[4 + 4 * i]);
    }
    for (size_t w = 0; w < kWorkers; ++w) {
      upload_sum(sum_q);
      ASSERT_TRUE(compress::cuda::AsCudaTwoRound(*gpu[w])
                      ->DecodeSecond(d_sum.data, q_floats, ctx, d_out.data, n, nullptr)
                      .ok());
      std::vector<float> gpu_values(n), cpu_values(n);
      ASSERT_EQ(cudaMemcpy(gpu_values.data(), d_out.data, 4 * n, cudaMemcpyDeviceToHost),
                cudaSuccess);
      ASSERT_TRUE(
          compress::AsTwoRound(*cpu[w])->DecodeSecond(sum_q, ctx, absl::MakeSpan(cpu_values)).ok());
      EXPECT_EQ(std::memcmp(gpu_values.data(), cpu_values.data(), 4 * n), 0)
          << "worker " << w << ", round " << round;
    }
  }
}

// artopk's two rounds (CudaTwoRoundCodec) with two workers, the residual fused, for both
// choosers: the CPU codec's payloads for both stages (the chooser's index section, the values
// at the chosen indices, the smoothed norm), its decoded sums, over rounds (the memory's
// update shows in the next round's payloads); the replies are the CPU aggregator's.
TEST(CudaCodecsOnGpu, ArtopkTwoRoundsMatchTheCpuCodec) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  const size_t n = 20011;
  constexpr size_t kWorkers = 2;
  for (const char* chooser : {"round_robin", "largest_norm"}) {
    const compress::CodecParams params = {{"ratio", "0.01"}, {"chooser", chooser}};
    TwoRoundWorkers workers;
    ASSERT_NO_FATAL_FAILURE(workers.Make(kWorkers, "artopk", params, "residual"));
    auto& [gpu, cpu, memory] = workers;
    auto server = compress::CreateAggregator("artopk", params);
    ASSERT_TRUE(server.ok()) << server.status();
    compress::cuda::CudaTwoRoundCodec& probe = *compress::cuda::AsCudaTwoRound(*gpu[0]);
    const size_t first_bytes = probe.FirstRoundBytes(n), second_bytes = probe.SecondRoundBytes(n);
    DeviceArray<float> d_x(n), d_out(n), d_reply(first_bytes / 4 + second_bytes / 4 + 8);
    DeviceArray<uint8_t> d_payload(first_bytes + second_bytes);
    auto fetch = [&](size_t bytes) {
      std::vector<uint8_t> p(bytes);
      EXPECT_EQ(cudaMemcpy(p.data(), d_payload.data, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
      return p;
    };
    auto upload_reply = [&](absl::Span<const float> reply) {
      EXPECT_EQ(cudaMemcpy(d_reply.data, reply.data(), 4 * reply.size(), cudaMemcpyHostToDevice),
                cudaSuccess);
    };
    std::vector<std::vector<float>> compensated(kWorkers, std::vector<float>(n));
    auto context_of = [](uint64_t round, size_t w) {
      compress::CodecContext ctx;
      ctx.key = 7;
      ctx.round = round;
      ctx.node = static_cast<uint32_t>(w);
      return ctx;
    };
    for (uint64_t round = 0; round < 4; ++round) {
      const std::string at = absl::StrCat(chooser, ", round ", round);
      (*server)->Reset(n);
      for (size_t w = 0; w < kWorkers; ++w) {
        const compress::CodecContext ctx = context_of(round, w);
        const std::vector<float> x = Gradient(n, 50 + static_cast<uint32_t>(round * kWorkers + w));
        ASSERT_EQ(cudaMemcpy(d_x.data, x.data(), 4 * n, cudaMemcpyHostToDevice), cudaSuccess);
        auto bytes = compress::cuda::AsCudaTwoRound(*gpu[w])->EncodeFirst(
            d_x.data, n, ctx, d_payload.data, first_bytes, nullptr);
        ASSERT_TRUE(bytes.ok()) << bytes.status();
        const std::vector<uint8_t> payload = fetch(*bytes);
        ASSERT_TRUE(memory[w]->Compensate(x, ctx, absl::MakeSpan(compensated[w])).ok());
        std::vector<uint8_t> expected(first_bytes);
        auto want = compress::AsTwoRound(*cpu[w])->EncodeFirst(compensated[w], ctx,
                                                               absl::MakeSpan(expected));
        ASSERT_TRUE(want.ok()) << want.status();
        expected.resize(*want);
        EXPECT_EQ(payload, expected) << "payload 1, worker " << w << ", " << at;
        ASSERT_TRUE((*server)->Add(expected, ctx).ok());
      }
      auto reply1 = (*server)->Finish();
      ASSERT_TRUE(reply1.ok()) << reply1.status();
      const std::vector<float> first(reply1->begin(), reply1->end());
      (*server)->Reset(n);
      for (size_t w = 0; w < kWorkers; ++w) {
        const compress::CodecContext ctx = context_of(round, w);
        upload_reply(first);
        auto bytes = compress::cuda::AsCudaTwoRound(*gpu[w])->EncodeSecond(
            d_reply.data, first.size(), ctx, d_payload.data, second_bytes, nullptr);
        ASSERT_TRUE(bytes.ok()) << bytes.status();
        const std::vector<uint8_t> payload = fetch(*bytes);
        compress::TwoRoundCodec* two = compress::AsTwoRound(*cpu[w]);
        std::vector<uint8_t> expected(second_bytes);
        ASSERT_TRUE(two->EncodeSecond(first, ctx, absl::MakeSpan(expected)).ok());
        std::vector<float> approximation(n);
        ASSERT_TRUE(two->LocalApproximation(absl::MakeSpan(approximation)).ok());
        ASSERT_TRUE(memory[w]->Update(compensated[w], approximation, ctx).ok());
        EXPECT_EQ(payload, expected) << "payload 2, worker " << w << ", " << at;
        ASSERT_TRUE((*server)->Add(expected, ctx).ok());
      }
      auto reply2 = (*server)->Finish();
      ASSERT_TRUE(reply2.ok()) << reply2.status();
      const std::vector<float> second(reply2->begin(), reply2->end());
      for (size_t w = 0; w < kWorkers; ++w) {
        const compress::CodecContext ctx = context_of(round, w);
        upload_reply(second);
        ASSERT_TRUE(compress::cuda::AsCudaTwoRound(*gpu[w])
                        ->DecodeSecond(d_reply.data, second.size(), ctx, d_out.data, n, nullptr)
                        .ok());
        std::vector<float> gpu_values(n), cpu_values(n);
        ASSERT_EQ(cudaMemcpy(gpu_values.data(), d_out.data, 4 * n, cudaMemcpyDeviceToHost),
                  cudaSuccess);
        ASSERT_TRUE(compress::AsTwoRound(*cpu[w])
                        ->DecodeSecond(second, ctx, absl::MakeSpan(cpu_values))
                        .ok());
        EXPECT_EQ(std::memcmp(gpu_values.data(), cpu_values.data(), 4 * n), 0)
            << "worker " << w << ", " << at;
      }
    }
  }
}

// artopk's replies checked as the CPU codec checks them: a bad index section, a short reply,
// NaN among the sums, the call order; the same codes.
TEST(CudaCodecsOnGpu, ArtopkRefusesBadRepliesAsTheCpuCodec) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  const size_t n = 4099;
  const compress::CodecParams params = {{"ratio", "0.01"}};
  auto gpu = CudaCodec::Create("artopk", params, "residual");
  auto cpu = compress::CreateCodec("artopk", params);
  auto server = compress::CreateAggregator("artopk", params);
  ASSERT_TRUE(gpu.ok() && cpu.ok() && server.ok());
  compress::cuda::CudaTwoRoundCodec* g = compress::cuda::AsCudaTwoRound(**gpu);
  compress::TwoRoundCodec* c = compress::AsTwoRound(**cpu);
  const std::vector<float> x = Gradient(n, 9);
  DeviceArray<float> d_x(n), d_out(n), d_reply(n);
  DeviceArray<uint8_t> d_payload(g->FirstRoundBytes(n) + g->SecondRoundBytes(n));
  ASSERT_EQ(cudaMemcpy(d_x.data, x.data(), 4 * n, cudaMemcpyHostToDevice), cudaSuccess);
  compress::CodecContext ctx;
  ctx.key = 3;
  // DecodeSecond before any round: the same precondition.
  std::vector<float> host_out(n);
  EXPECT_EQ(g->DecodeSecond(d_reply.data, 1, ctx, d_out.data, n, nullptr).code(),
            c->DecodeSecond(std::vector<float>(1), ctx, absl::MakeSpan(host_out)).code());
  ASSERT_TRUE(
      g->EncodeFirst(d_x.data, n, ctx, d_payload.data, g->FirstRoundBytes(n), nullptr).ok());
  std::vector<uint8_t> push(c->FirstRoundBytes(n));
  auto bytes = c->EncodeFirst(x, ctx, absl::MakeSpan(push));
  ASSERT_TRUE(bytes.ok());
  push.resize(*bytes);
  (*server)->Reset(n);
  ASSERT_TRUE((*server)->Add(push, ctx).ok());
  auto reply = (*server)->Finish();
  ASSERT_TRUE(reply.ok());
  std::vector<float> good(reply->begin(), reply->end());
  auto encode_second = [&](const std::vector<float>& words) {
    EXPECT_EQ(cudaMemcpy(d_reply.data, words.data(), 4 * words.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    return g->EncodeSecond(d_reply.data, words.size(), ctx, d_payload.data, g->SecondRoundBytes(n),
                           nullptr);
  };
  // An index section whose deltas run past n; a reply one word short.
  std::vector<float> bad = good;
  auto* bytes_of_bad = reinterpret_cast<uint8_t*>(bad.data());
  std::memset(bytes_of_bad + compress::artopk::kFirstReplyHeaderBytes, 0xff,
              4 * bad.size() - compress::artopk::kFirstReplyHeaderBytes);
  auto refused = encode_second(bad);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  std::vector<float> short_reply(good.begin(), good.end() - 1);
  EXPECT_EQ(encode_second(short_reply).status().code(), absl::StatusCode::kInvalidArgument);
  auto second = encode_second(good);
  ASSERT_TRUE(second.ok()) << second.status();
  // NaN among the sums: the CPU codec's words.
  const size_t k = compress::sparse::KeptCount(0.01, n);
  std::vector<float> sums(k + 1, 1.0f);
  sums[k / 2] = std::numeric_limits<float>::quiet_NaN();
  ASSERT_EQ(cudaMemcpy(d_reply.data, sums.data(), 4 * sums.size(), cudaMemcpyHostToDevice),
            cudaSuccess);
  const absl::Status nan = g->DecodeSecond(d_reply.data, sums.size(), ctx, d_out.data, n, nullptr);
  EXPECT_EQ(nan.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(nan.message(), compress::artopk::kSumsNotFinite)) << nan;
}

TEST(CudaCodecsOnGpu, NonFiniteInputNamesTheIndex) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  std::vector<float> x = Gradient(1000, 2);
  x[321] = std::numeric_limits<float>::quiet_NaN();
  DeviceArray<float> d_x(x.size());
  ASSERT_EQ(cudaMemcpy(d_x.data, x.data(), 4 * x.size(), cudaMemcpyHostToDevice), cudaSuccess);
  auto gpu = CudaCodec::Create("onebit", {});
  ASSERT_TRUE(gpu.ok());
  DeviceArray<uint8_t> out((*gpu)->MaxEncodedBytes(x.size()));
  auto r =
      (*gpu)->Encode(d_x.data, x.size(), {}, out.data, (*gpu)->MaxEncodedBytes(x.size()), nullptr);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("element 321"), absl::string_view::npos) << r.status();
}

// A sparse message whose index section is bad is refused, and nothing is written through the
// bad indices.
TEST(CudaCodecsOnGpu, BadIndicesAreRefused) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  const size_t n = 1000;
  auto cpu = compress::CreateCodec("topk", {{"ratio", "0.01"}});
  auto gpu = CudaCodec::Create("topk", {{"ratio", "0.01"}});
  ASSERT_TRUE(cpu.ok() && gpu.ok());
  const std::vector<float> x = Gradient(n, 3);
  std::vector<uint8_t> payload((*cpu)->MaxEncodedBytes(n));
  auto m = (*cpu)->Encode(x, {}, absl::MakeSpan(payload));
  ASSERT_TRUE(m.ok());
  payload.resize(*m);
  payload[1] = 0;  // claims a raw section of another size
  DeviceArray<uint8_t> d_payload(payload.size());
  DeviceArray<float> d_out(n);
  ASSERT_EQ(cudaMemcpy(d_payload.data, payload.data(), payload.size(), cudaMemcpyHostToDevice),
            cudaSuccess);
  const absl::Status s = (*gpu)->Decode(d_payload.data, payload.size(), {}, d_out.data, n, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  std::vector<float> dummy(n);
  EXPECT_EQ((*cpu)->Decode(payload, {}, absl::MakeSpan(dummy)).message(), s.message());
}

}  // namespace
}  // namespace bytecomp
