// A worker for the integration tests: pushes and pulls 40 tensors (1 element to 20 MB, odd
// sizes, partition boundaries +-1), fp32 and fp16, for N rounds through the C API, and checks
// every element of every sum exactly against the locally computed reference.
//
// Values are small integers, so every partial sum is exact in fp32 and fp16 whatever the
// order in which the server adds the workers' pushes.
//
// Usage: exact_sum_worker [--rounds N] [--slow-rank R --slow-ms MS] [--max-bytes B]
//                         [--partition-bytes P]   (--slow-*: rank R sleeps up to MS ms before
//                         a quarter of its pushes) [--shuffle 1] (per-rank push order)
//                         [--average 1] (BYTECOMP_FLAG_AVERAGE: expects sum / W)
//                         [--die-rank R --die-round K] (rank R exits at once, code 3, in round K)
//                         [--lonely-rank R] (only rank R push_pulls, one tensor "lonely", and
//                         exits 4 printing "LONELY FAILED after T ms: <error>" if it fails;
//                         the others shut down at once) [--lonely-wait-ms MS] (its wait's
//                         timeout, default 60000; -1: the job's bound)
//                         [--device-first 1] (first a device tensor "on_device" of 16 fp32 on
//                         device 0: prints "DEVICE REFUSED rc=N: <error>", or "DEVICE PRESENT"
//                         and waits for it where a device accepts it; then the rounds)
//                         [--save-after-wait 1] (bytecomp_save_state of each tensor right
//                         after its wait returns: it must not find the tensor in flight)
//                         [--hold-file PATH] (after the last round, before shutting down, wait
//                         until PATH exists, at most 60 s: a test looks at the live job)
//                         [--until-file PATH] (--rounds at most: the workers stop together
//                         after the first round in which any of them found PATH, agreed
//                         through the sum of a one-element vote tensor, "until.vote"; a test
//                         ends a live job when it is done with it)
//                         [--tiny-tensors N] (N fp32 tensors of one element instead)
//                         [--print-every N] (the "round k/N" line every N rounds, default 10)
//                         [--hostile-declarations 1] (first declares 40 tensors "huge.<i>" of
//                         2^40 fp32 elements and one with an 8 MiB name, which the job's
//                         limits must refuse without growing the scheduler or the servers;
//                         prints "HOSTILE DECLARATIONS SENT", then the rounds)
// At the end it prints "PUSHED BYTES: N" (what this worker pushed to servers) and
// "PULLED BYTES: N".
// Exit code 0: all sums exact. 1: a wrong sum (printed). 2: an operation failed (the error text
// and the milliseconds it took are printed as "OPERATION FAILED after T ms: ...").
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bytecomp/c_api.h"
#include "bytecomp/common/half.h"

namespace {

struct TestTensor {
  std::string name;
  int64_t count;
  int dtype;
  std::vector<uint8_t> data;
};

float Value(int64_t i, int rank, int round) {
  return static_cast<float>((i * 7 + rank * 13 + round * 5) % 61) - 30.0f;
}

int64_t Arg(int argc, char** argv, const char* flag, int64_t def) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], flag) == 0) return std::atoll(argv[i + 1]);
  }
  return def;
}

