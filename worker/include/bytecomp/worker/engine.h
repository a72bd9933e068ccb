// The worker engine: one per training process. The C API (c_api.h) is a thin layer over it.
//
// Threads (each ZeroMQ socket owned by one):
//   callers (training threads): declare, push_pull, wait; they only touch mutex-protected
//     tables and queue work for the other two threads (eventfd wake-ups, no polling).
//   control: the scheduler connection: declarations, barriers, heartbeats, failures.
//   data I/O: C DEALER connections to each server; sends partitions in priority order within
//     an in-flight budget per server, receives acks and pull replies, writes results.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data.pb.h"

namespace bytecomp::worker {

struct PushPullRequest {
  std::string name;
  void* data = nullptr;
  int64_t element_count = 0;
  proto::DType dtype = proto::DTYPE_FLOAT32;
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
};

// Bytes moved by this worker, compressed (on the wire) and uncompressed (what they stand for).
struct EngineStats {
  int64_t pushed_bytes = 0;
  int64_t pushed_raw_bytes = 0;
  int64_t pulled_bytes = 0;
  int64_t pulled_raw_bytes = 0;
  int64_t operations = 0;
};

class EngineImpl;

class WorkerEngine {
 public:
  // Registers with the scheduler, receives the topology and connects to every server.
  static absl::StatusOr<std::unique_ptr<WorkerEngine>> Start(const std::string& config_path);
  ~WorkerEngine();

  const EngineInfo& info() const;
  absl::Status Declare(const std::string& name, int64_t element_count, proto::DType dtype);
  absl::StatusOr<int64_t> PushPull(const PushPullRequest& request);
  // true when done; an error if the operation failed (or the handle is unknown).
  absl::StatusOr<bool> Poll(int64_t handle);
  // OK, DeadlineExceeded on timeout (the operation goes on), or the operation's error.
  // A completed handle is released.
  absl::Status Wait(int64_t handle, int64_t timeout_ms);
  absl::Status Release(int64_t handle);
  absl::Status Barrier(int64_t timeout_ms);
  // The optimiser's current learning rate, for codecs that need it (efsignsgd).
  void SetLearningRate(double learning_rate);
  EngineStats Stats() const;
  // The round and strategy version of the tensor's latest started operation.
  absl::Status TensorStrategy(const std::string& name, int64_t* round, int64_t* version);
  // The tensor's error-feedback state (every partition's memory), for checkpoints; the tensor
  // must have no push_pull in flight.
  absl::StatusOr<std::string> SaveTensorState(const std::string& name);
  absl::Status LoadTensorState(const std::string& name, absl::string_view state);
  // Completes or fails everything in flight, tells the scheduler, stops the threads.
  absl::Status Shutdown();

 private:
  explicit WorkerEngine(std::unique_ptr<EngineImpl> impl);
  std::unique_ptr<EngineImpl> impl_;
};

}  // namespace bytecomp::worker
