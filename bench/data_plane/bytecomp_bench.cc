// bytecomp-bench: a synthetic worker. Pushes and pulls a model's worth of tensors for N rounds
// through the C API, checks every sum, prints per-round times, and ends with one JSON line:
//   {"bench":"bytecomp-bench","model":...,"W":..,"S":..,"partition_bytes":..,
//    "bytes_per_round":..,"median_round_ms":..,"goodput_gbytes_per_s":..,
//    "strategy_versions":[first,last],"rank":..,"cpu_ms_per_round":..,"max_rss_kb":..}
// (the strategy versions the timed rounds ran under; this process's CPU time, every thread,
// over the timed rounds, per round; its peak resident memory). Rank 0 prints it first; with
// --report_every_rank every rank prints its own.
// goodput = the model's bytes per worker / median round time.
//
// Model: --preset flat:SIZE (SIZE in bytes, suffixes KB MB GB: one tensor) | resnet50 | vgg16 |
// bert-base | ... (scheduler/planner/profiles/NAME.pbtxt) | --profile FILE (a ModelProfile).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bytecomp/c_api.h"
#include "bytecomp/common.h"
#include "planner.pb.h"

ABSL_FLAG(std::string, preset, "flat:100MB", "flat:SIZE, or a shipped profile name");
ABSL_FLAG(std::string, profile, "", "ModelProfile .pbtxt (overrides --preset)");
ABSL_FLAG(std::string, profiles_dir, BYTECOMP_PROFILES_DIR, "where shipped profiles live");
ABSL_FLAG(int, rounds, 20, "timed rounds");
ABSL_FLAG(int, warmup, 2, "untimed rounds first");
ABSL_FLAG(bool, check, true, "check every sum exactly");
ABSL_FLAG(bool, barrier, true,
          "before each round's clock starts, every worker meets at a one-element push_pull "
          "(tensor bytecomp-bench.barrier), so a round is timed from when the slowest worker "
          "is ready to push: the planner models workers that start together, and a worker "
          "still filling its tensors would otherwise count in the others' rounds");
ABSL_FLAG(std::string, key_file, "",
          "the job's cluster key file (sets BYTECOMP_KEY_FILE for the engine; default: the "
          "environment's)");
ABSL_FLAG(bool, report_every_rank, false,
          "every rank prints its JSON line (its CPU per round and memory), not only rank 0");
ABSL_FLAG(int, forward_ms, 0,
          "sleep this long before each round's first push_pull, standing in for the forward "
          "pass (not counted in the round times)");

namespace {

// This process's CPU time, every thread, in ms.
double ProcessCpuMs() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
}

struct Tensor {
  std::string name;
  std::vector<float> data;
};

absl::StatusOr<int64_t> ParseBytes(absl::string_view text) {
  const std::string given(text);
  int64_t scale = 1;
  for (auto [suffix, s] : {std::pair<const char*, int64_t>{"GB", 1000000000},
                           {"MB", 1000000},
                           {"KB", 1000},
                           {"B", 1}}) {
    if (absl::EndsWith(text, suffix)) {
      text.remove_suffix(std::strlen(suffix));
      scale = s;
      break;
    }
  }
  int64_t n;
  if (!absl::SimpleAtoi(text, &n) || n <= 0 || n > (int64_t{1} << 40) / scale || n * scale < 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad size '", given,
                     "': a whole number of bytes >= 4 with an optional "
                     "suffix KB, MB or GB (e.g. 100MB)"));
  }
  return n * scale;
}

absl::StatusOr<std::vector<Tensor>> LoadModel(std::string* model_name) {
  std::vector<Tensor> tensors;
  std::string path = absl::GetFlag(FLAGS_profile);
  const std::string preset = absl::GetFlag(FLAGS_preset);
  if (path.empty() && absl::StartsWith(preset, "flat:")) {
    absl::StatusOr<int64_t> bytes = ParseBytes(absl::string_view(preset).substr(5));
    if (!bytes.ok()) return bytes.status();
    *model_name = preset;
    tensors.push_back({"flat", std::vector<float>(*bytes / 4)});
    return tensors;
  }
  if (path.empty()) path = absl::StrCat(absl::GetFlag(FLAGS_profiles_dir), "/", preset, ".pbtxt");
  bytecomp::proto::ModelProfile profile;
  if (absl::Status s = bytecomp::ParseTextProtoFile(path, &profile); !s.ok()) return s;
  *model_name = profile.model();
  for (const auto& t : profile.tensors())
    tensors.push_back({t.name(), std::vector<float>(t.elements())});
  return tensors;
}

// Element i of rank's gradient in a round: ((3i + 11 rank + round) mod 29) - 14, small
// integers whose sums are exact in fp32.
float Value(size_t i, int rank, int round) {
  return static_cast<float>(static_cast<int>((i * 3 + rank * 11 + round) % 29)) - 14.0f;
}