std::vector<TestTensor> MakeTensors(int64_t partition_bytes, int64_t max_bytes) {
  const int64_t p32 = partition_bytes / 4;  // partition elements for fp32
  const int64_t p16 = partition_bytes / 2;
  // 20 sizes per dtype: tiny, odd, partition boundaries +-1, and one of 20 MB.
  std::vector<int64_t> fp32_sizes = {
      1,       2,   3,       7,           31, 33,    1000,   4097,   65535,  65537,
      p32 - 1, p32, p32 + 1, 2 * p32 + 1, 77, 12345, 123457, 300001, 999999, 20 * 1024 * 1024 / 4};
  std::vector<int64_t> fp16_sizes = {
      1,    5,     9,     17,     31,     255,    777,     1023, 1025,    2049,
      4099, 33333, 65537, 100003, 250001, 500001, p16 - 1, p16,  p16 + 1, 20 * 1024 * 1024 / 2};
  std::vector<TestTensor> tensors;
  auto add = [&](const std::vector<int64_t>& sizes, int dtype, const char* tag) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      const int64_t elem = dtype == BYTECOMP_FLOAT32 ? 4 : 2;
      int64_t count = std::max<int64_t>(1, std::min(sizes[i], max_bytes / elem));
      tensors.push_back({std::string(tag) + "." + std::to_string(i) + "." + std::to_string(count),
                         count, dtype, std::vector<uint8_t>(count * elem)});
    }
  };
  add(fp32_sizes, BYTECOMP_FLOAT32, "fp32");
  add(fp16_sizes, BYTECOMP_FLOAT16, "fp16");
  return tensors;
}

void Fill(TestTensor& t, int rank, int round) {
  if (t.dtype == BYTECOMP_FLOAT32) {
    float* d = reinterpret_cast<float*>(t.data.data());
    for (int64_t i = 0; i < t.count; ++i) d[i] = Value(i, rank, round);
  } else {
    uint16_t* d = reinterpret_cast<uint16_t*>(t.data.data());
    for (int64_t i = 0; i < t.count; ++i) d[i] = bytecomp::FloatToHalfBits(Value(i, rank, round));
  }
}

