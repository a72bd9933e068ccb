// The worker engine: one per training process. The C API (c_api.h) is a thin layer over it;
// C++ programs may use it directly (link bytecomp_worker_static).
//
// Threads (each ZeroMQ socket owned by one):
//   callers (training threads): declare, push_pull, wait. They queue a push_pull on its tensor
//     and, when the tensor is idle, start its stages (an INLINE encode runs on the caller);
//     everything else is queued to the threads below (eventfd wake-ups, no polling).
//   control: the scheduler connection: declarations, barriers, heartbeats, strategy switches,
//     failures.
//   data I/O: C DEALER connections to each server; sends partitions in priority order within
//     an in-flight budget per server, receives acks and pull replies.
//   codec pool (BYTECOMP_COMPRESS_THREADS): encodes, decodes and copies into the tensors.
// The life of a gradient through these threads: worker/README.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace bytecomp::worker {

// A tensor's element type. The values are the C API's (BYTECOMP_FLOAT32, ...) and the wire's
// (proto DType); anything else is refused with InvalidArgument.
enum class ElementType : int { kFloat32 = 0, kFloat16 = 1, kBfloat16 = 2 };

// One push_pull as the caller asked for it; the engine's operation keeps it as it came.
struct PushPullRequest {
  std::string name;
  void* data = nullptr;
  int64_t element_count = 0;
  ElementType dtype = ElementType::kFloat32;
  int priority = 0;
  bool average = false;
  // A device tensor (bytecomp_push_pull_device): data is device memory of `device`, ready once
  // the work queued on `stream` (a cudaStream_t) before the call is done.
  bool on_device = false;
  int device = 0;
  void* stream = nullptr;
};

struct EngineInfo {
  int rank = 0;
  int size = 0;
  int local_rank = 0;
  int local_size = 1;
  int num_servers = 0;
  int64_t partition_bytes = 0;
  // How long a wait without a time limit of its own (timeout_ms < 0) waits:
  // ClusterConfig.push_pull_timeout_ms, or this worker's BYTECOMP_PUSH_PULL_TIMEOUT_MS.
  int64_t wait_timeout_ms = 0;
};

// Bytes moved by this worker, compressed (on the wire) and uncompressed (what they stand for).
struct EngineStats {
  int64_t pushed_bytes = 0;
  int64_t pushed_raw_bytes = 0;
  int64_t pulled_bytes = 0;
  int64_t pulled_raw_bytes = 0;
  int64_t operations = 0;
};

class WorkerEngine {
 public:
  // Registers with the scheduler, receives the topology and connects to every server.
  static absl::StatusOr<std::unique_ptr<WorkerEngine>> Start(const std::string& config_path);
  // Shuts down if Shutdown was not called.
  virtual ~WorkerEngine() = default;

  virtual const EngineInfo& info() const = 0;
  // `shape`: optional (empty: flat); its dimensions multiply to element_count.
  virtual absl::Status Declare(const std::string& name, int64_t element_count, ElementType dtype,
                               absl::Span<const int64_t> shape = {}) = 0;
  // Starts the push_pull; returns its handle.
  virtual absl::StatusOr<int64_t> PushPull(const PushPullRequest& request) = 0;
  // true when done; an error if the operation failed (or the handle is unknown).
  virtual absl::StatusOr<bool> Poll(int64_t handle) = 0;
  // OK, DeadlineExceeded on timeout (the operation goes on), or the operation's error.
  // A completed handle is released. timeout_ms < 0: info().wait_timeout_ms.
  virtual absl::Status Wait(int64_t handle, int64_t timeout_ms) = 0;
  virtual absl::Status Release(int64_t handle) = 0;
  // timeout_ms < 0: info().wait_timeout_ms.
  virtual absl::Status Barrier(int64_t timeout_ms) = 0;
  // The optimiser's current learning rate, for codecs that need it (efsignsgd).
  virtual void SetLearningRate(double learning_rate) = 0;
  virtual EngineStats Stats() const = 0;
  // The round and strategy version of the tensor's latest started operation.
  virtual absl::Status TensorStrategy(const std::string& name, int64_t* round,
                                      int64_t* version) = 0;
  // The tensor's error-feedback state (every partition's memory), for checkpoints; the tensor
  // must have no push_pull in flight.
  virtual absl::StatusOr<std::string> SaveTensorState(const std::string& name) = 0;
  virtual absl::Status LoadTensorState(const std::string& name, absl::string_view state) = 0;
  // Completes or fails everything in flight, tells the scheduler, stops the threads.
  virtual absl::Status Shutdown() = 0;
};

}  // namespace bytecomp::worker
