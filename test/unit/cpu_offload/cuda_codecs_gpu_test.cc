// GPU tests: run only where a CUDA device exists (none in CI here; they skip themselves).
// The GPU codecs must produce the CPU codecs' bytes and decode what the CPU encodes.
#include <cuda_runtime_api.h>

#include <cstring>
#include <random>
#include <vector>

#include "bytecomp/compress.h"
#include "bytecomp/compress/cuda_codecs.h"
#include "gtest/gtest.h"

namespace bytecomp {
namespace {

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

TEST(CudaCodecsOnGpu, SameBytesAsTheCpuCodecsAndRoundTrip) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  const size_t n = 100003;
  compress::CodecContext ctx;
  ctx.seed = 5;
  ctx.key = 9;
  ctx.round = 2;
  const std::vector<float> x = Gradient(n, 1);
  DeviceArray<float> d_x(n), d_out(n);
  ASSERT_EQ(cudaMemcpy(d_x.data, x.data(), 4 * n, cudaMemcpyHostToDevice), cudaSuccess);
  for (const std::string& name : compress::cuda::CudaCodecNames()) {
    auto gpu = compress::cuda::CudaCodec::Create(name, {});
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    const size_t capacity = (*gpu)->MaxEncodedBytes(n);
    DeviceArray<uint8_t> d_payload(capacity);
    auto bytes = (*gpu)->Encode(d_x.data, n, ctx, d_payload.data, capacity, nullptr);
    ASSERT_TRUE(bytes.ok()) << name << ": " << bytes.status();
    std::vector<uint8_t> payload(*bytes);
    ASSERT_EQ(cudaMemcpy(payload.data(), d_payload.data, *bytes, cudaMemcpyDeviceToHost),
              cudaSuccess);
    auto cpu = compress::CreateCodec(name);
    if (cpu.ok()) {  // codecs of the other branch may not be in this build yet
      std::vector<uint8_t> expected((*cpu)->MaxEncodedBytes(n));
      auto m = (*cpu)->Encode(x, ctx, absl::MakeSpan(expected));
      ASSERT_TRUE(m.ok());
      expected.resize(*m);
      EXPECT_EQ(payload, expected) << name;
    }
    const absl::Status decoded = (*gpu)->Decode(d_payload.data, *bytes, ctx, d_out.data, n, nullptr);
    EXPECT_TRUE(decoded.ok()) << name << ": " << decoded;
    if (cpu.ok()) {
      std::vector<float> gpu_values(n), cpu_values(n);
      ASSERT_EQ(cudaMemcpy(gpu_values.data(), d_out.data, 4 * n, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_TRUE((*cpu)->Decode(payload, ctx, absl::MakeSpan(cpu_values)).ok());
      EXPECT_EQ(std::memcmp(gpu_values.data(), cpu_values.data(), 4 * n), 0) << name;
    }
  }
}

TEST(CudaCodecsOnGpu, NonFiniteInputNamesTheIndex) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  std::vector<float> x = Gradient(1000, 2);
  x[321] = std::numeric_limits<float>::quiet_NaN();
  DeviceArray<float> d_x(x.size());
  ASSERT_EQ(cudaMemcpy(d_x.data, x.data(), 4 * x.size(), cudaMemcpyHostToDevice), cudaSuccess);
  auto gpu = compress::cuda::CudaCodec::Create("onebit", {});
  ASSERT_TRUE(gpu.ok());
  DeviceArray<uint8_t> out((*gpu)->MaxEncodedBytes(x.size()));
  auto r = (*gpu)->Encode(d_x.data, x.size(), {}, out.data, (*gpu)->MaxEncodedBytes(x.size()), nullptr);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("element 321"), absl::string_view::npos) << r.status();
}

}  // namespace
}  // namespace bytecomp
