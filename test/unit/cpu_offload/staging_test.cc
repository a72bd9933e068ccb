#include <algorithm>
#include <atomic>
#include <cstring>
#include <future>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "bytecomp/common/half.h"
#include "bytecomp/cpu_offload.h"
#include "gtest/gtest.h"

namespace bytecomp::cpu_offload {
namespace {

// A test-only codec: a 4-byte header with the chunk's element offset (so a chunk decoded with
// another chunk's bytes is caught), then each value as fp16.
size_t Fp16MaxBytes(size_t n) { return 4 + 2 * n; }

absl::StatusOr<size_t> Fp16Encode(const ChunkInfo& chunk, absl::Span<const float> in,
                                  absl::Span<uint8_t> out) {
  if (in.size() != chunk.elements) return absl::InternalError("wrong input size");
  const uint32_t offset = static_cast<uint32_t>(chunk.element_offset);
  std::memcpy(out.data(), &offset, 4);
  for (size_t i = 0; i < in.size(); ++i) {
    const uint16_t h = FloatToHalfBits(in[i]);
    std::memcpy(out.data() + 4 + 2 * i, &h, 2);
  }
  return Fp16MaxBytes(in.size());
}

absl::Status Fp16Decode(const ChunkInfo& chunk, absl::Span<const uint8_t> in,
                        absl::Span<float> out) {
  if (in.size() != Fp16MaxBytes(out.size())) return absl::InvalidArgumentError("bad size");
  uint32_t offset;
  std::memcpy(&offset, in.data(), 4);
  if (offset != chunk.element_offset) return absl::InvalidArgumentError("wrong chunk");
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, in.data() + 4 + 2 * i, 2);
    out[i] = HalfBitsToFloat(h);
  }
  return absl::OkStatus();
}

std::vector<float> RandomFloats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

ThreadPoolOptions Threads(size_t n) {
  ThreadPoolOptions options;
  options.num_threads = n;
  return options;
}

PinnedPoolOptions Memory(size_t bound) {
  PinnedPoolOptions options;
  options.max_total_bytes = bound;
  return options;
}

struct PushResult {
  std::map<size_t, std::vector<uint8_t>> bytes_by_chunk;
  std::vector<ChunkInfo> chunks;
  std::vector<absl::Status> chunk_errors;
  absl::Status done;
};

PushResult RunPush(StagingPipeline& pipeline, const std::vector<float>& data,
                   size_t chunk_elements, ChunkEncodeFn encode = Fp16Encode) {
  PushResult result;
  std::mutex mutex;
  std::promise<absl::Status> done;
  PushRequest request;
  request.source = data.data();
  request.elements = data.size();
  request.chunk_elements = chunk_elements;
  request.max_encoded_bytes = Fp16MaxBytes;
  request.encode = std::move(encode);
  request.on_chunk = [&](const ChunkInfo& chunk, absl::StatusOr<EncodedChunk> encoded) {
    std::lock_guard<std::mutex> lock(mutex);
    result.chunks.push_back(chunk);
    if (!encoded.ok()) {
      result.chunk_errors.push_back(encoded.status());
      return;
    }
    EXPECT_EQ(encoded->chunk.index, chunk.index);
    auto view = encoded->view();
    result.bytes_by_chunk[chunk.index].assign(view.begin(), view.end());
  };
  request.on_done = [&](absl::Status status) { done.set_value(status); };
  const absl::Status started = pipeline.Push(std::move(request));
  EXPECT_TRUE(started.ok()) << started;
  result.done = done.get_future().get();
  return result;
}

TEST(SplitIntoChunks, CoversTheTensorExactly) {
  auto chunks = SplitIntoChunks(10, 4);
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[2].element_offset, 8u);
  EXPECT_EQ(chunks[2].elements, 2u);
  EXPECT_EQ(SplitIntoChunks(10, 0).size(), 1u);
  EXPECT_EQ(SplitIntoChunks(10, 10).size(), 1u);
}

