// A worker for the codec integration tests: every tensor of the strategy file (one per entry,
// named by its name_pattern) goes through the cluster with that entry's codec, one-way or
// two-way, for several rounds; each pulled result must equal, bit for bit, the reference this
// worker computes locally: every worker's encode (with its error-feedback memory, from the
// same deterministic inputs), the server's aggregation in rank order, and for two-way the
// server's re-encode and this worker's decode. Uncompressed tensors get integer inputs, whose
// sums (and averages over a power-of-two W) are exact.
//
// Usage: codec_cluster_worker --strategy FILE --rounds R --elements N [--partition_elements P]
//                             [--device] [--machines 0,0,1,1]
// All tensors have N elements. With one partition per tensor the scheduler's balancing puts
// tensor t on server t % S, which the reference needs for the server's codec context; with
// --partition_elements (the scheduler's partition_bytes / 4) the job must have one server.
// --device: tensors whose name contains ".dev" are pushed with bytecomp_push_pull_device on
// the emulated device (BYTECOMP_DEVICE_BACKEND=emulated), their inputs written by work queued
// on the tensor's stream just before the call; names containing ".avg" ask for the average,
// names containing ".f16" are fp16 tensors (inputs rounded to fp16; the engine computes in
// fp32, so the expected result is the fp32 reference rounded to fp16).
// --expect_device_refusal: only checks that bytecomp_push_pull_device refuses clearly when
// there is no device (prints the error) and exits.
// --machines (a hierarchical job): the machine of each worker rank. The reference then sums
// each machine's inputs in fp32 in rank order (its local ranks) and applies the codec to that
// sum as the machine's local root (its lowest rank) would: one encode per machine.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "bytecomp/c_api.h"
#include "bytecomp/common.h"
#include "bytecomp/compress.h"
#include "bytecomp/compress/strategy.h"
#include "bytecomp/compress/two_round.h"
#include "bytecomp/worker/emulated_device.h"

ABSL_FLAG(std::string, strategy, "", "the strategy file the scheduler was given");
ABSL_FLAG(int, rounds, 4, "rounds");
ABSL_FLAG(int, elements, 4099, "elements per tensor");
ABSL_FLAG(std::string, machines, "",
          "hierarchical job: machine index of each worker rank, e.g. 0,0,1,1");
ABSL_FLAG(int, partition_elements, 0, "elements per partition (0: one partition per tensor)");
ABSL_FLAG(bool, device, false, "push tensors named *.dev* as (emulated) device tensors");
ABSL_FLAG(bool, expect_device_refusal, false, "check the device API's error without a device");

namespace bc = bytecomp::compress;

