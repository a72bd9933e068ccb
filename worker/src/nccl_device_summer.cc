#include "nccl_device_summer.h"

#if BYTECOMP_HAVE_NCCL
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/worker/nccl_reducer.h"
#endif

namespace bytecomp::worker {

#if BYTECOMP_HAVE_NCCL
namespace {

class NcclDeviceSummer final : public DeviceSummer {
 public:
  NcclDeviceSummer(int rank, int size, std::chrono::milliseconds timeout)
      : rank_(rank), size_(size), timeout_(timeout) {}
  ~NcclDeviceSummer() override {
    for (cudaEvent_t e : ready_) cudaEventDestroy(e);
    if (done_ != nullptr) cudaEventDestroy(done_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  absl::Status SumInPlace(const std::vector<DeviceValues>& items,
                          const BroadcastFromLeader& broadcast) override {
    if (items.empty()) return absl::OkStatus();
    if (comm_ == nullptr) {
      if (absl::Status s = Join(items.front().device, broadcast); !s.ok()) return s;
    }
    for (const DeviceValues& v : items) {
      if (v.device != comm_->device()) {
        return absl::InvalidArgumentError(
            absl::StrCat("device values on GPU ", v.device,
                         ", but this worker's NCCL "
                         "communicator for the collectives is on GPU ",
                         comm_->device(), " (one GPU per worker process)"));
      }
    }
    if (cudaError_t rc = cudaSetDevice(comm_->device()); rc != cudaSuccess) {
      return CudaError("cudaSetDevice", rc);
    }
    // The communicator's stream waits for each tensor's stream: an event behind its gradient's
    // writes.
    std::vector<void*> streams;
    for (const DeviceValues& v : items) {
      if (std::find(streams.begin(), streams.end(), v.stream) == streams.end()) {
        streams.push_back(v.stream);
      }
    }
    while (ready_.size() < streams.size()) {
      cudaEvent_t e = nullptr;
      if (cudaError_t rc = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
          rc != cudaSuccess) {
        return CudaError("cudaEventCreateWithFlags", rc);
      }
      ready_.push_back(e);
    }
    for (size_t k = 0; k < streams.size(); ++k) {
      cudaError_t rc = cudaEventRecord(ready_[k], static_cast<cudaStream_t>(streams[k]));
      if (rc == cudaSuccess) rc = cudaStreamWaitEvent(stream_, ready_[k], 0);
      if (rc != cudaSuccess) return CudaError("waiting for the gradients' stream", rc);
    }
    // One launch for the batch.
    if (absl::Status s = comm_->GroupStart(); !s.ok()) return s;
    absl::Status queued;
    for (const DeviceValues& v : items) {
      queued = comm_->AllReduceInPlace(v.data, v.count, v.dtype, v.average, stream_);
      if (!queued.ok()) break;
    }
    if (absl::Status s = comm_->GroupEnd(); queued.ok() && !s.ok()) queued = s;
    if (!queued.ok()) return queued;
    if (cudaError_t rc = cudaEventRecord(done_, stream_); rc != cudaSuccess) {
      return CudaError("cudaEventRecord", rc);
    }
    return WaitDone(items.size());
  }

 private:
  // Worker 0 makes the communicator's id and broadcasts it, a leading byte saying whether it
  // could; every worker then joins.
  absl::Status Join(int device, const BroadcastFromLeader& broadcast) {
    std::string id(1 + kNcclUniqueIdBytes, '\0');
    absl::Status made;
    if (rank_ == 0) {
      absl::StatusOr<std::string> unique = NewNcclUniqueId();
      if (unique.ok()) {
        id[0] = 1;
        id.replace(1, kNcclUniqueIdBytes, *unique);
      } else {
        made = unique.status();
      }
    }
    broadcast(&id);
    if (id[0] != 1) {
      return absl::FailedPreconditionError(
          absl::StrCat("the collectives' NCCL communicator: worker 0 could not make its id",
                       made.ok() ? "" : absl::StrCat(" (", made.message(), ")")));
    }
    absl::StatusOr<std::unique_ptr<NcclLocalReducer>> comm =
        NcclLocalReducer::Create(absl::string_view(id).substr(1), rank_, size_, device);
    if (!comm.ok()) {
      return absl::Status(comm.status().code(),
                          absl::StrCat("the collectives' NCCL communicator (worker ", rank_, " of ",
                                       size_, ", GPU ", device, "): ", comm.status().message()));
    }
    comm_ = *std::move(comm);
    // The communicator's stream and its batch's end, on its device (Create set it current).
    cudaError_t rc = stream_ != nullptr
                         ? cudaSuccess
                         : cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    if (rc == cudaSuccess && done_ == nullptr) {
      rc = cudaEventCreateWithFlags(&done_, cudaEventDisableTiming);
    }
    if (rc != cudaSuccess) return CudaError("the collectives' NCCL stream", rc);
    return absl::OkStatus();
  }

  // Polls the batch's end until it has come or the timeout has passed; then the communicator
  // is aborted, which ends its kernels waiting for a peer.
  absl::Status WaitDone(size_t items) {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    auto pause = std::chrono::microseconds(20);
    while (true) {
      const cudaError_t rc = cudaEventQuery(done_);
      if (rc == cudaSuccess) return absl::OkStatus();
      if (rc != cudaErrorNotReady) return CudaError("the collectives' NCCL allreduce", rc);
      if (std::chrono::steady_clock::now() >= deadline) {
        comm_->Abort();
        comm_.reset();
        return absl::DeadlineExceededError(absl::StrCat(
            "the collectives' NCCL allreduce of ", items, " partitions did not finish within ",
            timeout_.count(),
            " ms (push_pull_timeout_ms; a worker gone?): its communicator was aborted"));
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(2 * pause, std::chrono::microseconds(1000));
    }
  }

  static absl::Status CudaError(absl::string_view what, cudaError_t rc) {
    return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(rc)));
  }

  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  // The exchange's thread only: the communicator, its stream, the batch's end, an event per
  // tensor stream of a batch.
  std::unique_ptr<NcclLocalReducer> comm_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;
  std::vector<cudaEvent_t> ready_;
};

}  // namespace

std::shared_ptr<DeviceSummer> MakeNcclDeviceSummer(int rank, int size,
                                                   std::chrono::milliseconds timeout) {
  return std::make_shared<NcclDeviceSummer>(rank, size, timeout);
}
#else
std::shared_ptr<DeviceSummer> MakeNcclDeviceSummer(int, int, std::chrono::milliseconds) {
  return nullptr;
}
#endif

}  // namespace bytecomp::worker