TEST(StagingPipeline, PushAndPullEqualInlineCompressionBitForBit) {
  PriorityThreadPool pool(Threads(2));
  PinnedMemoryPool memory(Memory(64 << 20));
  StagingPipeline pipeline(&pool, &memory);
  const std::vector<float> data = RandomFloats(100'003, 11);
  constexpr size_t kChunk = 8192;

  PushResult pushed = RunPush(pipeline, data, kChunk);
  ASSERT_TRUE(pushed.done.ok()) << pushed.done;
  const std::vector<ChunkInfo> chunks = SplitIntoChunks(data.size(), kChunk);
  ASSERT_EQ(pushed.bytes_by_chunk.size(), chunks.size());
  // Inline: the same codec on the caller's thread, chunk by chunk.
  for (const ChunkInfo& chunk : chunks) {
    std::vector<uint8_t> inline_bytes(Fp16MaxBytes(chunk.elements));
    auto n = Fp16Encode(chunk, absl::MakeConstSpan(data).subspan(chunk.element_offset,
                                                                 chunk.elements),
                        absl::MakeSpan(inline_bytes));
    ASSERT_TRUE(n.ok());
    inline_bytes.resize(*n);
    EXPECT_EQ(pushed.bytes_by_chunk[chunk.index], inline_bytes) << "chunk " << chunk.index;
  }

  // Pull the encoded chunks back (in reverse order, as a network may deliver them).
  std::vector<float> pulled(data.size(), -1.0f);
  PullRequest pull;
  pull.destination = pulled.data();
  pull.elements = pulled.size();
  pull.decode = Fp16Decode;
  for (auto it = chunks.rbegin(); it != chunks.rend(); ++it) {
    pull.chunks.push_back(PullChunk{*it, pushed.bytes_by_chunk[it->index]});
  }
  std::promise<absl::Status> pulled_done;
  pull.on_done = [&](absl::Status s) { pulled_done.set_value(s); };
  ASSERT_TRUE(pipeline.Pull(std::move(pull)).ok());
  ASSERT_TRUE(pulled_done.get_future().get().ok());
  for (size_t i = 0; i < data.size(); ++i) {
    const float inline_value = HalfBitsToFloat(FloatToHalfBits(data[i]));
    ASSERT_EQ(std::memcmp(&pulled[i], &inline_value, 4), 0) << "element " << i;
  }
  EXPECT_EQ(memory.stats().in_use_bytes, 0u);  // every staging buffer went back
}

TEST(StagingPipeline, ChunkErrorsReachOnChunkAndOnDone) {
  PriorityThreadPool pool(Threads(2));
  PinnedMemoryPool memory(Memory(16 << 20));
  StagingPipeline pipeline(&pool, &memory);
  const std::vector<float> data = RandomFloats(1000, 3);
  PushResult pushed = RunPush(pipeline, data, 100,
                              [](const ChunkInfo& chunk, absl::Span<const float> in,
                                 absl::Span<uint8_t> out) -> absl::StatusOr<size_t> {
                                if (chunk.index == 7) return absl::InvalidArgumentError("NaN at 3");
                                return Fp16Encode(chunk, in, out);
                              });
  EXPECT_EQ(pushed.chunks.size(), 10u);
  EXPECT_EQ(pushed.bytes_by_chunk.size(), 9u);
  ASSERT_EQ(pushed.chunk_errors.size(), 1u);
  EXPECT_EQ(pushed.done.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(pushed.done.message().find("chunk 7 (elements 700..800): NaN at 3"),
            absl::string_view::npos)
      << pushed.done;
}

TEST(StagingPipeline, PinnedBoundExceededIsAChunkError) {
  PriorityThreadPool pool(Threads(1));
  PinnedMemoryPool memory(Memory(4096));
  StagingPipeline pipeline(&pool, &memory);
  const std::vector<float> data = RandomFloats(5000, 3);  // 10 KB encoded: above the bound
  PushResult pushed = RunPush(pipeline, data, 0);
  EXPECT_EQ(pushed.done.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(pushed.done.message().find("bound of 4096 bytes"), absl::string_view::npos);
}

TEST(StagingPipeline, MalformedRequestsAreRefusedUpFront) {
  PriorityThreadPool pool(Threads(1));
  PinnedMemoryPool memory(Memory(1 << 20));
  StagingPipeline pipeline(&pool, &memory);
  std::vector<float> data(10);
  PushRequest push;
  push.source = data.data();
  push.elements = 10;
  EXPECT_EQ(pipeline.Push(push).code(), absl::StatusCode::kInvalidArgument);
  push.encode = Fp16Encode;
  push.max_encoded_bytes = Fp16MaxBytes;
  push.on_chunk = [](const ChunkInfo&, absl::StatusOr<EncodedChunk>) {};
  push.location = TensorLocation::kCudaDevice;
  if (!CudaStagingAvailable()) {
    const absl::Status s = pipeline.Push(push);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("CUDA"), absl::string_view::npos) << s;
  }
  PullRequest pull;
  pull.destination = data.data();
  pull.elements = 10;
  pull.decode = Fp16Decode;
  pull.chunks.push_back(PullChunk{ChunkInfo{0, 8, 5}, {}});
  const absl::Status s = pipeline.Pull(pull);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("outside the tensor of 10"), absl::string_view::npos) << s;
}

TEST(StagingPipeline, ShutdownCancelsQueuedChunksAndStillCompletes) {
  auto pool = std::make_unique<PriorityThreadPool>(Threads(1));
  PinnedMemoryPool memory(Memory(16 << 20));
  StagingPipeline pipeline(pool.get(), &memory);
  // Block the single thread so every chunk is still queued at shutdown.
  std::promise<void> entered, open;
  pool->Submit(100, [&](absl::Status) {
        entered.set_value();
        open.get_future().wait();
      }).IgnoreError();
  entered.get_future().wait();
  const std::vector<float> data = RandomFloats(1000, 5);
  std::atomic<int> cancelled_chunks{0};
  std::promise<absl::Status> done;
  PushRequest request;
  request.source = data.data();
  request.elements = data.size();
  request.chunk_elements = 100;
  request.max_encoded_bytes = Fp16MaxBytes;
  request.encode = Fp16Encode;
  request.on_chunk = [&](const ChunkInfo&, absl::StatusOr<EncodedChunk> encoded) {
    if (encoded.status().code() == absl::StatusCode::kCancelled) cancelled_chunks.fetch_add(1);
  };
  request.on_done = [&](absl::Status s) { done.set_value(s); };
  ASSERT_TRUE(pipeline.Push(std::move(request)).ok());
  std::thread stopper([&] { pool->Shutdown(ShutdownMode::kCancelQueued); });
  EXPECT_EQ(done.get_future().get().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(cancelled_chunks.load(), 10);
  open.set_value();
  stopper.join();
}

// At the pinned pool's bound, chunks wait (parked, no thread blocked) until the network side
// releases encoded buffers, and then complete: back-pressure instead of errors.
TEST(StagingPipeline, ChunksWaitForPinnedMemoryAtTheBound) {
  PriorityThreadPool pool(Threads(2));
  PinnedMemoryPool memory(Memory(64 << 10));  // 8 chunks of 8 KiB class
  StagingPipeline pipeline(&pool, &memory);
  const std::vector<float> data = RandomFloats(20 * 2000, 9);
  std::mutex mutex;
  std::vector<EncodedChunk> in_flight;  // what the "network" still holds
  std::map<size_t, std::vector<uint8_t>> sent;
  std::promise<absl::Status> done;
  PushRequest request;
  request.source = data.data();
  request.elements = data.size();
  request.chunk_elements = 2000;  // 4 + 4000 bytes encoded: the 8 KiB class
  request.max_encoded_bytes = Fp16MaxBytes;
  request.encode = Fp16Encode;
  request.on_chunk = [&](const ChunkInfo& chunk, absl::StatusOr<EncodedChunk> encoded) {
    ASSERT_TRUE(encoded.ok()) << encoded.status();
    std::lock_guard<std::mutex> lock(mutex);
    auto view = encoded->view();
    sent[chunk.index].assign(view.begin(), view.end());
    in_flight.push_back(std::move(*encoded));
  };
  request.on_done = [&](absl::Status s) { done.set_value(s); };
  ASSERT_TRUE(pipeline.Push(std::move(request)).ok());
  auto future = done.get_future();
  // Play the network: wait until the bound stops the pipeline, then send (release) everything.
  for (int step = 0; step < 10000; ++step) {
    if (future.wait_for(std::chrono::milliseconds(1)) == std::future_status::ready) break;
    if (memory.parked_requests() > 0) {
      std::vector<EncodedChunk> releasing;
      {
        std::lock_guard<std::mutex> lock(mutex);
        releasing.swap(in_flight);
      }
      EXPECT_LE(memory.stats().in_use_bytes, memory.max_total_bytes());
    }
  }
  ASSERT_EQ(future.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(future.get().ok());
  EXPECT_GT(memory.stats().parked, 0u);  // the bound was reached and waited on
  ASSERT_EQ(sent.size(), 20u);
  for (const ChunkInfo& chunk : SplitIntoChunks(data.size(), 2000)) {
    std::vector<uint8_t> expected(Fp16MaxBytes(chunk.elements));
    ASSERT_TRUE(Fp16Encode(chunk, absl::MakeConstSpan(data).subspan(chunk.element_offset,
                                                                     chunk.elements),
                           absl::MakeSpan(expected)).ok());
    EXPECT_EQ(sent[chunk.index], expected) << "chunk " << chunk.index;
  }
}

// Two threads really encode two chunks at the same time (the speed-up itself is measured by
// bench/cpu_offload, not asserted here: timings on a shared machine are not a test).
TEST(StagingPipeline, TwoThreadsEncodeConcurrently) {
  PriorityThreadPool pool(Threads(2));
  PinnedMemoryPool memory(Memory(16 << 20));
  StagingPipeline pipeline(&pool, &memory);
  const std::vector<float> data = RandomFloats(4096, 5);
  std::atomic<int> active{0};
  std::atomic<int> peak{0};
  std::atomic<bool> both_seen{false};
  PushResult pushed = RunPush(pipeline, data, 512,
                              [&](const ChunkInfo& chunk, absl::Span<const float> in,
                                  absl::Span<uint8_t> out) -> absl::StatusOr<size_t> {
                                const int now = active.fetch_add(1) + 1;
                                int seen = peak.load();
                                while (now > seen && !peak.compare_exchange_weak(seen, now)) {
                                }
                                // Hold the chunk until another thread joins (or 10 s pass).
                                for (int i = 0; i < 10000 && !both_seen.load(); ++i) {
                                  if (active.load() >= 2) both_seen = true;
                                  std::this_thread::sleep_for(std::chrono::milliseconds(1));
                                }
                                active.fetch_sub(1);
                                return Fp16Encode(chunk, in, out);
                              });
  ASSERT_TRUE(pushed.done.ok());
  EXPECT_EQ(peak.load(), 2);
}

}  // namespace
}  // namespace bytecomp::cpu_offload
