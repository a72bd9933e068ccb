// LocalReducer for device memory: NCCL moves the data (ncclReduce to the local root,
// ncclBroadcast from it) and a HostLocalReducer between the same local ranks is the control
// plane. NCCL needs every rank to issue collectives in one order, while the engine's local
// ranks call in any order (matched by tag); so, BytePS's COORDINATE stage: for each tag every
// rank says "ready" to the root (a one-element host reduction), the root numbers the tags in
// the order they became ready on every rank and sends each rank that number (a host
// broadcast), and every rank launches its NCCL calls strictly in number order. Errors (a
// failed network round on the root) travel on the host channel, never through NCCL.
//
// Built only with CUDA and NCCL (the bytecomp_nccl target exists), into the local_reduce
// library, whose set-up makes it for device tensors in hierarchical jobs (nccl_setup.cc).
// Compile-checked here: there is no GPU on the build machine.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "bytecomp/worker/local_reducer.h"
#include "bytecomp/worker/nccl_reducer.h"

namespace bytecomp::worker {

class NcclLocalReducerAdapter : public LocalReducer {
 public:
  // `control`: a started host reducer between the same local ranks; `nccl`: the
  // communicator (its unique id relayed through the scheduler as LocalCommunicator
  // kind "nccl"). Creates a CUDA stream on nccl's device.
  static absl::StatusOr<std::unique_ptr<NcclLocalReducerAdapter>> Create(
      std::unique_ptr<LocalReducer> control, std::unique_ptr<NcclLocalReducer> nccl, int device);
  ~NcclLocalReducerAdapter() override;

  int local_rank() const override { return control_->local_rank(); }
  int local_size() const override { return control_->local_size(); }
  // `buffer` is device memory on the adapter's device.
  void Reduce(const std::string& tag, void* buffer, int64_t elements, proto::DType dtype,
              Done done) override;
  void Broadcast(const std::string& tag, void* buffer, int64_t elements, proto::DType dtype,
                 absl::Status root_status, Done done) override;
  void Fail(const absl::Status& reason) override;
  void Stop() override;

 private:
  // A collective waiting for its turn (its number from the root) and then for the GPU.
  struct Launch {
    bool broadcast = false;
    void* buffer = nullptr;
    int64_t elements = 0;
    proto::DType dtype = proto::DTYPE_FLOAT32;
    Done done;
  };
  NcclLocalReducerAdapter(std::unique_ptr<LocalReducer> control,
                          std::unique_ptr<NcclLocalReducer> nccl, int device, void* stream);
  // Root: asks the control plane for the order of `tag` once every rank is ready for it.
  void Coordinate(const std::string& key, Launch launch);
  // Runs `launch` as number `sequence`, after every smaller number.
  void Enqueue(uint64_t sequence, Launch launch) ABSL_LOCKS_EXCLUDED(mu_);
  void Complete() ABSL_LOCKS_EXCLUDED(mu_);

  std::unique_ptr<LocalReducer> control_;
  std::unique_ptr<NcclLocalReducer> nccl_;
  int device_;
  void* stream_;  // cudaStream_t

  absl::Mutex mu_;
  absl::CondVar cv_;                               // gpu_ gained an item, or stopping_
  uint64_t next_number_ ABSL_GUARDED_BY(mu_) = 0;  // root: the next number to hand out
  uint64_t next_launch_ ABSL_GUARDED_BY(mu_) = 0;  // the next number to launch
  // Numbered, waiting for the smaller numbers.
  std::map<uint64_t, Launch> numbered_ ABSL_GUARDED_BY(mu_);
  // Launched: (cudaEvent_t, call), in order.
  std::deque<std::pair<void*, Launch>> gpu_ ABSL_GUARDED_BY(mu_);
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread completer_;  // waits for each launched call's event, runs its callback
};

}  // namespace bytecomp::worker
