#include "bytecomp/cpu_offload/staging.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>

#include "absl/strings/str_cat.h"

#if BYTECOMP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace bytecomp::cpu_offload {
namespace {

// Bookkeeping of one request: counts chunks down and keeps the first error.
class RequestTracker {
 public:
  RequestTracker(size_t chunks, std::function<void(absl::Status)> on_done)
      : remaining_(chunks), on_done_(std::move(on_done)) {}

  void ChunkFinished(const absl::Status& status) {
    if (!status.ok()) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (first_error_.ok()) first_error_ = status;
    }
    if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      absl::Status result;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        result = first_error_;
      }
      if (on_done_) on_done_(std::move(result));
    }
  }

 private:
  std::atomic<size_t> remaining_;
  std::mutex mutex_;
  absl::Status first_error_;
  std::function<void(absl::Status)> on_done_;
};

absl::Status ChunkError(absl::string_view what, const ChunkInfo& chunk, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(what, " of chunk ", chunk.index, " (elements ",
                                             chunk.element_offset, "..",
                                             chunk.element_offset + chunk.elements, "): ",
                                             s.message()));
}

struct PushShared {
  PushRequest request;
  RequestTracker tracker;
  PinnedMemoryPool* memory;
  PriorityThreadPool* pool;
  PushShared(PushRequest r, size_t chunks, PinnedMemoryPool* m, PriorityThreadPool* p)
      : request(std::move(r)), tracker(chunks, request.on_done), memory(m), pool(p) {}
};

// Encodes one chunk from input (host memory) into buffer and hands it on.
void EncodeInto(PushShared& shared, const ChunkInfo& chunk, absl::Span<const float> input,
                absl::StatusOr<PinnedBuffer> buffer) {
  absl::StatusOr<EncodedChunk> result;
  const size_t bound = shared.request.max_encoded_bytes(chunk.elements);
  if (!buffer.ok()) {
    result = ChunkError("staging buffer", chunk, buffer.status());
  } else {
    absl::StatusOr<size_t> written =
        shared.request.encode(chunk, input, absl::Span<uint8_t>(buffer->data(), bound));
    if (!written.ok()) {
      result = ChunkError("encode", chunk, written.status());
    } else if (*written > bound) {
      result = absl::InternalError(absl::StrCat("encode of chunk ", chunk.index, " wrote ",
                                                *written, " bytes, above its bound of ", bound));
    } else {
      result = EncodedChunk{chunk, std::move(*buffer), *written};
    }
  }
  const absl::Status status = result.status();
  shared.request.on_chunk(chunk, std::move(result));
  shared.tracker.ChunkFinished(status);
}

// Gets the chunk's output buffer and encodes, on a pool thread. When the pinned pool is at its
// bound the chunk is parked (no thread waits): the release that makes room queues the encode.
// staged (may be null) keeps the chunk's device copy alive until then.
void EncodeChunk(std::shared_ptr<PushShared> shared, const ChunkInfo& chunk,
                 absl::Span<const float> input, std::shared_ptr<PinnedBuffer> staged) {
  const size_t bound = std::max<size_t>(shared->request.max_encoded_bytes(chunk.elements), 1);
  std::optional<absl::StatusOr<PinnedBuffer>> now = shared->memory->AcquireOrPark(
      bound, [shared, chunk, input, staged](absl::StatusOr<PinnedBuffer> buffer) {
        auto holder = std::make_shared<absl::StatusOr<PinnedBuffer>>(std::move(buffer));
        shared->pool
            ->Submit(shared->request.priority,
                     [shared, chunk, input, staged, holder](absl::Status status) {
                       if (!status.ok()) *holder = status;  // pool shut down: Cancelled
                       EncodeInto(*shared, chunk, input, std::move(*holder));
                     })
            .IgnoreError();  // a refused task ran with Cancelled
      });
  if (now.has_value()) EncodeInto(*shared, chunk, input, std::move(*now));
}

