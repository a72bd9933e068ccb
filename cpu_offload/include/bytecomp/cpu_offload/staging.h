// The staging pipeline: a tensor goes chunk by chunk through
//   push: [device-to-host copy on the caller's CUDA stream] -> encode on the pool -> on_chunk
//   pull: decode on the pool -> [host-to-device copy on the caller's CUDA stream] -> on_done
// The stages are chained by callbacks: a finished copy (cudaLaunchHostFunc on the stream)
// queues the encode task, a finished decode queues the copy; no thread waits on another.
// Host tensors skip the copies: encode reads the source and decode writes the destination
// directly. The codec is given as callables (the worker wraps compress::Codec::Encode/Decode),
// so this folder does not depend on compress/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "bytecomp/cpu_offload/pinned_pool.h"
#include "bytecomp/cpu_offload/thread_pool.h"

namespace bytecomp::cpu_offload {

enum class TensorLocation {
  kHost,        // ordinary (or pinned) host memory
  kCudaDevice,  // device memory of `device`; needs a build with CUDA
};

struct ChunkInfo {
  size_t index = 0;           // chunk number within its request
  size_t element_offset = 0;  // first element of the chunk in the tensor
  size_t elements = 0;
};

// Encodes input into out (at least max_encoded_bytes(elements) bytes); returns bytes written.
// Called on pool threads, concurrently for different chunks of one request: use one codec
// instance per chunk (a partition is one key and has its own codec state).
using ChunkEncodeFn = std::function<absl::StatusOr<size_t>(
    const ChunkInfo& chunk, absl::Span<const float> input, absl::Span<uint8_t> out)>;
// Decodes encoded into output (chunk.elements floats). Same threading as ChunkEncodeFn.
using ChunkDecodeFn = std::function<absl::Status(
    const ChunkInfo& chunk, absl::Span<const uint8_t> encoded, absl::Span<float> output)>;

// An encoded chunk in pinned memory, ready to be sent zero-copy; releasing `buffer` returns it
// to the pool (e.g. from ZeroMQ's free function).
struct EncodedChunk {
  ChunkInfo chunk;
  PinnedBuffer buffer;
  size_t bytes = 0;  // encoded size; buffer.size() is the bound that was reserved
  absl::Span<const uint8_t> view() const { return {buffer.data(), bytes}; }
};

struct PushRequest {
  const float* source = nullptr;
  size_t elements = 0;
  TensorLocation location = TensorLocation::kHost;
  int device = 0;
  void* cuda_stream = nullptr;  // cudaStream_t that produced source (null: legacy default)
  size_t chunk_elements = 0;    // 0: the whole tensor is one chunk
  int priority = 0;             // pool priority of this request's tasks (higher first)
  std::function<size_t(size_t elements)> max_encoded_bytes;
  ChunkEncodeFn encode;
  // Once per chunk, on a pool thread, in any order: the encoded bytes or the chunk's error.
  std::function<void(const ChunkInfo& chunk, absl::StatusOr<EncodedChunk> encoded)> on_chunk;
  // Once, after every on_chunk returned: OK or the first chunk error.
  std::function<void(absl::Status status)> on_done;
};

struct PullChunk {
  ChunkInfo chunk;
  absl::Span<const uint8_t> encoded;  // kept alive by the caller until on_done
};

struct PullRequest {
  float* destination = nullptr;
  size_t elements = 0;
  TensorLocation location = TensorLocation::kHost;
  int device = 0;
  void* cuda_stream = nullptr;  // the copies to the device are ordered on this stream
  int priority = 0;
  std::vector<PullChunk> chunks;  // disjoint ranges inside [0, elements)
  ChunkDecodeFn decode;
  // Once, when every chunk is decoded into destination (on the device: copy complete), with
  // OK or the first chunk error. Runs on a pool thread.
  std::function<void(absl::Status status)> on_done;
};

// Splits n elements into chunks of chunk_elements (0: one chunk).
std::vector<ChunkInfo> SplitIntoChunks(size_t elements, size_t chunk_elements);

// True when this build has CUDA and a device is usable.
bool CudaStagingAvailable();

class StagingPipeline {
 public:
  // pool and memory must outlive the pipeline and every request in flight.
  StagingPipeline(PriorityThreadPool* pool, PinnedMemoryPool* memory);

  // Starts a push. A malformed request (null pointers, missing callables, a device tensor in
  // a build without CUDA) is an error returned here and no callback is called; otherwise
  // every chunk reaches on_chunk and then on_done is called, whatever fails.
  absl::Status Push(PushRequest request);

  // Starts a pull; the same contract as Push.
  absl::Status Pull(PullRequest request);

 private:
  PriorityThreadPool* pool_;
  PinnedMemoryPool* memory_;
};

}  // namespace bytecomp::cpu_offload
