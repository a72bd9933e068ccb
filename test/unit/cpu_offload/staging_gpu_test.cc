// The staging pipeline's device branch: device tensors pushed and pulled through the pool.
// Runs only where a CUDA device exists (none in CI here: it skips itself). (Moved out of the
// CUDA codecs' test, which now lives in test/unit/compress_cuda.)
#include <cuda_runtime_api.h>

#include <cstring>
#include <future>
#include <memory>
#include <random>
#include <vector>

#include "bytecomp/cpu_offload.h"
#include "gtest/gtest.h"

namespace bytecomp {
namespace {

bool HaveDevice() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) return true;
  cudaGetLastError();  // clears the error for the next CUDA call
  return false;
}

// n floats on the device, freed at the end of the scope.
using DeviceFloats = std::unique_ptr<float, cudaError_t (*)(void*)>;
DeviceFloats AllocateDeviceFloats(size_t n) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, n * sizeof(float)), cudaSuccess);
  return DeviceFloats(static_cast<float*>(p), cudaFree);
}

TEST(StagingOnGpu, DeviceTensorPushAndPull) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  using namespace cpu_offload;
  ThreadPoolOptions threads;
  threads.num_threads = 2;
  PriorityThreadPool pool(threads);
  PinnedMemoryPool memory;
  StagingPipeline pipeline(&pool, &memory);
  const size_t n = 50000;
  std::vector<float> x(n);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);
  DeviceFloats d_x = AllocateDeviceFloats(n), d_back = AllocateDeviceFloats(n);
  ASSERT_EQ(cudaMemcpy(d_x.get(), x.data(), 4 * n, cudaMemcpyHostToDevice), cudaSuccess);
  auto encode = [](const ChunkInfo&, absl::Span<const float> in, absl::Span<uint8_t> out)
      -> absl::StatusOr<size_t> {
    std::memcpy(out.data(), in.data(), 4 * in.size());
    return 4 * in.size();
  };
  std::vector<std::vector<uint8_t>> chunks(SplitIntoChunks(n, 8192).size());
  std::promise<absl::Status> pushed;
  PushRequest push;
  push.source = d_x.get();
  push.elements = n;
  push.location = TensorLocation::kCudaDevice;
  push.chunk_elements = 8192;
  push.max_encoded_bytes = [](size_t e) { return 4 * e; };
  push.encode = encode;
  push.on_chunk = [&](const ChunkInfo& c, absl::StatusOr<EncodedChunk> e) {
    ASSERT_TRUE(e.ok()) << e.status();
    chunks[c.index].assign(e->view().begin(), e->view().end());
  };
  push.on_done = [&](absl::Status s) { pushed.set_value(s); };
  ASSERT_TRUE(pipeline.Push(push).ok());
  ASSERT_TRUE(pushed.get_future().get().ok());
  for (const ChunkInfo& c : SplitIntoChunks(n, 8192)) {
    ASSERT_EQ(std::memcmp(chunks[c.index].data(), x.data() + c.element_offset, 4 * c.elements), 0);
  }
  PullRequest pull;
  pull.destination = d_back.get();
  pull.elements = n;
  pull.location = TensorLocation::kCudaDevice;
  for (const ChunkInfo& c : SplitIntoChunks(n, 8192)) pull.chunks.push_back({c, chunks[c.index]});
  pull.decode = [](const ChunkInfo&, absl::Span<const uint8_t> in, absl::Span<float> out) {
    std::memcpy(out.data(), in.data(), in.size());
    return absl::OkStatus();
  };
  std::promise<absl::Status> pulled;
  pull.on_done = [&](absl::Status s) { pulled.set_value(s); };
  ASSERT_TRUE(pipeline.Pull(pull).ok());
  ASSERT_TRUE(pulled.get_future().get().ok());
  std::vector<float> back(n);
  ASSERT_EQ(cudaMemcpy(back.data(), d_back.get(), 4 * n, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(std::memcmp(back.data(), x.data(), 4 * n), 0);
}

}  // namespace
}  // namespace bytecomp
