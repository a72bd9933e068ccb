// cpu_offload_bench: the figures the planner's CPU-pool model needs, from the parts the worker
// engine uses (the priority thread pool and the pinned memory pool).
//
//  1. memcpy bandwidth of the tensor (the reference, measured in this run).
//  2. Per codec: encode and decode throughput of one tensor cut into partitions, inline on
//     the calling thread and as one pool task per partition (encoded into pinned buffers, as
//     the engine does) with 1 and 2 pool threads; each as GB/s of fp32 input and as a ratio
//     to memcpy.
//  3. A training step on the main thread (a blocked matrix-multiply loop calibrated to take
//     about as long as encoding the tensor inline) followed by compressing the gradient:
//     inline (compute, then encode on the same thread) against offloaded (encode on a
//     1-thread pool while the main thread computes). Reports the step times, the overlap
//     gained, and how much the pool slows the compute down (interference on shared cores).
//  4. The pinned pool: acquire + release of a partition-sized buffer from its cache, against
//     memcpy of the same bytes.
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
#include <latch>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
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

[[noreturn]] void Die(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "%s: %s\n", what.c_str(), status.ToString().c_str());
  std::exit(1);
}

struct Options {
  size_t mib = 64;
  size_t chunk_kib = 1024;
  int reps = 5;
  std::vector<std::string> codecs = {"fp16", "onebit",   "efsignsgd", "topk", "randomk",
                                     "qsgd", "terngrad", "natural",   "dgc"};
  bool pin = false;
};

Options ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    auto value = [&](absl::string_view prefix) { return arg.substr(prefix.size()); };
    bool ok = true;
    if (absl::StartsWith(arg, "--mib=")) {
      ok = absl::SimpleAtoi(value("--mib="), &o.mib) && o.mib > 0;
    } else if (absl::StartsWith(arg, "--chunk_kib=")) {
      ok = absl::SimpleAtoi(value("--chunk_kib="), &o.chunk_kib) && o.chunk_kib > 0;
    } else if (absl::StartsWith(arg, "--reps=")) {
      ok = absl::SimpleAtoi(value("--reps="), &o.reps) && o.reps > 0;
    } else if (absl::StartsWith(arg, "--codecs=")) {
      o.codecs = absl::StrSplit(value("--codecs="), ',', absl::SkipEmpty());
    } else if (arg == "--pin") {
      o.pin = true;
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "bad argument %s (see the usage at the top of the source)\n", argv[i]);
      std::exit(2);
    }
  }
  return o;
}

// A partition of the tensor: what the engine hands the pool as one task.
struct Partition {
  size_t index;
  size_t offset;  // first element
  size_t elements;
};

std::vector<Partition> Partitions(size_t elements, size_t per_partition) {
  std::vector<Partition> parts;
  for (size_t offset = 0; offset < elements; offset += per_partition) {
    parts.push_back({parts.size(), offset, std::min(per_partition, elements - offset)});
  }
  return parts;
}

// One codec instance per partition: a partition is a key with its own state.
struct PartitionCodecs {
  std::vector<std::unique_ptr<Codec>> encoders;
  std::vector<std::unique_ptr<Codec>> decoders;
  std::vector<std::vector<uint8_t>> encoded;  // filled by the inline run, read by decodes
};

absl::StatusOr<PartitionCodecs> MakeCodecs(const std::string& name, size_t partitions) {
  PartitionCodecs c;
  for (size_t i = 0; i < partitions; ++i) {
    auto e = bytecomp::compress::CreateCodec(name);
    if (!e.ok()) return e.status();
    auto d = bytecomp::compress::CreateCodec(name);
    if (!d.ok()) return d.status();
    c.encoders.push_back(std::move(*e));
    c.decoders.push_back(std::move(*d));
  }
  c.encoded.resize(partitions);
  return c;
}

CodecContext ContextOf(const Partition& part, uint64_t round) {
  CodecContext ctx;
  ctx.key = part.index;
  ctx.round = round;
  ctx.seed = 42;
  ctx.learning_rate = 0.1f;
  return ctx;
}

