// A push_pull in flight and the declared tensors it works on.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "bytecomp/common/partition.h"
#include "bytecomp/compress.h"
#include "bytecomp/compress/strategy.h"
#include "bytecomp/cpu_offload.h"
#include "bytecomp/worker/device_backend.h"
#include "data.pb.h"

namespace bytecomp::worker {

class EngineImpl;
struct TensorEntry;

// A partition's codec objects on this worker: the push codec and its error-feedback memory,
// and the decoder of two-way pulls. Made for one strategy version; used by one pool task at a
// time (a tensor's operations run one after another).
struct PartitionCodec {
  uint64_t version = 0;
  std::unique_ptr<compress::Codec> push;
  std::unique_ptr<compress::Memory> memory;
  std::unique_ptr<compress::Codec> pull;  // two-way only
  std::vector<float> input, compensated, decoded, output;  // scratch, reused across rounds
  // Device tensors whose stages run on the device (made on first use for `version`).
  std::unique_ptr<DeviceCodec> device_push, device_pull;
  bool device_memory = false;  // device_push has an error-feedback memory fused
  DeviceAllocation device_encoded, device_pulled;  // payload buffers on the device
  size_t device_encoded_bytes = 0, device_pulled_bytes = 0;
};

// Where a device tensor's stages run, decided when its operation starts.
struct DeviceWork {
  DeviceBackend* backend = nullptr;
  int device = 0;
  DeviceStream stream = nullptr;
  bool encode_on_device = false;  // else: copy to pinned host memory, encode on the pool
  bool decode_on_device = false;  // else: decode on the pool, copy to the device
  // Pinned host copy of the tensor, for the stages that run on the host (the push of an
  // uncompressed or pool-encoded tensor, the results decoded on the pool).
  cpu_offload::PinnedBuffer host;
};

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
  uint64_t round = 0;       // training round: the tensor's push_pull count
  uint64_t wire_round = 0;  // the key's first exchange of this round on the server
  compress::TensorPlan plan;
  bool two_round = false;   // PowerSGD: two exchanges per round
  std::shared_ptr<TensorEntry> tensor;
  std::unique_ptr<DeviceWork> device;  // null: a host tensor

  // Where the host stages read the gradient and write the result: the caller's memory, or
  // for a device tensor its pinned host copy.
  char* host_data() const {
    return static_cast<char*>(device != nullptr ? static_cast<void*>(device->host.data()) : data);
  }

  // Uncompressed: two events per partition, the pull reply (or its failure) and ZeroMQ
  // releasing the zero-copy push payload (the caller's memory), so the caller may reuse its
  // memory the moment the handle is done. Compressed: one per partition, the decoded result
  // written (the payload is the engine's own buffer).
  std::atomic<int64_t> pending_events{0};

  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  absl::Status status;  // first error wins
  // Runs once, with the final status, when the operation is done (the hierarchical layer
  // chains the local root's network operation to the broadcast). It must only queue work.
  absl::AnyInvocable<void(absl::Status)> on_done;

  void RecordError(const absl::Status& error) {
    std::lock_guard<std::mutex> lock(mu);
    if (status.ok()) status = error;
  }
  // Wakes every waiter; the operation's status is final.
  void MarkDone() {
    absl::AnyInvocable<void(absl::Status)> then;
    absl::Status final_status;
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
      then = std::move(on_done);
      on_done = nullptr;
      final_status = status;
    }
    cv.notify_all();
    if (then) then(final_status);
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
  uint64_t next_round = 0;       // training rounds started
  uint64_t next_wire_round = 0;  // exchanges with the servers started (2 per PowerSGD round)
  uint64_t local_round = 0;      // hierarchical: push_pull calls, which tag the local collectives
  // Hierarchical push_pulls started while the declaration was pending (failed with it if it fails).
  std::vector<std::weak_ptr<Operation>> local_ops;
  uint64_t last_version = 0;     // strategy version of the latest started operation
  uint64_t two_round_version = 0;  // the version `two_round` was found for
  bool two_round = false;          // the push codec needs two exchanges (PowerSGD)
  bool placement_logged = false;   // a placement the strategy asked for could not be followed
  std::vector<PartitionCodec> codecs;
  // Error-feedback state restored from a checkpoint before the partition's memory existed;
  // applied when it is made.
  std::vector<std::string> pending_state;
  std::string checkpoint;  // loaded before the declaration completed
  // Operations on one tensor run one at a time, in submission order: a key's rounds follow
  // each other on the server.
  bool busy = false;
  std::deque<std::shared_ptr<Operation>> waiting;
};

}  // namespace bytecomp::worker
