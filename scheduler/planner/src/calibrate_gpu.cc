// GPU codec costs for the cost table (bytecomp-plan --calibrate on a host with a GPU): the
// compress/cuda kernels timed with CUDA events. Built only with CUDA; without a device it
// returns Unavailable and the template's GPU costs stay. No GPU runs in our CI: this file is
// compile-checked only.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/cuda_codecs.h"
#include "bytecomp/compress/registry.h"
#include "bytecomp/planner/calibrate.h"

namespace bytecomp::planner {
namespace {

absl::Status Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(error)));
}

// Device buffers freed on scope exit.
struct DeviceBuffer {
  void* ptr = nullptr;
  ~DeviceBuffer() {
    if (ptr != nullptr) cudaFree(ptr);
  }
};

// Median time in us of `call` on `stream`, timed with events, repeated until `seconds` of
// wall time have passed (at least 3 times).
template <typename Call>
absl::StatusOr<double> TimeOnStream(cudaStream_t stream, double seconds, Call call) {
  cudaEvent_t begin, end;
  if (absl::Status s = Check(cudaEventCreate(&begin), "cudaEventCreate"); !s.ok()) return s;
  if (absl::Status s = Check(cudaEventCreate(&end), "cudaEventCreate"); !s.ok()) {
    cudaEventDestroy(begin);
    return s;
  }
  std::vector<double> times;
  absl::Status status;
  const auto start = std::chrono::steady_clock::now();
  while (
      status.ok() &&
      (times.size() < 3 ||
       std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds)) {
    status = Check(cudaEventRecord(begin, stream), "cudaEventRecord");
    if (status.ok()) status = call();
    if (status.ok()) status = Check(cudaEventRecord(end, stream), "cudaEventRecord");
    if (status.ok()) status = Check(cudaEventSynchronize(end), "cudaEventSynchronize");
    float ms = 0;
    if (status.ok()) status = Check(cudaEventElapsedTime(&ms, begin, end), "cudaEventElapsedTime");
    if (status.ok()) times.push_back(ms * 1e3);
    if (times.size() >= 10000) break;
  }
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  if (!status.ok()) return status;
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// A two-round codec's stages (CudaTwoRoundCodec), each call synchronising the stream: median
// us of EncodeFirst, of EncodeSecond (its first sum: this worker's own payload 1, as from one
// worker) and of DecodeSecond, over whole rounds repeated for `seconds` (at least 3).
struct RoundCosts {
  double encode_us = 0, between_us = 0, decode_us = 0;
};
absl::StatusOr<RoundCosts> TimeRounds(compress::cuda::CudaCodec& codec, const float* input,
                                      size_t n, cudaStream_t stream, double seconds) {
  compress::cuda::CudaTwoRoundCodec* two = compress::cuda::AsCudaTwoRound(codec);
  if (two == nullptr) return absl::InternalError("no two-round side");
  const size_t first = two->FirstRoundBytes(n), second = two->SecondRoundBytes(n);
  DeviceBuffer payload1, payload2, output;
  absl::Status status = Check(cudaMalloc(&payload1.ptr, first), "cudaMalloc");
  if (status.ok()) status = Check(cudaMalloc(&payload2.ptr, second), "cudaMalloc");
  if (status.ok())
    status = Check(cudaMalloc(&output.ptr, std::max<size_t>(n, 1) * 4), "cudaMalloc");
  if (!status.ok()) return status;
  // The sums' floats follow the payloads' 4-byte stage word.
  const float* sum1 = reinterpret_cast<const float*>(static_cast<uint8_t*>(payload1.ptr) + 4);
  const float* sum2 = reinterpret_cast<const float*>(static_cast<uint8_t*>(payload2.ptr) + 4);
  std::vector<double> encode, between, decode;
  compress::CodecContext ctx;
  ctx.key = 1;
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  // One stage: its call, the stream synchronised, its wall time kept.
  auto timed = [&](std::vector<double>& into, auto call) -> absl::Status {
    const auto t = Clock::now();
    absl::Status s = call();
    if (s.ok()) s = Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    if (s.ok()) into.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count());
    return s;
  };
  while (status.ok() && (encode.size() < 3 ||
                         (std::chrono::duration<double>(Clock::now() - start).count() < seconds &&
                          encode.size() < 10000))) {
    ++ctx.round;
    status = timed(encode, [&] {
      return two->EncodeFirst(input, n, ctx, static_cast<uint8_t*>(payload1.ptr), first, stream)
          .status();
    });
    if (status.ok()) {
      status = timed(between, [&] {
        return two
            ->EncodeSecond(sum1, two->FirstRoundFloats(n), ctx, static_cast<uint8_t*>(payload2.ptr),
                           second, stream)
            .status();
      });
    }
    if (status.ok()) {
      status = timed(decode, [&] {
        return two->DecodeSecond(sum2, two->SecondRoundFloats(n), ctx,
                                 static_cast<float*>(output.ptr), n, stream);
      });
    }
  }
  if (!status.ok()) return status;
  auto median = [](std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  return RoundCosts{median(encode), median(between), median(decode)};
}

}  // namespace