// Encodes every partition on the calling thread into codecs.encoded; returns the bytes.
size_t EncodeInline(const std::vector<float>& data, const std::vector<Partition>& parts,
                    PartitionCodecs& codecs, uint64_t round) {
  size_t bytes = 0;
  for (const Partition& part : parts) {
    std::vector<uint8_t>& out = codecs.encoded[part.index];
    out.resize(codecs.encoders[part.index]->MaxEncodedBytes(part.elements));
    absl::StatusOr<size_t> n = codecs.encoders[part.index]->Encode(
        absl::MakeConstSpan(data).subspan(part.offset, part.elements), ContextOf(part, round),
        absl::MakeSpan(out));
    if (!n.ok()) Die("encode", n.status());
    out.resize(*n);
    bytes += *n;
  }
  return bytes;
}

void DecodeInline(std::vector<float>& out, const std::vector<Partition>& parts,
                  PartitionCodecs& codecs, uint64_t round) {
  for (const Partition& part : parts) {
    absl::Status s = codecs.decoders[part.index]->Decode(
        codecs.encoded[part.index], ContextOf(part, round),
        absl::MakeSpan(out).subspan(part.offset, part.elements));
    if (!s.ok()) Die("decode", s);
  }
}

// Queues one encode task per partition, earlier partitions at higher priority (as the engine
// orders them); each encodes into a pinned buffer kept in outputs and counts done down.
void SubmitEncodes(PriorityThreadPool& pool, PinnedMemoryPool& memory,
                   const std::vector<float>& data, const std::vector<Partition>& parts,
                   PartitionCodecs& codecs, uint64_t round, std::vector<PinnedBuffer>& outputs,
                   std::latch& done) {
  outputs.resize(parts.size());
  for (const Partition& part : parts) {
    absl::Status submitted =
        pool.Submit(-static_cast<int>(part.index), [&, part, round](absl::Status status) {
          if (!status.ok()) Die("pool", status);
          Codec& codec = *codecs.encoders[part.index];
          absl::StatusOr<PinnedBuffer> buffer =
              memory.Acquire(codec.MaxEncodedBytes(part.elements));
          if (!buffer.ok()) Die("pinned buffer", buffer.status());
          absl::StatusOr<size_t> n =
              codec.Encode(absl::MakeConstSpan(data).subspan(part.offset, part.elements),
                           ContextOf(part, round), buffer->span());
          if (!n.ok()) Die("encode", n.status());
          outputs[part.index] = std::move(*buffer);
          done.count_down();
        });
    if (!submitted.ok()) Die("submit", submitted);
  }
}

// Encodes the tensor on the pool; returns the seconds until every task ran. The pinned
// buffers are released after the clock stops, as the engine releases them after the send.
double TimedPoolEncode(PriorityThreadPool& pool, PinnedMemoryPool& memory,
                       const std::vector<float>& data, const std::vector<Partition>& parts,
                       PartitionCodecs& codecs, uint64_t round) {
  std::vector<PinnedBuffer> outputs;
  std::latch done(static_cast<std::ptrdiff_t>(parts.size()));
  const auto start = Clock::now();
  SubmitEncodes(pool, memory, data, parts, codecs, round, outputs, done);
  done.wait();
  return Seconds(start, Clock::now());
}

