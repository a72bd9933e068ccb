// cpu_offload_bench: the figures the planner's CPU-pool model needs.
//
//  1. memcpy bandwidth of the tensor (the reference, measured in this run).
//  2. Per codec: encode and decode throughput of one tensor cut into chunks, inline on the
//     calling thread and through the StagingPipeline with 1 and 2 pool threads; each as GB/s
//     of fp32 input and as a ratio to memcpy.
//  3. A training step on the main thread (a blocked matrix-multiply loop calibrated to take
//     about as long as encoding the tensor inline) followed by compressing the gradient:
//     inline (compute, then encode on the same thread) against offloaded (encode on a
//     1-thread pool while the main thread computes). Reports the step times, the overlap
//     gained, and how much the pool slows the compute down (interference on shared cores).
//
// Usage: cpu_offload_bench [--mib=64] [--chunk_kib=1024] [--reps=5]
//                          [--codecs=fp16,onebit,topk,...] [--pin]
// Codecs not (yet) in the registry are skipped with a note. Medians over --reps runs.
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "bytecomp/compress.h"
#include "bytecomp/cpu_offload.h"

namespace {

using bytecomp::compress::Codec;
using bytecomp::compress::CodecContext;
using namespace bytecomp::cpu_offload;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// CPU time of the calling thread: unlike wall time, other processes on the machine barely
// change it, so it is the robust per-byte cost for the planner on a shared machine.
double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Options {
  size_t mib = 64;
  size_t chunk_kib = 1024;
  int reps = 5;
  std::vector<std::string> codecs = {"fp16", "onebit", "efsignsgd", "topk", "randomk",
                                     "qsgd", "terngrad", "natural", "dgc"};
  bool pin = false;
};

Options ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    auto value = [&](absl::string_view prefix) -> absl::string_view {
      return arg.substr(prefix.size());
    };
    if (absl::StartsWith(arg, "--mib=")) {
      if (!absl::SimpleAtoi(value("--mib="), &o.mib)) std::exit(2);
    } else if (absl::StartsWith(arg, "--chunk_kib=")) {
      if (!absl::SimpleAtoi(value("--chunk_kib="), &o.chunk_kib)) std::exit(2);
    } else if (absl::StartsWith(arg, "--reps=")) {
      if (!absl::SimpleAtoi(value("--reps="), &o.reps)) std::exit(2);
    } else if (absl::StartsWith(arg, "--codecs=")) {
      o.codecs = absl::StrSplit(value("--codecs="), ',', absl::SkipEmpty());
    } else if (arg == "--pin") {
      o.pin = true;
    } else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      std::exit(2);
    }
  }
  return o;
}

// One codec instance per chunk: a chunk is a partition with its own state.
struct ChunkCodecs {
  std::vector<std::unique_ptr<Codec>> encoders;
  std::vector<std::unique_ptr<Codec>> decoders;
  std::vector<std::vector<uint8_t>> encoded;  // filled by the inline run, read by decodes
};

absl::StatusOr<ChunkCodecs> MakeCodecs(const std::string& name, size_t chunks) {
  ChunkCodecs c;
  for (size_t i = 0; i < chunks; ++i) {
    auto e = bytecomp::compress::CreateCodec(name);
    if (!e.ok()) return e.status();
    auto d = bytecomp::compress::CreateCodec(name);
    if (!d.ok()) return d.status();
    c.encoders.push_back(std::move(*e));
    c.decoders.push_back(std::move(*d));
  }
  c.encoded.resize(chunks);
  return c;
}

CodecContext ContextOf(const ChunkInfo& chunk, uint64_t round) {
  CodecContext ctx;
  ctx.key = chunk.index;
  ctx.round = round;
  ctx.seed = 42;
  ctx.learning_rate = 0.1f;
  return ctx;
}

// A training-like compute loop: blocked 128x128 matrix products (FP bound, cache resident).
struct ComputeLoop {
  static constexpr int kN = 128;
  std::vector<float> a, b, c;
  ComputeLoop() : a(kN * kN, 0.5f), b(kN * kN, 0.25f), c(kN * kN, 0.0f) {}
  void Run(int products) {
    for (int p = 0; p < products; ++p) {
      for (int i = 0; i < kN; ++i) {
        for (int k = 0; k < kN; ++k) {
          const float aik = a[i * kN + k];
          for (int j = 0; j < kN; ++j) c[i * kN + j] += aik * b[k * kN + j];
        }
      }
      a[p % (kN * kN)] = c[(p * 7) % (kN * kN)] * 1e-6f;  // keep the work observable
    }
  }
};