absl::StatusOr<int> CalibrateGpuCosts(proto::CostTable* table, const CalibrationOptions& options) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();  // clear the sticky "no device" error
    return absl::UnavailableError("no CUDA device: GPU costs stay as in the template");
  }
  cudaDeviceProp prop;
  if (absl::Status s = Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
      !s.ok()) {
    return s;
  }
  cudaStream_t stream;
  if (absl::Status s = Check(cudaStreamCreate(&stream), "cudaStreamCreate"); !s.ok()) return s;
  const size_t max_n = static_cast<size_t>(options.gpu_sizes.back() / 4);
  std::vector<float> host(max_n);
  std::mt19937 rng(12345);
  std::normal_distribution<float> normal(0, 1);
  for (float& x : host) x = normal(rng);
  DeviceBuffer input, output, payload;
  absl::Status status = Check(cudaMalloc(&input.ptr, max_n * 4), "cudaMalloc");
  if (status.ok()) status = Check(cudaMalloc(&output.ptr, max_n * 4), "cudaMalloc");
  if (status.ok()) {
    status =
        Check(cudaMemcpy(input.ptr, host.data(), max_n * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  const std::vector<std::string> gpu_codecs = compress::cuda::CudaCodecNames();
  int measured = 0;
  for (int c = 0; status.ok() && c < table->codecs_size(); ++c) {
    proto::CodecCost& entry = *table->mutable_codecs(c);
    const std::string memory = entry.memory().empty() ? "none" : entry.memory();
    if (std::find(gpu_codecs.begin(), gpu_codecs.end(), entry.name()) == gpu_codecs.end() ||
        !compress::cuda::CudaMemorySupported(entry.name(), memory)) {
      continue;  // no kernel: the template's GPU costs (if any) stay
    }
    const compress::CodecFacts* facts = compress::CodecFactsOf(entry.name());
    // artopk's two stages are its exchange's (EXCHANGE_SUMMED_INDICES): timed, as on the CPU
    // (calibrate.cc), by its single payload, topk's message.
    const bool two_round = facts != nullptr && facts->two_round &&
                           facts->exchange == compress::CodecExchange::kPushPull;
    compress::CodecParams params(entry.params().begin(), entry.params().end());
    proto::DeviceCost gpu;
    gpu.set_device(proto::DEVICE_GPU);
    for (int64_t bytes : options.gpu_sizes) {
      const size_t n = static_cast<size_t>(bytes / 4);
      auto codec = compress::cuda::CudaCodec::Create(entry.name(), params, memory);
      if (!codec.ok()) {
        status = absl::InvalidArgumentError(
            absl::StrCat("GPU calibration of '", entry.name(), "': ", codec.status().message()));
        break;
      }
      if (two_round) {
        // The worker's rounds (worker/src/device_pipeline.cc): encode, between rounds, decode.
        absl::StatusOr<RoundCosts> round = TimeRounds(**codec, static_cast<const float*>(input.ptr),
                                                      n, stream, options.seconds_per_point);
        if (!round.ok()) {
          status = absl::InternalError(
              absl::StrCat("GPU calibration of '", entry.name(), "': ", round.status().message()));
          break;
        }
        for (auto [curve, us] : {std::pair{gpu.add_encode(), round->encode_us},
                                 std::pair{gpu.add_between_rounds(), round->between_us},
                                 std::pair{gpu.add_decode(), round->decode_us}}) {
          curve->set_bytes(bytes);
          curve->set_us(us);
        }
        continue;
      }
      const size_t capacity = (*codec)->MaxEncodedBytes(n);
      DeviceBuffer out;
      status = Check(cudaMalloc(&out.ptr, capacity), "cudaMalloc");
      if (!status.ok()) break;
      compress::CodecContext ctx;
      ctx.key = 1;
      size_t written = 0;
      auto encode_us = TimeOnStream(stream, options.seconds_per_point, [&]() -> absl::Status {
        ++ctx.round;
        auto size = (*codec)->Encode(static_cast<const float*>(input.ptr), n, ctx,
                                     static_cast<uint8_t*>(out.ptr), capacity, stream);
        if (!size.ok()) return size.status();
        written = *size;
        return absl::OkStatus();
      });
      if (!encode_us.ok()) {
        status = encode_us.status();
        break;
      }
      auto decode_us = TimeOnStream(stream, options.seconds_per_point, [&]() -> absl::Status {
        return (*codec)->Decode(static_cast<const uint8_t*>(out.ptr), written, ctx,
                                static_cast<float*>(output.ptr), n, stream);
      });
      if (!decode_us.ok()) {
        status = decode_us.status();
        break;
      }
      auto* e = gpu.add_encode();
      e->set_bytes(bytes);
      e->set_us(*encode_us);
      auto* d = gpu.add_decode();
      d->set_bytes(bytes);
      d->set_us(*decode_us);
    }
    if (!status.ok()) break;
    auto* costs = entry.mutable_costs();
    costs->erase(
        std::remove_if(costs->begin(), costs->end(),
                       [](const proto::DeviceCost& d) { return d.device() == proto::DEVICE_GPU; }),
        costs->end());
    *entry.add_costs() = std::move(gpu);
    ++measured;
  }
  cudaStreamDestroy(stream);
  if (!status.ok()) return status;
  table->set_source(absl::StrCat(table->source(), "; GPU costs of ", measured,
                                 " codecs measured on ", prop.name, " (CUDA events, median)"));
  return measured;
}

}  // namespace bytecomp::planner