// One decode task per partition from the inline run's bytes into out.
double TimedPoolDecode(PriorityThreadPool& pool, std::vector<float>& out,
                       const std::vector<Partition>& parts, PartitionCodecs& codecs,
                       uint64_t round) {
  std::latch done(static_cast<std::ptrdiff_t>(parts.size()));
  const auto start = Clock::now();
  for (const Partition& part : parts) {
    absl::Status submitted =
        pool.Submit(-static_cast<int>(part.index), [&, part](absl::Status status) {
          if (!status.ok()) Die("pool", status);
          absl::Status s = codecs.decoders[part.index]->Decode(
              codecs.encoded[part.index], ContextOf(part, round),
              absl::MakeSpan(out).subspan(part.offset, part.elements));
          if (!s.ok()) Die("decode", s);
          done.count_down();
        });
    if (!submitted.ok()) Die("submit", submitted);
  }
  done.wait();
  return Seconds(start, Clock::now());
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

struct StepFigures {
  std::string codec;
  double compute, encode, inline_step, offload_step;
  double encode_cpu_gbs, decode_cpu_gbs;  // GB of fp32 input per CPU-second, one thread
};

// Section 3 for one codec: compute alone, compute then encode inline, and compute while a
// 1-thread pool encodes (the gradient of the previous layer is compressed meanwhile).
void TrainingStep(PriorityThreadPool& pool, PinnedMemoryPool& memory,
                  const std::vector<float>& data, const std::vector<Partition>& parts,
                  PartitionCodecs& codecs, uint64_t& round, int reps, double inline_encode_s,
                  StepFigures& figures) {
  ComputeLoop compute;
  const auto c0 = Clock::now();
  compute.Run(20);
  const double per_product = Seconds(c0, Clock::now()) / 20;
  const int products = std::max(1, static_cast<int>(inline_encode_s / per_product));
  std::vector<double> compute_alone, inline_step, offload_step;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    compute.Run(products);
    compute_alone.push_back(Seconds(t0, Clock::now()));

    t0 = Clock::now();
    compute.Run(products);
    EncodeInline(data, parts, codecs, round++);
    inline_step.push_back(Seconds(t0, Clock::now()));

    t0 = Clock::now();
    std::vector<PinnedBuffer> outputs;
    std::latch encoded(static_cast<std::ptrdiff_t>(parts.size()));
    SubmitEncodes(pool, memory, data, parts, codecs, round++, outputs, encoded);
    compute.Run(products);
    encoded.wait();
    offload_step.push_back(Seconds(t0, Clock::now()));
  }
  figures.compute = Median(compute_alone);
  figures.encode = inline_encode_s;
  figures.inline_step = Median(inline_step);
  figures.offload_step = Median(offload_step);
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = ParseArgs(argc, argv);
  const size_t elements = opt.mib * (size_t{1} << 20) / sizeof(float);
  const size_t partition_elements = std::max<size_t>(1, opt.chunk_kib * 1024 / sizeof(float));
  const std::vector<Partition> parts = Partitions(elements, partition_elements);
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
  const double memcpy_cpu_gbs = gb / Median(memcpy_cpu);
  std::printf("tensor %zu MiB fp32 in %zu partitions of %zu KiB; medians of %d runs%s\n", opt.mib,
              parts.size(), opt.chunk_kib, opt.reps, opt.pin ? "; pinned" : "");
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
  std::vector<StepFigures> steps;
  for (const std::string& name : opt.codecs) {
    absl::StatusOr<PartitionCodecs> made = MakeCodecs(name, parts.size());
    if (!made.ok()) {
      std::printf("%-10s skipped: %s\n", name.c_str(),
                  std::string(made.status().message()).substr(0, 60).c_str());
      continue;
    }
    PartitionCodecs& codecs = *made;
    uint64_t round = 0;
    // Inline encode (also keeps the bytes for the decode runs) and inline decode.
    std::vector<double> enc_inline, dec_inline, enc_cpu, dec_cpu;
    size_t encoded_bytes = 0;
    for (int r = 0; r < opt.reps; ++r) {
      const auto t0 = Clock::now();
      const double c0 = ThreadCpuSeconds();
      encoded_bytes = EncodeInline(data, parts, codecs, round++);
      enc_inline.push_back(Seconds(t0, Clock::now()));
      enc_cpu.push_back(ThreadCpuSeconds() - c0);
    }
    const uint64_t decode_round = round - 1;  // the bytes kept are from the last round
    for (int r = 0; r < opt.reps; ++r) {
      const auto t0 = Clock::now();
      const double c0 = ThreadCpuSeconds();
      DecodeInline(decoded, parts, codecs, decode_round);
      dec_inline.push_back(Seconds(t0, Clock::now()));
      dec_cpu.push_back(ThreadCpuSeconds() - c0);
    }
    double enc_pool[3] = {0, 0, 0}, dec_pool[3] = {0, 0, 0};
    for (size_t threads : {1u, 2u}) {
      std::unique_ptr<PriorityThreadPool> pool = make_pool(threads, {1, 0});
      std::vector<double> enc, dec;
      for (int r = 0; r < opt.reps; ++r) {
        enc.push_back(TimedPoolEncode(*pool, memory, data, parts, codecs, round++));
        dec.push_back(TimedPoolDecode(*pool, decoded, parts, codecs, decode_round));
      }
      enc_pool[threads] = Median(enc);
      dec_pool[threads] = Median(dec);
    }
    const double ei = Median(enc_inline), di = Median(dec_inline);
    std::printf(
        "%-10s %6.1f | %6.2f / %6.2f / %6.2f | %6.2f / %6.2f / %6.2f | %10.3f / %8.3f | %7.2f "
        "%7.2f\n",
        name.c_str(), static_cast<double>(elements * 4) / static_cast<double>(encoded_bytes),
        gb / ei, gb / enc_pool[1], gb / enc_pool[2], gb / di, gb / dec_pool[1], gb / dec_pool[2],
        gb / enc_pool[1] / memcpy_gbs, gb / enc_pool[2] / memcpy_gbs, enc_pool[1] / enc_pool[2],
        dec_pool[1] / dec_pool[2]);

    StepFigures figures{name, 0, 0, 0, 0, gb / Median(enc_cpu), gb / Median(dec_cpu)};
    std::unique_ptr<PriorityThreadPool> pool = make_pool(1, {1});
    TrainingStep(*pool, memory, data, parts, codecs, round, opt.reps, ei, figures);
    steps.push_back(figures);
  }

  std::printf("\nper-byte CPU cost, one thread (thread CPU time; robust to other load)\n");
  std::printf("%-10s %18s %18s %14s\n", "codec", "encode GB/cpu-s", "decode GB/cpu-s",
              "enc x memcpy");
  for (const StepFigures& s : steps) {
    std::printf("%-10s %18.2f %18.2f %14.3f\n", s.codec.c_str(), s.encode_cpu_gbs, s.decode_cpu_gbs,
                s.encode_cpu_gbs / memcpy_cpu_gbs);
  }
  std::printf(
      "\ntraining step = compute (calibrated to ~ inline encode time) + compress the tensor\n");
  std::printf("%-10s %10s %10s %12s %12s %9s %14s\n", "codec", "compute ms", "encode ms",
              "inline ms", "offload ms", "speed-up", "offload/ideal");
  for (const StepFigures& s : steps) {
    // ideal offload step: max(compute, encode) with no interference.
    const double ideal = std::max(s.compute, s.encode);
    std::printf("%-10s %10.1f %10.1f %12.1f %12.1f %9.2f %14.2f\n", s.codec.c_str(),
                s.compute * 1e3, s.encode * 1e3, s.inline_step * 1e3, s.offload_step * 1e3,
                s.inline_step / s.offload_step, s.offload_step / ideal);
  }

  // The pinned pool's cost per partition buffer once its cache is warm, against copying it.
  const size_t partition_bytes = partition_elements * sizeof(float);
  constexpr int kAcquires = 2000;
  std::vector<double> acquire_s, copy_s;
  for (int r = 0; r < opt.reps; ++r) {
    auto t0 = Clock::now();
    for (int i = 0; i < kAcquires; ++i) {
      absl::StatusOr<PinnedBuffer> buffer = memory.Acquire(partition_bytes);
      if (!buffer.ok()) Die("pinned buffer", buffer.status());
    }
    acquire_s.push_back(Seconds(t0, Clock::now()) / kAcquires);
    t0 = Clock::now();
    std::memcpy(copy.data(), data.data(), partition_bytes);
    copy_s.push_back(Seconds(t0, Clock::now()));
  }
  std::printf(
      "\npinned pool (%s): acquire + release of a %zu KiB buffer %.0f ns; memcpy of it "
      "%.0f ns; ratio %.3f\n",
      std::string(PinnedMemoryKindName(memory.kind())).c_str(), opt.chunk_kib,
      Median(acquire_s) * 1e9, Median(copy_s) * 1e9, Median(acquire_s) / Median(copy_s));
  return 0;
}
