// bytecomp-codec-bench: for every registered codec, single-thread encode and decode throughput
// (GB/s of fp32 input, per thread CPU second) on 1M and 64M floats, the median of several
// repetitions, the
// compressed/original size, and the ratio to memcpy bandwidth measured in the same run: memcpy
// of the same size is timed again right before each codec's repetitions (its median in the last
// column), so that the ratios hold while the machine's memory bandwidth drifts; the codec's
// warm-up call then brings its own data back into the caches.
//
//   bytecomp-codec-bench [--codecs=topk,fp16] [--sizes=1048576,67108864] [--reps=7]
//                        [--params=ratio=0.01[,key=value...]]
//   bytecomp-codec-bench --codec=topk --params=ratio=0.01
//   bytecomp-codec-bench --list     every codec and memory with its parameters
//   bytecomp-codec-bench --preset=grace [--codecs=...] [--sizes=...] [--reps=N]
//
// --params go to every codec benchmarked (a codec that has no such parameter fails with the
// registry's error naming it); without them each codec runs with its defaults (--list).
// --preset=grace: the parameters GRACE's benchmarks use where ours differ by default (ratio
// 0.01 for topk, randomk and dgc), each codec with its own, on 64 MiB unless --sizes says
// otherwise; the header prints each codec's parameters. --params add to every codec's.
//
// Targets (issue 3, each codec's CodecFacts::encode_target): codecs that code each element on
// its own encode at >= 25% of memcpy; those that select elements (topk, dgc, threshold) at
// >= 5%. The last column says whether the run met its target.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bytecomp/compress.h"

namespace {

using bytecomp::compress::Codec;
using bytecomp::compress::CodecContext;
using bytecomp::compress::CodecRegistry;
// Thread CPU time, not wall time: on a shared, overloaded machine a descheduled thread would
// otherwise count other processes' time. memcpy is measured the same way, so ratios compare
// like with like.
struct Clock {
  using time_point = double;
  static double now() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
  }
};

double Seconds(double a, double b) { return b - a; }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Gradient-like input, fast to make: Irwin-Hall approximation of a normal, a few outliers.
std::vector<float> MakeInput(size_t n) {
  std::vector<float> x(n);
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < n; ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    const float u = static_cast<float>((s & 0xffff) + ((s >> 16) & 0xffff) + ((s >> 32) & 0xffff) +
                                       ((s >> 48) & 0xffff)) *
                    (1.0f / 65536.0f);
    x[i] = (u - 2.0f) * 1.7320508f * 0.01f;
    if ((s >> 40 & 0x3ff) == 0) x[i] *= 100.0f;
  }
  return x;
}

// memcpy of src into dst (pages already touched), the median of reps, in GB/s.
double MemcpyBandwidth(const std::vector<float>& src, std::vector<float>& dst, int reps) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto a = Clock::now();
    std::memcpy(dst.data(), src.data(), 4 * src.size());
    const auto b = Clock::now();
    t.push_back(Seconds(a, b));
  }
  volatile float sink = dst[src.size() / 2];
  (void)sink;
  return 4.0 * src.size() / Median(t) / 1e9;
}

// The codec's target (CodecFacts::encode_target) as a fraction of memcpy; 0: none.
double TargetFraction(const std::string& name) {
  const bytecomp::compress::CodecFacts* facts = bytecomp::compress::CodecFactsOf(name);
  if (facts == nullptr) return 0;
  switch (facts->encode_target) {
    case bytecomp::compress::EncodeSpeedTarget::kElementwise:
      return 0.25;
    case bytecomp::compress::EncodeSpeedTarget::kSelection:
      return 0.05;
    case bytecomp::compress::EncodeSpeedTarget::kNone:
      break;
  }
  return 0;
}

// --preset=grace: per-codec parameters comparable with GRACE's (sands-lab/grace) runs.
std::map<std::string, bytecomp::compress::CodecParams> GracePreset() {
  return {{"topk", {{"ratio", "0.01"}}},
          {"randomk", {{"ratio", "0.01"}}},
          {"dgc", {{"ratio", "0.01"}}}};
}