namespace {

uint64_t Hash(int rank, int round, int tensor, size_t i) {
  uint64_t x = (static_cast<uint64_t>(rank) << 48) ^ (static_cast<uint64_t>(round) << 32) ^
               (static_cast<uint64_t>(tensor) << 24) ^ i;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

float Input(int rank, int round, int tensor, size_t i) {
  const uint64_t x = Hash(rank, round, tensor, i);
  const float u = static_cast<float>(x >> 40) / static_cast<float>(1 << 24);  // [0, 1)
  return (u - 0.5f) * (1.0f + static_cast<float>(i % 7));
}

// blocksparse's inputs are block-sparse: each 256-element block of a worker's round is zero
// (block 2 of every 5 on every worker, and a quarter of the others), small (|x| < 0.2, under
// the threshold of the error-feedback entry, so it waits in the residual), or as for the other
// codecs. The factor of element i.
float BlockSparseScale(int rank, int round, int tensor, size_t i) {
  const size_t block = i / 256;
  if (block % 5 == 2) return 0.0f;
  switch (Hash(rank, round, tensor, (size_t{1} << 23) + block) % 4) {
    case 0:
      return 0.0f;
    case 1:
      return 0.05f;
    default:
      return 1.0f;
  }
}

template <typename T>
T Must(absl::StatusOr<T> v, const std::string& what) {
  if (!v.ok()) {
    std::fprintf(stderr, "REFERENCE FAILED (%s): %s\n", what.c_str(),
                 std::string(v.status().message()).c_str());
    std::exit(3);
  }
  return *std::move(v);
}

void Must(const absl::Status& s, const std::string& what) {
  if (!s.ok()) {
    std::fprintf(stderr, "REFERENCE FAILED (%s): %s\n", what.c_str(),
                 std::string(s.message()).c_str());
    std::exit(3);
  }
}

// The whole job's computation for one tensor, simulated on this worker.
struct Reference {
  bc::TensorPlan plan;
  std::vector<uint32_t> nodes;                        // the pushing worker ranks
  std::vector<std::unique_ptr<bc::Codec>> codecs;     // per pushing worker
  std::vector<std::unique_ptr<bc::Memory>> memories;  // per worker
  std::vector<std::vector<float>> compensated, decoded;
  std::unique_ptr<bc::Codec> server_codec;
  std::unique_ptr<bc::Memory> server_memory;
  std::vector<float> server_compensated, server_decoded;
  std::unique_ptr<bc::Codec> pull_decoder;

  Reference(const bc::TensorPlan& p, std::vector<uint32_t> pushers)
      : plan(p), nodes(std::move(pushers)) {
    const int workers = static_cast<int>(nodes.size());
    for (int r = 0; r < workers; ++r) {
      codecs.push_back(Must(bc::CreateCodec(plan.push.name(), bc::ParamsOf(plan.push)), "codec"));
      memories.push_back(
          plan.push.memory().empty()
              ? nullptr
              : Must(bc::CreateMemory(plan.push.memory(), bc::MemoryParamsOf(plan.push)),
                     "memory"));
    }
    compensated.resize(workers);
    decoded.resize(workers);
    if (plan.two_way()) {
      server_codec = Must(bc::CreateCodec(plan.pull.name(), bc::ParamsOf(plan.pull)), "pull codec");
      if (!plan.pull.memory().empty()) {
        server_memory = Must(bc::CreateMemory(plan.pull.memory(), bc::MemoryParamsOf(plan.pull)),
                             "pull memory");
      }
      pull_decoder =
          Must(bc::CreateCodec(plan.pull.name(), bc::ParamsOf(plan.pull)), "pull decoder");
    }
  }

  // The server's aggregation in rank order; for a codec whose sum keeps its format
  // (blocksparse) also that encoding, which one-way pulls carry.
  std::vector<float> Sum(const std::vector<std::vector<uint8_t>>& payloads, bc::CodecContext ctx,
                         size_t n, std::vector<uint8_t>* encoded_sum = nullptr) {
    std::unique_ptr<bc::Aggregator> agg =
        Must(bc::CreateAggregator(plan.push.name(), bc::ParamsOf(plan.push)), "aggregator");
    agg->Reset(n);
    for (size_t r = 0; r < payloads.size(); ++r) {
      ctx.node = nodes[r];
      Must(agg->Add(payloads[r], ctx), "aggregate");
    }
    if (encoded_sum != nullptr) {
      absl::Span<const uint8_t> bytes = Must(agg->EncodedSum(), "encoded sum");
      encoded_sum->assign(bytes.begin(), bytes.end());
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
        payloads[r].resize(
            Must(two->EncodeFirst(compensated[r], c, absl::MakeSpan(payloads[r])), "first"));
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
        Must(bc::AsTwoRound(*codecs[r])->DecodeSecond(sum2, c, absl::MakeSpan(out)),
             "decode second");
      }
      return out;
    }
    for (int r = 0; r < workers; ++r) {
      bc::CodecContext c = ctx;
      c.node = nodes[r];
      payloads[r].resize(codecs[r]->MaxEncodedBytes(n));
      payloads[r].resize(
          Must(bc::EncodeWithMemory(*codecs[r], memories[r].get(), inputs[r], c,
                                    absl::MakeSpan(payloads[r]), compensated[r], decoded[r]),
               "encode"));
    }
    if (!plan.two_way() && codecs[0]->properties().sum_in_push_format) {
      // One-way, the pull carries the aggregator's encoded sum, which the worker decodes.
      std::vector<uint8_t> encoded_sum;
      Sum(payloads, ctx, n, &encoded_sum);
      std::vector<float> out(n);
      Must(codecs[0]->Decode(encoded_sum, ctx, absl::MakeSpan(out)), "decode the encoded sum");
      return out;
    }
    std::vector<float> sum = Sum(payloads, ctx, n);
    if (!plan.two_way()) return sum;
    bc::CodecContext c = ctx;
    c.node = server;
    std::vector<uint8_t> encoded(server_codec->MaxEncodedBytes(n));
    encoded.resize(
        Must(bc::EncodeWithMemory(*server_codec, server_memory.get(), sum, c,
                                  absl::MakeSpan(encoded), server_compensated, server_decoded),
             "server encode"));
    std::vector<float> out(n);
    Must(pull_decoder->Decode(encoded, c, absl::MakeSpan(out)), "pull decode");
    return out;
  }
};

}  // namespace