struct PullShared {
  PullRequest request;
  RequestTracker tracker;
  PinnedMemoryPool* memory;
  PriorityThreadPool* pool;
  PullShared(PullRequest r, size_t chunks, PinnedMemoryPool* m, PriorityThreadPool* p)
      : request(std::move(r)), tracker(chunks, request.on_done), memory(m), pool(p) {}
};

#if BYTECOMP_HAVE_CUDA
absl::Status CudaError(absl::string_view what, cudaError_t rc) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(rc)));
}

// State of one chunk between a stream callback and the pool task it queues.
struct PushCopyContext {
  std::shared_ptr<PushShared> shared;
  ChunkInfo chunk;
  PinnedBuffer staged;  // the chunk's floats, copied from the device
  PriorityThreadPool* pool;
};

// Runs on the CUDA driver's callback thread once the device-to-host copy is done: it may not
// call CUDA, so it only queues the encode on the pool.
void CUDART_CB OnPushCopyDone(void* raw) {
  std::unique_ptr<PushCopyContext> ctx(static_cast<PushCopyContext*>(raw));
  PriorityThreadPool* pool = ctx->pool;
  const int priority = ctx->shared->request.priority;
  pool->Submit(priority, [ctx = std::move(ctx)](absl::Status status) mutable {
        if (!status.ok()) {
          ctx->shared->request.on_chunk(ctx->chunk, ChunkError("encode", ctx->chunk, status));
          ctx->shared->tracker.ChunkFinished(status);
          return;
        }
        auto staged = std::make_shared<PinnedBuffer>(std::move(ctx->staged));
        EncodeChunk(ctx->shared, ctx->chunk,
                    absl::Span<const float>(staged->as<const float>(), ctx->chunk.elements),
                    staged);
      }).IgnoreError();  // a refused task was called with Cancelled and reported it
}

struct PullCopyContext {
  std::shared_ptr<PullShared> shared;
  ChunkInfo chunk;
  PinnedBuffer staged;  // decoded floats, being copied to the device
};

void CUDART_CB OnPullCopyDone(void* raw) {
  std::unique_ptr<PullCopyContext> ctx(static_cast<PullCopyContext*>(raw));
  PriorityThreadPool* pool = ctx->shared->pool;
  // Finishing work is tiny and unblocks the framework: run it before any encode or decode.
  pool->Submit(std::numeric_limits<int>::max(),
               [ctx = std::move(ctx)](absl::Status status) mutable {
                 ctx->staged.Reset();
                 // A cancelled finishing task still means the copy itself completed.
                 (void)status;
                 ctx->shared->tracker.ChunkFinished(absl::OkStatus());
               })
      .IgnoreError();
}
// Decodes pull chunk i into the pinned buffer staged and queues its copy to the device.
void DecodeToDevice(const std::shared_ptr<PullShared>& shared, size_t i,
                    absl::StatusOr<PinnedBuffer> staged) {
  const PullRequest& r = shared->request;
  const PullChunk& in = r.chunks[i];
  if (!staged.ok()) {
    shared->tracker.ChunkFinished(ChunkError("staging buffer", in.chunk, staged.status()));
    return;
  }
  absl::Status decoded = r.decode(in.chunk, in.encoded,
                                  absl::Span<float>(staged->as<float>(), in.chunk.elements));
  if (!decoded.ok()) {
    shared->tracker.ChunkFinished(ChunkError("decode", in.chunk, decoded));
    return;
  }
  const cudaStream_t stream = static_cast<cudaStream_t>(r.cuda_stream);
  cudaError_t rc = cudaSetDevice(r.device);
  if (rc == cudaSuccess) {
    rc = cudaMemcpyAsync(r.destination + in.chunk.element_offset, staged->data(),
                         in.chunk.elements * sizeof(float), cudaMemcpyHostToDevice, stream);
  }
  if (rc != cudaSuccess) {
    shared->tracker.ChunkFinished(
        ChunkError("host-to-device copy", in.chunk, CudaError("cudaMemcpyAsync", rc)));
    return;
  }
  auto* ctx = new PullCopyContext{shared, in.chunk, std::move(*staged)};
  rc = cudaLaunchHostFunc(stream, &OnPullCopyDone, ctx);
  if (rc != cudaSuccess) {
    cudaStreamSynchronize(stream);  // the copy may still read the buffer
    delete ctx;
    shared->tracker.ChunkFinished(
        ChunkError("host-to-device copy", in.chunk, CudaError("cudaLaunchHostFunc", rc)));
  }
}
#endif  // BYTECOMP_HAVE_CUDA