// Returns the first wrong index, or -1. average: the engine divides the exact fp32 sum by W once,
// then narrows to the tensor's dtype.
int64_t Check(const TestTensor& t, int workers, int round, bool average) {
  for (int64_t i = 0; i < t.count; ++i) {
    float expected = 0;
    for (int r = 0; r < workers; ++r) expected += Value(i, r, round);
    if (average) expected /= static_cast<float>(workers);
    if (t.dtype == BYTECOMP_FLOAT16)
      expected = bytecomp::HalfBitsToFloat(bytecomp::FloatToHalfBits(expected));
    float got =
        t.dtype == BYTECOMP_FLOAT32
            ? reinterpret_cast<const float*>(t.data.data())[i]
            : bytecomp::HalfBitsToFloat(reinterpret_cast<const uint16_t*>(t.data.data())[i]);
    if (got != expected) {
      std::fprintf(stderr, "WRONG SUM: tensor %s round %d index %lld: got %g expected %g\n",
                   t.name.c_str(), round, static_cast<long long>(i), got, expected);
      return i;
    }
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = static_cast<int>(Arg(argc, argv, "--rounds", 50));
  const int print_every = std::max(1, static_cast<int>(Arg(argc, argv, "--print-every", 10)));
  const int slow_ms = static_cast<int>(Arg(argc, argv, "--slow-ms", 0));
  const int slow_rank = static_cast<int>(Arg(argc, argv, "--slow-rank", -1));
  // Each rank pushes its tensors in its own order (and so fills its in-flight budget with
  // different keys than the others).
  const bool shuffle = Arg(argc, argv, "--shuffle", 0) != 0;
  const int64_t max_bytes = Arg(argc, argv, "--max-bytes", 20 << 20);
  const int64_t partition_bytes = Arg(argc, argv, "--partition-bytes", 4 << 20);
  const bool average = Arg(argc, argv, "--average", 0) != 0;
  const bool save_after_wait = Arg(argc, argv, "--save-after-wait", 0) != 0;
  const int die_rank = static_cast<int>(Arg(argc, argv, "--die-rank", -1));
  const int die_round = static_cast<int>(Arg(argc, argv, "--die-round", -1));
  const auto start = std::chrono::steady_clock::now();
  auto elapsed_ms = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 start)
        .count();
  };
  if (bytecomp_init(nullptr) != BYTECOMP_OK) {
    std::fprintf(stderr, "INIT FAILED after %lld ms: %s\n", static_cast<long long>(elapsed_ms()),
                 bytecomp_last_error());
    return 2;
  }
  const int rank = bytecomp_rank();
  const int workers = bytecomp_size();
  if (const int lonely = static_cast<int>(Arg(argc, argv, "--lonely-rank", -1)); lonely >= 0) {
    if (rank != lonely) return bytecomp_shutdown() == BYTECOMP_OK ? 0 : 2;
    std::vector<float> v(100, 1.0f);
    bytecomp_handle_t h = 0;
    const int64_t t0 = elapsed_ms();
    if (bytecomp_push_pull("lonely", v.data(), 100, BYTECOMP_FLOAT32, 0, 0, &h) != BYTECOMP_OK ||
        bytecomp_wait(h, Arg(argc, argv, "--lonely-wait-ms", 60000)) != BYTECOMP_OK) {
      std::printf("LONELY FAILED after %lld ms: %s\n", static_cast<long long>(elapsed_ms() - t0),
                  bytecomp_last_error());
      std::fflush(stdout);
      bytecomp_shutdown();
      return 4;
    }
    return bytecomp_shutdown() == BYTECOMP_OK ? 0 : 2;
  }
  if (Arg(argc, argv, "--device-first", 0) != 0) {
    std::vector<float> v(16, 1.0f);
    bytecomp_handle_t h = 0;
    const int rc = bytecomp_push_pull_device("on_device", v.data(), 16, BYTECOMP_FLOAT32, 0,
                                             nullptr, 0, 0, &h);
    if (rc == BYTECOMP_OK) {
      std::printf("DEVICE PRESENT: %s\n",
                  bytecomp_wait(h, 60000) == BYTECOMP_OK ? "done" : bytecomp_last_error());
    } else {
      std::printf("DEVICE REFUSED rc=%d: %s\n", rc, bytecomp_last_error());
    }
    std::fflush(stdout);
  }
  if (Arg(argc, argv, "--hostile-declarations", 0) != 0) {
    for (int i = 0; i < 40; ++i) {
      bytecomp_declare(("huge." + std::to_string(i)).c_str(), int64_t{1} << 40, BYTECOMP_FLOAT32);
    }
    bytecomp_declare(std::string(8 << 20, 'n').c_str(), 4, BYTECOMP_FLOAT32);
    std::printf("HOSTILE DECLARATIONS SENT\n");
    std::fflush(stdout);
  }
  std::vector<TestTensor> tensors = MakeTensors(partition_bytes, max_bytes);
  if (const int64_t tiny = Arg(argc, argv, "--tiny-tensors", 0); tiny > 0) {
    tensors.clear();
    for (int64_t i = 0; i < tiny; ++i) {
      tensors.push_back(
          {"tiny." + std::to_string(i), 1, BYTECOMP_FLOAT32, std::vector<uint8_t>(4)});
    }
  }
  std::mt19937 rng(rank * 7919 + 1);
  std::vector<bytecomp_handle_t> handles(tensors.size());
  std::vector<int64_t> versions;
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::string until_file;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--until-file") == 0) until_file = argv[i + 1];
  }
  int rounds_done = 0;
  for (int round = 0; round < rounds; ++round) {
    if (rank == die_rank && round == die_round) {
      std::printf("DYING in round %d\n", round);
      std::fflush(stdout);
      std::_Exit(3);  // no shutdown: the others must notice
    }
    for (auto& t : tensors) Fill(t, rank, round);
    // This worker's vote to go on (1) or to stop after this round (0): the sum is the same on
    // every worker, so they all stop at one round.
    float vote = 1.0f;
    bytecomp_handle_t vote_handle = 0;
    if (!until_file.empty()) {
      if (FILE* f = std::fopen(until_file.c_str(), "r")) {
        std::fclose(f);
        vote = 0.0f;
      }
      if (bytecomp_push_pull("until.vote", &vote, 1, BYTECOMP_FLOAT32, 0, 0, &vote_handle) !=
              BYTECOMP_OK ||
          bytecomp_wait(vote_handle, 60000) != BYTECOMP_OK) {
        std::fprintf(stderr, "OPERATION FAILED after %lld ms (the vote): %s\n",
                     static_cast<long long>(elapsed_ms()), bytecomp_last_error());
        bytecomp_shutdown();
        return 2;
      }
    }
    if (shuffle) std::shuffle(order.begin(), order.end(), rng);
    for (size_t i : order) {
      if (slow_ms > 0 && rank == slow_rank && rng() % 4 == 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(rng() % slow_ms));
      TestTensor& t = tensors[i];
      if (bytecomp_push_pull(t.name.c_str(), t.data.data(), t.count, t.dtype,
                             static_cast<int>(tensors.size() - i),
                             average ? BYTECOMP_FLAG_AVERAGE : 0, &handles[i]) != BYTECOMP_OK) {
        std::fprintf(stderr, "OPERATION FAILED after %lld ms: %s\n",
                     static_cast<long long>(elapsed_ms()), bytecomp_last_error());
        // This round's earlier operations may still use their tensors' memory (ZeroMQ may
        // hold a push): shut down, which ends them, before the tensors go.
        bytecomp_shutdown();
        return 2;
      }
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      const int64_t t0 = elapsed_ms();
      if (bytecomp_wait(handles[i], 60000) != BYTECOMP_OK) {
        std::fprintf(stderr, "OPERATION FAILED after %lld ms (waited %lld ms): %s\n",
                     static_cast<long long>(elapsed_ms()),
                     static_cast<long long>(elapsed_ms() - t0), bytecomp_last_error());
        bytecomp_shutdown();
        return 2;
      }
      size_t state_bytes = 0;
      if (save_after_wait &&
          bytecomp_save_state(tensors[i].name.c_str(), nullptr, 0, &state_bytes) != BYTECOMP_OK) {
        std::fprintf(stderr, "OPERATION FAILED: save_state right after the wait: %s\n",
                     bytecomp_last_error());
        bytecomp_shutdown();
        return 2;
      }
    }
    for (auto& t : tensors) {
      if (Check(t, workers, round, average) >= 0) {
        bytecomp_shutdown();
        return 1;
      }
    }
    // The strategy version each tensor used this round: one version for all, every round.
    int64_t version = -1;
    for (auto& t : tensors) {
      int64_t r = -1, v = -1;
      bytecomp_tensor_strategy(t.name.c_str(), &r, &v);
      if (r != round || (version >= 0 && v != version)) {
        std::fprintf(stderr, "VERSION MIXUP: tensor %s round %lld version %lld, others %lld\n",
                     t.name.c_str(), static_cast<long long>(r), static_cast<long long>(v),
                     static_cast<long long>(version));
        bytecomp_shutdown();
        return 1;
      }
      version = v;
    }
    versions.push_back(version);
    rounds_done = round + 1;
    // Someone found the file.
    const bool stop = !until_file.empty() && vote < static_cast<float>(workers);
    if (round % print_every == print_every - 1 || round == rounds - 1 || stop) {
      std::printf("round %d/%d: %zu tensors exact\n", round + 1, rounds, tensors.size());
      std::fflush(stdout);
    }
    if (stop) break;
  }
  std::printf("STRATEGY VERSIONS BY ROUND:");
  for (int64_t v : versions) std::printf(" %lld", static_cast<long long>(v));
  bytecomp_stats_t stats{};
  bytecomp_get_stats(&stats);
  std::printf("\nPUSHED BYTES: %lld\n", static_cast<long long>(stats.pushed_bytes));
  std::printf("PULLED BYTES: %lld\n", static_cast<long long>(stats.pulled_bytes));
  std::fflush(stdout);
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--hold-file") != 0) continue;
    const std::string hold = argv[i + 1];
    for (int waited_ms = 0; waited_ms < 60000; waited_ms += 50) {
      if (FILE* f = std::fopen(hold.c_str(), "r")) {
        std::fclose(f);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  std::printf("ALL SUMS EXACT: %d rounds x %zu tensors, W=%d\n", rounds_done, tensors.size(),
              workers);
  return bytecomp_shutdown() == BYTECOMP_OK ? 0 : 2;
}
