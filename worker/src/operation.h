// A push_pull in flight and the declared tensors it works on.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "bytecomp/common/partition.h"
#include "data.pb.h"

namespace bytecomp::worker {

class EngineImpl;

struct Operation {
  int64_t handle = 0;
  std::string name;
  void* data = nullptr;
  int64_t element_count = 0;
  proto::DType dtype = proto::DTYPE_FLOAT32;
  int priority = 0;
  bool average = false;
  // Set when the operation starts (the tensor's declaration is known).
  TensorLayout layout;
  uint64_t round = 0;

  // Two events per partition: the pull reply (or its failure) and ZeroMQ releasing the
  // zero-copy push payload. The operation completes when both happened for every partition,
  // so the caller may free or overwrite its memory the moment the handle is done.
  std::atomic<int64_t> pending_events{0};

  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  absl::Status status;  // first error wins

  void RecordError(const absl::Status& error) {
    std::lock_guard<std::mutex> lock(mu);
    if (status.ok()) status = error;
  }
  // Wakes every waiter; the operation's status is final.
  void MarkDone() {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
    }
    cv.notify_all();
  }
  // Fails an operation that never reached the data thread.
  void FailBeforeStart(const absl::Status& error) {
    RecordError(error);
    MarkDone();
  }
};

enum class TensorState { kDeclaring, kReady, kFailed };

struct TensorEntry {
  std::string name;
  int64_t element_count = 0;
  proto::DType dtype = proto::DTYPE_FLOAT32;
  TensorState state = TensorState::kDeclaring;
  absl::Status error;
  TensorLayout layout;
  uint64_t next_round = 0;
  // Operations on one tensor run one at a time, in submission order: a key's rounds follow
  // each other on the server.
  bool busy = false;
  std::deque<std::shared_ptr<Operation>> waiting;
};

}  // namespace bytecomp::worker