void PinCurrentThread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof(set), &set);
}

// Pushes the tensor through the pipeline; returns seconds until on_done.
double TimedPush(StagingPipeline& pipeline, const std::vector<float>& data, size_t chunk_elems,
                 ChunkCodecs& codecs, uint64_t round) {
  PushRequest request;
  request.source = data.data();
  request.elements = data.size();
  request.chunk_elements = chunk_elems;
  request.max_encoded_bytes = [&](size_t n) { return codecs.encoders[0]->MaxEncodedBytes(n); };
  request.encode = [&codecs, round](const ChunkInfo& chunk, absl::Span<const float> in,
                                    absl::Span<uint8_t> out) {
    return codecs.encoders[chunk.index]->Encode(in, ContextOf(chunk, round), out);
  };
  request.on_chunk = [](const ChunkInfo& chunk, absl::StatusOr<EncodedChunk> encoded) {
    if (!encoded.ok()) {
      std::fprintf(stderr, "chunk %zu: %s\n", chunk.index, encoded.status().ToString().c_str());
      std::exit(1);
    }
  };
  std::promise<absl::Status> done;
  request.on_done = [&](absl::Status s) { done.set_value(s); };
  const auto start = Clock::now();
  if (!pipeline.Push(std::move(request)).ok()) std::exit(1);
  if (!done.get_future().get().ok()) std::exit(1);
  return Seconds(start, Clock::now());
}