absl::Status CheckLocation(TensorLocation location) {
  if (location == TensorLocation::kCudaDevice && !CudaStagingAvailable()) {
#if BYTECOMP_HAVE_CUDA
    return absl::FailedPreconditionError(
        "staging: a device tensor was given but no CUDA device is usable");
#else
    return absl::FailedPreconditionError(
        "staging: a device tensor was given but this build has no CUDA (BYTECOMP_CUDA=OFF)");
#endif
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<ChunkInfo> SplitIntoChunks(size_t elements, size_t chunk_elements) {
  std::vector<ChunkInfo> chunks;
  if (chunk_elements == 0 || chunk_elements >= elements) {
    chunks.push_back(ChunkInfo{0, 0, elements});
    return chunks;
  }
  for (size_t offset = 0; offset < elements; offset += chunk_elements) {
    chunks.push_back(
        ChunkInfo{chunks.size(), offset, std::min(chunk_elements, elements - offset)});
  }
  return chunks;
}

bool CudaStagingAvailable() {
#if BYTECOMP_HAVE_CUDA
  static const bool available = [] {
    int devices = 0;
    const bool ok = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
    if (!ok) cudaGetLastError();
    return ok;
  }();
  return available;
#else
  return false;
#endif
}

StagingPipeline::StagingPipeline(PriorityThreadPool* pool, PinnedMemoryPool* memory)
    : pool_(pool), memory_(memory) {}

absl::Status StagingPipeline::Push(PushRequest request) {
  if (request.source == nullptr && request.elements > 0) {
    return absl::InvalidArgumentError("staging push: source is null");
  }
  if (!request.encode || !request.max_encoded_bytes || !request.on_chunk) {
    return absl::InvalidArgumentError(
        "staging push: encode, max_encoded_bytes and on_chunk must all be set");
  }
  if (absl::Status s = CheckLocation(request.location); !s.ok()) return s;

  const std::vector<ChunkInfo> chunks = SplitIntoChunks(request.elements, request.chunk_elements);
  auto shared = std::make_shared<PushShared>(std::move(request), chunks.size(), memory_, pool_);
  const PushRequest& r = shared->request;

  if (r.location == TensorLocation::kHost) {
    for (const ChunkInfo& chunk : chunks) {
      pool_->Submit(r.priority, [shared, chunk](absl::Status status) {
            if (!status.ok()) {
              shared->request.on_chunk(chunk, ChunkError("encode", chunk, status));
              shared->tracker.ChunkFinished(status);
              return;
            }
            EncodeChunk(shared, chunk,
                        absl::Span<const float>(shared->request.source + chunk.element_offset,
                                                chunk.elements),
                        nullptr);
          }).IgnoreError();
    }
    return absl::OkStatus();
  }

#if BYTECOMP_HAVE_CUDA
  // Device tensor: queue every chunk's copy on the caller's stream now (after the work that
  // produced the gradient); each copy's completion queues that chunk's encode.
  const cudaStream_t stream = static_cast<cudaStream_t>(r.cuda_stream);
  // The caller is a training thread: leave its current device as it was.
  int previous_device = 0;
  if (cudaError_t rc = cudaGetDevice(&previous_device); rc != cudaSuccess) {
    return CudaError("staging push: cudaGetDevice", rc);
  }
  if (cudaError_t rc = cudaSetDevice(r.device); rc != cudaSuccess) {
    return CudaError(absl::StrCat("staging push: cudaSetDevice(", r.device, ")"), rc);
  }
  struct RestoreDevice {
    int device;
    ~RestoreDevice() { cudaSetDevice(device); }
  } restore{previous_device};
  for (const ChunkInfo& chunk : chunks) {
    auto fail = [&](absl::Status status) {
      shared->request.on_chunk(chunk, status);
      shared->tracker.ChunkFinished(status);
    };
    absl::StatusOr<PinnedBuffer> staged = memory_->Acquire(chunk.elements * sizeof(float));
    if (!staged.ok()) {
      fail(ChunkError("staging buffer", chunk, staged.status()));
      continue;
    }
    cudaError_t rc = cudaMemcpyAsync(staged->data(), r.source + chunk.element_offset,
                                     chunk.elements * sizeof(float), cudaMemcpyDeviceToHost,
                                     stream);
    if (rc != cudaSuccess) {
      fail(ChunkError("device-to-host copy", chunk, CudaError("cudaMemcpyAsync", rc)));
      continue;
    }
    auto* ctx = new PushCopyContext{shared, chunk, std::move(*staged), pool_};
    rc = cudaLaunchHostFunc(stream, &OnPushCopyDone, ctx);
    if (rc != cudaSuccess) {
      // The copy may still be running: wait for it before the buffer goes back to the pool.
      cudaStreamSynchronize(stream);
      delete ctx;
      fail(ChunkError("device-to-host copy", chunk, CudaError("cudaLaunchHostFunc", rc)));
    }
  }
  return absl::OkStatus();
#else
  return absl::InternalError("unreachable: device tensor without CUDA");
#endif
}

absl::Status StagingPipeline::Pull(PullRequest request) {
  if (request.destination == nullptr && request.elements > 0) {
    return absl::InvalidArgumentError("staging pull: destination is null");
  }
  if (!request.decode) return absl::InvalidArgumentError("staging pull: decode is not set");
  if (request.chunks.empty()) return absl::InvalidArgumentError("staging pull: no chunks");
  for (const PullChunk& c : request.chunks) {
    if (c.chunk.element_offset > request.elements ||
        c.chunk.elements > request.elements - c.chunk.element_offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          "staging pull: chunk ", c.chunk.index, " covers elements ", c.chunk.element_offset,
          "..", c.chunk.element_offset + c.chunk.elements, ", outside the tensor of ",
          request.elements));
    }
  }
  if (absl::Status s = CheckLocation(request.location); !s.ok()) return s;

  const size_t count = request.chunks.size();
  auto shared = std::make_shared<PullShared>(std::move(request), count, memory_, pool_);
  for (size_t i = 0; i < count; ++i) {
    pool_->Submit(shared->request.priority, [shared, i](absl::Status status) {
          const PullRequest& r = shared->request;
          const PullChunk& in = r.chunks[i];
          if (!status.ok()) {
            shared->tracker.ChunkFinished(ChunkError("decode", in.chunk, status));
            return;
          }
          if (r.location == TensorLocation::kHost) {
            absl::Status decoded = r.decode(
                in.chunk, in.encoded,
                absl::Span<float>(r.destination + in.chunk.element_offset, in.chunk.elements));
            shared->tracker.ChunkFinished(
                decoded.ok() ? decoded : ChunkError("decode", in.chunk, decoded));
            return;
          }
#if BYTECOMP_HAVE_CUDA
          // The decoded floats go through a pinned buffer; at the pool's bound the chunk is
          // parked until a release makes room (then it continues as a pool task).
          const size_t bytes = std::max<size_t>(in.chunk.elements * sizeof(float), 1);
          std::optional<absl::StatusOr<PinnedBuffer>> now = shared->memory->AcquireOrPark(
              bytes, [shared, i](absl::StatusOr<PinnedBuffer> staged) {
                auto holder = std::make_shared<absl::StatusOr<PinnedBuffer>>(std::move(staged));
                shared->pool
                    ->Submit(shared->request.priority,
                             [shared, i, holder](absl::Status status) {
                               if (!status.ok()) *holder = status;
                               DecodeToDevice(shared, i, std::move(*holder));
                             })
                    .IgnoreError();
              });
          if (now.has_value()) DecodeToDevice(shared, i, std::move(*now));
#endif
        }).IgnoreError();
  }
  return absl::OkStatus();
}

}  // namespace bytecomp::cpu_offload