// The emulated device the engine uses (BYTECOMP_DEVICE_BACKEND=emulated), to queue the work
// that "produces" a gradient on its stream.
bytecomp::worker::EmulatedDeviceBackend* EmulatedDevice() {
  absl::StatusOr<bytecomp::worker::DeviceBackend*> backend =
      bytecomp::worker::ProcessDeviceBackend();
  Must(backend.status(), "device backend");
  auto* emulated = dynamic_cast<bytecomp::worker::EmulatedDeviceBackend*>(*backend);
  if (emulated == nullptr)
    Must(absl::InternalError("the device backend is not the emulated one"), "device");
  return emulated;
}

int CheckDeviceRefusal() {
  std::vector<float> data(16, 1.0f);
  bytecomp_handle_t handle = 0;
  const int rc = bytecomp_push_pull_device("refused", data.data(), 16, BYTECOMP_FLOAT32, 0, nullptr,
                                           0, 0, &handle);
  if (rc == BYTECOMP_OK) {
    std::printf("DEVICE PRESENT: the device API accepted the tensor\n");
    bytecomp_wait(handle, 60000);
  } else {
    std::printf("DEVICE REFUSED rc=%d: %s\n", rc, bytecomp_last_error());
  }
  bytecomp_shutdown();
  return rc == BYTECOMP_OK || rc == BYTECOMP_ERR_INVALID_ARGUMENT ? 0 : 1;
}

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<bytecomp::proto::Strategy> strategy =
      bc::LoadStrategyFile(absl::GetFlag(FLAGS_strategy));
  if (!strategy.ok()) {
    std::fprintf(stderr, "%s\n", std::string(strategy.status().message()).c_str());
    return 2;
  }
  strategy->set_version(1);
  const size_t n = static_cast<size_t>(absl::GetFlag(FLAGS_elements));
  // Partitions hold partition_bytes: twice the elements for fp16 tensors.
  const auto part_of = [&](const std::string& name) {
    const size_t fp32 = static_cast<size_t>(absl::GetFlag(FLAGS_partition_elements));
    if (fp32 == 0) return n;
    return name.find(".f16") != std::string::npos ? 2 * fp32 : fp32;
  };
  const auto parts_of = [&](const std::string& name) {
    return (n + part_of(name) - 1) / part_of(name);
  };
  const int rounds = absl::GetFlag(FLAGS_rounds);
  if (bytecomp_init(nullptr) != BYTECOMP_OK) {
    std::fprintf(stderr, "init: %s\n", bytecomp_last_error());
    return 2;
  }
  if (absl::GetFlag(FLAGS_expect_device_refusal)) return CheckDeviceRefusal();
  const int rank = bytecomp_rank();
  const int workers = bytecomp_size();
  const int servers = bytecomp_num_servers();
  if (absl::GetFlag(FLAGS_partition_elements) > 0 && servers != 1) {
    std::fprintf(stderr, "--partition_elements needs a job with one server\n");
    return 2;
  }
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
  bytecomp::worker::EmulatedDeviceBackend* device =
      absl::GetFlag(FLAGS_device) ? EmulatedDevice() : nullptr;
  std::vector<std::string> names;
  std::vector<bc::TensorPlan> plans;
  std::vector<std::vector<std::unique_ptr<Reference>>> refs(tensors);  // [tensor][partition]
  for (const auto& t : strategy->tensors()) {
    names.push_back(t.name_pattern());
    plans.push_back(bc::PlanFor(*strategy, t.name_pattern(), n * 4));
    for (size_t p = 0; p < parts_of(names.back()) && plans.back().compressed(); ++p) {
      refs[names.size() - 1].push_back(std::make_unique<Reference>(plans.back(), pushers));
    }
  }
  const auto on_device = [&](int t) {
    return device != nullptr && names[t].find(".dev") != std::string::npos;
  };
  const auto averaged = [&](int t) { return names[t].find(".avg") != std::string::npos; };
  const auto dtype = [&](int t) {
    return names[t].find(".f16") != std::string::npos ? bytecomp::proto::DTYPE_FLOAT16
                                                      : bytecomp::proto::DTYPE_FLOAT32;
  };
  // x as the tensor's dtype holds it.
  const auto as_dtype = [&](int t, float x) {
    uint16_t half = 0;
    if (dtype(t) == bytecomp::proto::DTYPE_FLOAT32) return x;
    bytecomp::FromFloat32(dtype(t), &x, &half, 1);
    bytecomp::ToFloat32(dtype(t), &half, &x, 1);
    return x;
  };
  // Uncompressed tensors get integers, whose sums are exact in any order.
  const auto input = [&](int r, int round, int t, size_t i) {
    float x = Input(r, round, t, i);
    if (plans[t].push.name() == "blocksparse") {
      const float scale = BlockSparseScale(r, round, t, i);
      x = scale == 0.0f ? 0.0f : x * scale;
    }
    return as_dtype(t, plans[t].compressed() ? x : std::round(x * 64.0f) + 0.0f);  // no -0
  };
  // The tensors' memory: n elements of their dtype (fp16 uses the first half).
  std::vector<std::vector<float>> data(tensors, std::vector<float>(n));
  std::vector<std::vector<float>> produced(tensors, std::vector<float>(n));
  int mismatches = 0;
  // A failed operation: shut down first, which ends the round's other operations, so that
  // none still uses `data` (ZeroMQ may hold a push of it) once it goes.
  const auto shut_down_failed = [] {
    bytecomp_shutdown();
    return 2;
  };
  for (int round = 0; round < rounds; ++round) {
    std::vector<bytecomp_handle_t> handles(tensors);
    for (int t = 0; t < tensors; ++t) {
      for (size_t i = 0; i < n; ++i) produced[t][i] = input(rank, round, t, i);
      int rc;
      const uint32_t flags = averaged(t) ? BYTECOMP_FLAG_AVERAGE : 0;
      if (on_device(t)) {
        // The gradient is not there yet: a kernel queued on the stream writes it a little
        // later, so an engine that read it before the stream got there would push NaN.
        std::fill(data[t].begin(), data[t].end(), std::nanf(""));
        void* stream = reinterpret_cast<void*>(static_cast<uintptr_t>(0x1000 + t));
        Must(device->QueueWork(0, stream,
                               [&, t] {
                                 std::this_thread::sleep_for(std::chrono::milliseconds(2));
                                 bytecomp::FromFloat32(dtype(t), produced[t].data(), data[t].data(),
                                                       n);
                               }),
             "queue the gradient");
        rc = bytecomp_push_pull_device(names[t].c_str(), data[t].data(), n, dtype(t), 0, stream, 0,
                                       flags, &handles[t]);
      } else {
        bytecomp::FromFloat32(dtype(t), produced[t].data(), data[t].data(), n);
        rc = bytecomp_push_pull(names[t].c_str(), data[t].data(), n, dtype(t), 0, flags,
                                &handles[t]);
      }
      if (rc != BYTECOMP_OK) {
        std::fprintf(stderr, "push_pull %s: %s\n", names[t].c_str(), bytecomp_last_error());
        return shut_down_failed();
      }
      // Round 0 declares the tensors one after another, so tensor t gets id t.
      if (round == 0 && bytecomp_wait(handles[t], 60000) != BYTECOMP_OK) {
        std::fprintf(stderr, "OPERATION FAILED %s: %s\n", names[t].c_str(), bytecomp_last_error());
        return shut_down_failed();
      }
    }
    for (int t = 0; t < tensors; ++t) {
      if (round > 0 && bytecomp_wait(handles[t], 60000) != BYTECOMP_OK) {
        std::fprintf(stderr, "OPERATION FAILED %s round %d: %s\n", names[t].c_str(), round,
                     bytecomp_last_error());
        return shut_down_failed();
      }
      std::vector<float> expected(n, 0.0f);
      const size_t part = part_of(names[t]);
      for (size_t p = 0; p < parts_of(names[t]); ++p) {
        const size_t begin = p * part, count = std::min(part, n - begin);
        if (!plans[t].compressed()) {
          for (int r = 0; r < workers; ++r) {
            for (size_t i = 0; i < count; ++i) expected[begin + i] += input(r, round, t, begin + i);
          }
          continue;
        }
        // Per pusher: the sum of its machine's inputs, in rank order, in fp32.
        std::vector<std::vector<float>> inputs(pushers.size(), std::vector<float>(count, 0.0f));
        for (size_t q = 0; q < pushers.size(); ++q) {
          bool first = true;
          for (int r = 0; r < workers; ++r) {
            if (machine_of[r] != machine_of[pushers[q]]) continue;
            for (size_t i = 0; i < count; ++i) {
              const float x = input(r, round, t, begin + i);
              inputs[q][i] = first ? x : inputs[q][i] + x;
            }
            first = false;
          }
        }
        bc::CodecContext ctx;
        ctx.key = bytecomp::MakeKey(static_cast<uint32_t>(t), static_cast<uint32_t>(p));
        ctx.round = static_cast<uint64_t>(round);
        ctx.seed = strategy->seed();
        const std::vector<float> sum =
            refs[t][p]->Round(inputs, ctx, static_cast<uint32_t>(t % servers));
        std::copy(sum.begin(), sum.end(), expected.begin() + begin);
      }
      if (averaged(t)) {
        for (float& x : expected) x /= static_cast<float>(workers);
      }
      for (float& x : expected) x = as_dtype(t, x);
      std::vector<float> got(n);
      bytecomp::ToFloat32(dtype(t), data[t].data(), got.data(), n);
      size_t bad = 0, first_bad = 0;
      for (size_t i = 0; i < n; ++i) {
        if (std::memcmp(&expected[i], &got[i], 4) != 0) {
          if (bad++ == 0) first_bad = i;
        }
      }
      if (bad > 0) {
        ++mismatches;
        std::fprintf(stderr,
                     "MISMATCH %s round %d: %zu of %zu elements differ, first [%zu]: got %.9g "
                     "expected %.9g\n",
                     names[t].c_str(), round, bad, n, first_bad, got[first_bad],
                     expected[first_bad]);
      }
    }
  }
  if (mismatches == 0) {
    std::printf("ALL %d TENSORS MATCH THE REFERENCE for %d rounds (W=%d S=%d)\n", tensors, rounds,
                workers, servers);
  }
  if (device != nullptr) {
    // Error-feedback state kept on the device cannot be checkpointed yet: refused, not empty.
    int refused = 0, saved = 0;
    for (int t = 0; t < tensors; ++t) {
      if (!on_device(t) || !plans[t].compressed()) continue;
      size_t len = 0;
      const int rc = bytecomp_save_state(names[t].c_str(), nullptr, 0, &len);
      if (rc == BYTECOMP_ERR_REJECTED) {
        ++refused;
      } else if (rc == BYTECOMP_OK) {
        ++saved;
      } else {
        std::fprintf(stderr, "save_state %s: %s\n", names[t].c_str(), bytecomp_last_error());
      }
    }
    std::printf("DEVICE STATE: refused=%d saved=%d\n", refused, saved);
    const bytecomp::worker::EmulatedDeviceStats stats = device->stats();
    std::printf("EMULATED DEVICE: encodes=%lld decodes=%lld\n",
                static_cast<long long>(stats.encodes), static_cast<long long>(stats.decodes));
  }
  bytecomp_shutdown();
  return mismatches == 0 ? 0 : 1;
}