double TimedPull(StagingPipeline& pipeline, std::vector<float>& out,
                 const std::vector<ChunkInfo>& chunks, ChunkCodecs& codecs, uint64_t round) {
  PullRequest request;
  request.destination = out.data();
  request.elements = out.size();
  for (const ChunkInfo& chunk : chunks) {
    request.chunks.push_back(PullChunk{chunk, codecs.encoded[chunk.index]});
  }
  request.decode = [&codecs, round](const ChunkInfo& chunk, absl::Span<const uint8_t> in,
                                    absl::Span<float> out) {
    return codecs.decoders[chunk.index]->Decode(in, ContextOf(chunk, round), out);
  };
  std::promise<absl::Status> done;
  request.on_done = [&](absl::Status s) { done.set_value(s); };
  const auto start = Clock::now();
  if (!pipeline.Pull(std::move(request)).ok()) std::exit(1);
  const absl::Status s = done.get_future().get();
  if (!s.ok()) {
    std::fprintf(stderr, "pull: %s\n", s.ToString().c_str());
    std::exit(1);
  }
  return Seconds(start, Clock::now());
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = ParseArgs(argc, argv);
  const size_t elements = opt.mib * (size_t{1} << 20) / sizeof(float);
  const size_t chunk_elems = opt.chunk_kib * 1024 / sizeof(float);
  const std::vector<ChunkInfo> chunks = SplitIntoChunks(elements, chunk_elems);
  const double gb = static_cast<double>(elements * sizeof(float)) / 1e9;
  if (opt.pin) PinCurrentThread(0);

  std::vector<float> data(elements);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& x : data) x = normal(rng);
  std::vector<float> copy(elements), decoded(elements);

  std::vector<double> memcpy_s, memcpy_cpu;
  for (int r = 0; r < opt.reps; ++r) {
    const auto t0 = Clock::now();
    const double c0 = ThreadCpuSeconds();
    std::memcpy(copy.data(), data.data(), elements * sizeof(float));
    memcpy_s.push_back(Seconds(t0, Clock::now()));
    memcpy_cpu.push_back(ThreadCpuSeconds() - c0);
  }
  const double memcpy_gbs = gb / Median(memcpy_s);
  std::printf("tensor %zu MiB fp32 in %zu chunks of %zu KiB; medians of %d runs%s\n", opt.mib,
              chunks.size(), opt.chunk_kib, opt.reps, opt.pin ? "; pinned" : "");
  const double memcpy_cpu_gbs = gb / Median(memcpy_cpu);
  std::printf("memcpy (reference): %.2f GB/s wall, %.2f GB per CPU-second\n", memcpy_gbs,
              memcpy_cpu_gbs);
  // Other processes compete for the cores: the figures mean little when this exceeds ~1.
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    char line[128] = {};
    if (std::fgets(line, sizeof(line), f)) std::printf("load average at start: %s", line);
    std::fclose(f);
  }
  std::printf("\n");

  PinnedPoolOptions memory_options;
  memory_options.max_total_bytes = size_t{4} << 30;
  PinnedMemoryPool memory(memory_options);
  auto make_pool = [&](size_t threads, std::vector<int> cpus) {
    ThreadPoolOptions o;
    o.num_threads = threads;
    if (opt.pin) o.pin_cpus = std::move(cpus);
    return std::make_unique<PriorityThreadPool>(o);
  };

  std::printf("%-10s %6s | %-24s | %-24s | %-24s | %7s %7s\n", "codec", "ratio",
              "encode GB/s inline/1t/2t", "decode GB/s inline/1t/2t", "encode x memcpy 1t/2t",
              "enc2/1", "dec2/1");
  struct StepFigures {
    std::string codec;
    double compute, encode, inline_step, offload_step;
    double encode_cpu_gbs, decode_cpu_gbs;  // GB of fp32 input per CPU-second, one thread
  };
  std::vector<StepFigures> steps;
  for (const std::string& name : opt.codecs) {
    auto made = MakeCodecs(name, chunks.size());
    if (!made.ok()) {
      std::printf("%-10s skipped: %s\n", name.c_str(),
                  std::string(made.status().message()).substr(0, 60).c_str());
      continue;
    }
    ChunkCodecs& codecs = *made;
    uint64_t round = 0;
    // Inline encode (also keeps the bytes for the decode runs) and inline decode.
    std::vector<double> enc_inline, dec_inline, enc_cpu, dec_cpu;
    size_t encoded_bytes = 0;
    for (int r = 0; r < opt.reps; ++r, ++round) {
      encoded_bytes = 0;
      const auto t0 = Clock::now();
      const double c0 = ThreadCpuSeconds();
      for (const ChunkInfo& chunk : chunks) {
        auto& out = codecs.encoded[chunk.index];
        out.resize(codecs.encoders[chunk.index]->MaxEncodedBytes(chunk.elements));
        auto n = codecs.encoders[chunk.index]->Encode(
            absl::MakeConstSpan(data).subspan(chunk.element_offset, chunk.elements),
            ContextOf(chunk, round), absl::MakeSpan(out));
        if (!n.ok()) {
          std::fprintf(stderr, "%s: %s\n", name.c_str(), n.status().ToString().c_str());
          return 1;
        }
        out.resize(*n);
        encoded_bytes += *n;
      }
      enc_inline.push_back(Seconds(t0, Clock::now()));
      enc_cpu.push_back(ThreadCpuSeconds() - c0);
    }
    const uint64_t decode_round = round - 1;  // the bytes kept are from the last round
    for (int r = 0; r < opt.reps; ++r) {
      const auto t0 = Clock::now();
      const double c0 = ThreadCpuSeconds();
      for (const ChunkInfo& chunk : chunks) {
        auto s = codecs.decoders[chunk.index]->Decode(
            codecs.encoded[chunk.index], ContextOf(chunk, decode_round),
            absl::MakeSpan(decoded).subspan(chunk.element_offset, chunk.elements));
        if (!s.ok()) return 1;
      }
      dec_inline.push_back(Seconds(t0, Clock::now()));
      dec_cpu.push_back(ThreadCpuSeconds() - c0);
    }
    double enc_pool[3] = {0, 0, 0}, dec_pool[3] = {0, 0, 0};
    for (size_t threads : {1u, 2u}) {
      auto pool = make_pool(threads, {1, 0});
      StagingPipeline pipeline(pool.get(), &memory);
      std::vector<double> enc, dec;
      for (int r = 0; r < opt.reps; ++r) {
        enc.push_back(TimedPush(pipeline, data, chunk_elems, codecs, round++));
        dec.push_back(TimedPull(pipeline, decoded, chunks, codecs, decode_round));
      }
      enc_pool[threads] = Median(enc);
      dec_pool[threads] = Median(dec);
    }
    const double ei = Median(enc_inline), di = Median(dec_inline);
    std::printf("%-10s %6.1f | %6.2f / %6.2f / %6.2f | %6.2f / %6.2f / %6.2f | %10.3f / %8.3f | %7.2f %7.2f\n",
                name.c_str(), static_cast<double>(elements * 4) / encoded_bytes, gb / ei,
                gb / enc_pool[1], gb / enc_pool[2], gb / di, gb / dec_pool[1], gb / dec_pool[2],
                gb / enc_pool[1] / memcpy_gbs, gb / enc_pool[2] / memcpy_gbs,
                enc_pool[1] / enc_pool[2], dec_pool[1] / dec_pool[2]);

    // Training step: compute alone, inline (compute then encode), offloaded (encode on a
    // 1-thread pool on the other core while computing).
    ComputeLoop compute;
    const auto c0 = Clock::now();
    compute.Run(20);
    const double per_product = Seconds(c0, Clock::now()) / 20;
    const int products = std::max(1, static_cast<int>(ei / per_product));
    std::vector<double> compute_alone, inline_step, offload_step;
    auto pool = make_pool(1, {1});
    StagingPipeline pipeline(pool.get(), &memory);
    for (int r = 0; r < opt.reps; ++r) {
      auto t0 = Clock::now();
      compute.Run(products);
      compute_alone.push_back(Seconds(t0, Clock::now()));

      t0 = Clock::now();
      compute.Run(products);
      for (const ChunkInfo& chunk : chunks) {
        auto& out = codecs.encoded[chunk.index];
        out.resize(codecs.encoders[chunk.index]->MaxEncodedBytes(chunk.elements));
        if (!codecs.encoders[chunk.index]
                 ->Encode(absl::MakeConstSpan(data).subspan(chunk.element_offset, chunk.elements),
                          ContextOf(chunk, round), absl::MakeSpan(out))
                 .ok()) {
          return 1;
        }
      }
      ++round;
      inline_step.push_back(Seconds(t0, Clock::now()));

      // Offloaded: the gradient of the previous layer is compressed while this one computes.
      t0 = Clock::now();
      std::promise<void> encoded;
      PushRequest request;
      request.source = data.data();
      request.elements = data.size();
      request.chunk_elements = chunk_elems;
      request.max_encoded_bytes = [&](size_t n) { return codecs.encoders[0]->MaxEncodedBytes(n); };
      request.encode = [&codecs, round](const ChunkInfo& chunk, absl::Span<const float> in,
                                        absl::Span<uint8_t> out) {
        return codecs.encoders[chunk.index]->Encode(in, ContextOf(chunk, round), out);
      };
      request.on_chunk = [](const ChunkInfo&, absl::StatusOr<EncodedChunk> e) {
        if (!e.ok()) std::exit(1);
      };
      request.on_done = [&](absl::Status) { encoded.set_value(); };
      if (!pipeline.Push(std::move(request)).ok()) return 1;
      compute.Run(products);
      encoded.get_future().wait();
      ++round;
      offload_step.push_back(Seconds(t0, Clock::now()));
    }
    steps.push_back({name, Median(compute_alone), ei, Median(inline_step), Median(offload_step),
                     gb / Median(enc_cpu), gb / Median(dec_cpu)});
  }

  std::printf("\nper-byte CPU cost, one thread (thread CPU time; robust to other load)\n");
  std::printf("%-10s %18s %18s %14s\n", "codec", "encode GB/cpu-s", "decode GB/cpu-s",
              "enc x memcpy");
  for (const StepFigures& s : steps) {
    std::printf("%-10s %18.2f %18.2f %14.3f\n", s.codec.c_str(), s.encode_cpu_gbs,
                s.decode_cpu_gbs, s.encode_cpu_gbs / memcpy_cpu_gbs);
  }
  std::printf("\ntraining step = compute (calibrated to ~ inline encode time) + compress the tensor\n");
  std::printf("%-10s %10s %10s %12s %12s %9s %14s\n", "codec", "compute ms", "encode ms",
              "inline ms", "offload ms", "speed-up", "offload/ideal");
  for (const StepFigures& s : steps) {
    // ideal offload step: max(compute, encode) with no interference.
    const double ideal = std::max(s.compute, s.encode);
    std::printf("%-10s %10.1f %10.1f %12.1f %12.1f %9.2f %14.2f\n", s.codec.c_str(),
                s.compute * 1e3, s.encode * 1e3, s.inline_step * 1e3, s.offload_step * 1e3,
                s.inline_step / s.offload_step, s.offload_step / ideal);
  }
  return 0;
}