std::string Describe(const bytecomp::compress::CodecParams& params) {
  std::string described;
  for (const auto& [key, value] : params) described += " " + key + "=" + value;
  return described;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> codecs = CodecRegistry::Global().Names();
  std::vector<size_t> sizes = {size_t{1} << 20, size_t{64} << 20};
  int reps = 7;
  bytecomp::compress::CodecParams params;
  std::map<std::string, bytecomp::compress::CodecParams> per_codec;  // --preset
  bool sizes_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--list") {
      for (const auto& name : CodecRegistry::Global().Names()) {
        const auto* spec = CodecRegistry::Global().Find(name);
        std::printf("codec %s: %s\n%s\n", name.c_str(), spec->summary.c_str(),
                    bytecomp::compress::DescribeParams(spec->params).c_str());
      }
      const auto& memories = bytecomp::compress::MemoryRegistry::Global();
      for (const auto& name : memories.Names()) {
        const auto* spec = memories.Find(name);
        std::printf("memory %s: %s\n%s\n", name.c_str(), spec->summary.c_str(),
                    bytecomp::compress::DescribeParams(spec->params).c_str());
      }
      return 0;
    } else if (arg.rfind("--codecs=", 0) == 0 || arg.rfind("--codec=", 0) == 0) {
      codecs = absl::StrSplit(arg.substr(arg.find('=') + 1), ',', absl::SkipEmpty());
    } else if (arg.rfind("--params=", 0) == 0) {
      for (absl::string_view kv : absl::StrSplit(arg.substr(9), ',', absl::SkipEmpty())) {
        const std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
        if (p.first.empty() || kv.find('=') == absl::string_view::npos) {
          std::fprintf(stderr, "bad --params entry '%s' (want key=value)\n",
                       std::string(kv).c_str());
          return 2;
        }
        params[p.first] = p.second;
      }
    } else if (arg == "--preset=grace") {
      per_codec = GracePreset();
      if (!sizes_given) sizes = {size_t{64} << 20 >> 2};
    } else if (arg.rfind("--sizes=", 0) == 0) {
      sizes_given = true;
      sizes.clear();
      for (absl::string_view s : absl::StrSplit(arg.substr(8), ',', absl::SkipEmpty())) {
        size_t v;
        if (!absl::SimpleAtoi(s, &v) || v == 0) {
          std::fprintf(stderr, "bad size '%s'\n", std::string(s).c_str());
          return 2;
        }
        sizes.push_back(v);
      }
    } else if (arg.rfind("--reps=", 0) == 0 && absl::SimpleAtoi(arg.substr(7), &reps) && reps > 0) {
    } else {
      std::fprintf(stderr,
                   "usage: %s [--preset=grace] [--codecs=a,b] [--params=k=v,...] [--sizes=n1,n2] "
                   "[--reps=N] | --list\n",
                   argv[0]);
      return 2;
    }
  }

  int failures = 0;
  for (size_t n : sizes) {
    const std::vector<float> input = MakeInput(n);
    const int r = n >= (size_t{16} << 20) ? std::max(3, reps / 2) : reps;
    std::vector<float> copy(n);
    std::memcpy(copy.data(), input.data(), 4 * n);  // touch pages
    const double memcpy_gbs = MemcpyBandwidth(input, copy, r * 2);
    const std::string described = Describe(params);
    std::printf(
        "\n%zu floats (%.0f MiB), one thread, CPU time, median of %d; memcpy %.2f GB/s; "
        "params:%s\n",
        n, 4.0 * n / (1 << 20), r, memcpy_gbs,
        described.empty() ? " the codecs' defaults" : described.c_str());
    if (!per_codec.empty()) {
      std::printf("preset grace, per codec (the others: their defaults):");
      for (const auto& [codec, codec_params] : per_codec) {
        std::printf(" %s:%s", codec.c_str(), Describe(codec_params).c_str());
      }
      std::printf("\n");
    }
    std::printf("%-10s %9s %8s %9s %8s %10s %7s %4s %11s\n", "codec", "enc GB/s", "enc/mcp",
                "dec GB/s", "dec/mcp", "size ratio", "target", "met", "memcpy GB/s");
    for (const auto& name : codecs) {
      bytecomp::compress::CodecParams codec_params;
      if (auto it = per_codec.find(name); it != per_codec.end()) codec_params = it->second;
      for (const auto& [key, value] : params) codec_params[key] = value;
      auto codec_or = bytecomp::compress::CreateCodec(name, codec_params);
      if (!codec_or.ok()) {
        std::printf("%-10s %s\n", name.c_str(), std::string(codec_or.status().message()).c_str());
        ++failures;
        continue;
      }
      Codec& codec = **codec_or;
      std::vector<uint8_t> out(codec.MaxEncodedBytes(n));
      std::vector<float> decoded(n);
      CodecContext ctx;
      ctx.key = 1;
      ctx.seed = 7;
      ctx.learning_rate = 0.1f;
      const double row_memcpy = MemcpyBandwidth(input, copy, r);
      std::vector<double> enc_t, dec_t;
      size_t bytes = 0;
      bool ok = true;
      for (int rep = 0; rep <= r && ok; ++rep) {  // rep 0 warms up (page faults, scratch)
        ctx.round = rep;
        const auto a = Clock::now();
        auto b = codec.Encode(input, ctx, absl::MakeSpan(out));
        const auto m = Clock::now();
        if (!b.ok()) {
          std::printf("%-10s encode failed: %s\n", name.c_str(),
                      std::string(b.status().message()).c_str());
          ok = false;
          break;
        }
        bytes = *b;
        auto s = codec.Decode(absl::MakeConstSpan(out.data(), bytes), ctx, absl::MakeSpan(decoded));
        const auto e = Clock::now();
        if (!s.ok()) {
          std::printf("%-10s decode failed: %s\n", name.c_str(), std::string(s.message()).c_str());
          ok = false;
          break;
        }
        if (rep > 0) {
          enc_t.push_back(Seconds(a, m));
          dec_t.push_back(Seconds(m, e));
        }
      }
      if (!ok) {
        ++failures;
        continue;
      }
      const double enc = 4.0 * n / Median(enc_t) / 1e9, dec = 4.0 * n / Median(dec_t) / 1e9;
      const double target = TargetFraction(name);
      const bool met = enc / row_memcpy >= target;
      std::printf("%-10s %9.2f %7.1f%% %9.2f %7.1f%% %10.4f %6.0f%% %4s %11.2f\n", name.c_str(),
                  enc, 100 * enc / row_memcpy, dec, 100 * dec / row_memcpy,
                  static_cast<double>(bytes) / (4.0 * n), 100 * target,
                  target == 0 ? "-" : (met ? "yes" : "NO"), row_memcpy);
    }
  }
  return failures == 0 ? 0 : 1;
}