// Writes Value(i, rank, round) for every i without a division per element (the values
// repeat every 29 elements): filling must not load the CPU that the other workers, sharing
// it in a one-host cluster, are sending with.
void Fill(std::vector<float>& data, int rank, int round) {
  float period[29];
  for (int j = 0; j < 29; ++j) period[j] = Value(j, rank, round);
  size_t i = 0;
  for (; i + 29 <= data.size(); i += 29) std::memcpy(&data[i], period, sizeof period);
  for (int j = 0; i < data.size(); ++i, ++j) data[i] = period[j];
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::string model;
  absl::StatusOr<std::vector<Tensor>> loaded = LoadModel(&model);
  if (!loaded.ok()) {
    std::fprintf(stderr, "bytecomp-bench: %s\n", std::string(loaded.status().message()).c_str());
    return 2;
  }
  std::vector<Tensor>& tensors = *loaded;
  if (const std::string key = absl::GetFlag(FLAGS_key_file); !key.empty()) {
    setenv("BYTECOMP_KEY_FILE", key.c_str(), 1);  // the engine reads the key from there
  }
  if (bytecomp_init(nullptr) != BYTECOMP_OK) {
    std::fprintf(stderr, "bytecomp-bench: init failed: %s\n", bytecomp_last_error());
    return 2;
  }
  const int rank = bytecomp_rank();
  const int workers = bytecomp_size();
  int64_t bytes = 0;
  for (const Tensor& t : tensors) bytes += static_cast<int64_t>(t.data.size()) * 4;
  const int rounds = absl::GetFlag(FLAGS_rounds);
  const int warmup = absl::GetFlag(FLAGS_warmup);
  std::vector<double> times_ms;
  int64_t first_version = -1, last_version = -1;  // strategy versions of the timed rounds
  double timed_cpu_ms = 0;                        // this process's CPU time over the timed rounds
  std::vector<bytecomp_handle_t> handles(tensors.size());
  // A failed operation: shut down first, which ends the round's other operations, so that
  // none still uses a tensor's memory (ZeroMQ may hold a push of it) once it goes.
  const auto shut_down_failed = [](int code) {
    bytecomp_shutdown();
    return code;
  };
  for (int round = 0; round < warmup + rounds; ++round) {
    for (Tensor& t : tensors) Fill(t.data, rank, round);
    if (const int f = absl::GetFlag(FLAGS_forward_ms); f > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(f));
    }
    if (absl::GetFlag(FLAGS_barrier)) {
      float one = 1;
      bytecomp_handle_t barrier;
      if (bytecomp_push_pull("bytecomp-bench.barrier", &one, 1, BYTECOMP_FLOAT32,
                             static_cast<int>(tensors.size()), 0, &barrier) != BYTECOMP_OK ||
          bytecomp_wait(barrier, 120000) != BYTECOMP_OK) {
        std::fprintf(stderr, "barrier failed: %s\n", bytecomp_last_error());
        return shut_down_failed(2);
      }
    }
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = ProcessCpuMs();
    // Backprop order: the profile lists the output layer first; the input layer, needed first
    // by the next forward pass, gets the highest priority.
    for (size_t i = 0; i < tensors.size(); ++i) {
      Tensor& t = tensors[i];
      if (bytecomp_push_pull(t.name.c_str(), t.data.data(), static_cast<int64_t>(t.data.size()),
                             BYTECOMP_FLOAT32, static_cast<int>(i), 0,
                             &handles[i]) != BYTECOMP_OK) {
        std::fprintf(stderr, "push_pull failed: %s\n", bytecomp_last_error());
        return shut_down_failed(2);
      }
    }
    for (bytecomp_handle_t h : handles) {
      if (bytecomp_wait(h, 120000) != BYTECOMP_OK) {
        std::fprintf(stderr, "wait failed: %s\n", bytecomp_last_error());
        return shut_down_failed(2);
      }
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    const double cpu_ms = ProcessCpuMs() - cpu_start;
    if (absl::GetFlag(FLAGS_check)) {
      for (const Tensor& t : tensors) {
        for (size_t i = 0; i < t.data.size(); ++i) {
          float expected = 0;
          for (int r = 0; r < workers; ++r) expected += Value(i, r, round);
          if (t.data[i] != expected) {
            std::fprintf(stderr, "WRONG SUM in %s[%zu] round %d: %g, expected %g\n", t.name.c_str(),
                         i, round, t.data[i], expected);
            return shut_down_failed(1);
          }
        }
      }
    }
    if (round >= warmup) {
      // The strategy version the round ran under (--strategy=auto switches after profiling:
      // a caller wants every timed round after the switch).
      int64_t op_round = 0, version = 0;
      if (bytecomp_tensor_strategy(tensors[0].name.c_str(), &op_round, &version) == BYTECOMP_OK) {
        first_version = first_version < 0 ? version : std::min(first_version, version);
        last_version = std::max(last_version, version);
      }
      times_ms.push_back(ms);
      timed_cpu_ms += cpu_ms;
      if (rank == 0) std::printf("round %3d: %8.2f ms\n", round - warmup, ms);
    }
  }
  std::vector<double> sorted = times_ms;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  if (rank == 0 || absl::GetFlag(FLAGS_report_every_rank)) {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    std::printf(
        "{\"bench\":\"bytecomp-bench\",\"model\":\"%s\",\"tensors\":%zu,\"W\":%d,\"S\":%d,"
        "\"partition_bytes\":%lld,\"bytes_per_round\":%lld,\"median_round_ms\":%.3f,"
        "\"goodput_gbytes_per_s\":%.3f,\"checked\":%s,\"strategy_versions\":[%lld,%lld],"
        "\"rank\":%d,\"cpu_ms_per_round\":%.3f,\"max_rss_kb\":%ld}\n",
        model.c_str(), tensors.size(), workers, bytecomp_num_servers(),
        static_cast<long long>(bytecomp_partition_bytes()), static_cast<long long>(bytes), median,
        bytes / median / 1e6, absl::GetFlag(FLAGS_check) ? "true" : "false",
        static_cast<long long>(first_version), static_cast<long long>(last_version), rank,
        timed_cpu_ms / static_cast<double>(times_ms.size()), u.ru_maxrss);
  }
  std::fflush(stdout);
  return bytecomp_shutdown() == BYTECOMP_OK ? 0 : 2;
}
