#include "nccl_device_summer.h"

#if BYTECOMP_HAVE_NCCL
#include <cuda_runtime_api.h>

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bytecomp/worker/nccl_reducer.h"
#endif

namespace bytecomp::worker {

#if BYTECOMP_HAVE_NCCL
namespace {

class NcclDeviceSummer final : public DeviceSummer {
 public:
  NcclDeviceSummer(int rank, int size) : rank_(rank), size_(size) {}

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
    // One launch for the batch, each sum on its tensor's stream behind its gradient's writes.
    if (absl::Status s = comm_->GroupStart(); !s.ok()) return s;
    absl::Status queued;
    for (const DeviceValues& v : items) {
      queued = comm_->AllReduceInPlace(v.data, v.count, v.dtype, v.average, v.stream);
      if (!queued.ok()) break;
    }
    if (absl::Status s = comm_->GroupEnd(); queued.ok() && !s.ok()) queued = s;
    if (!queued.ok()) return queued;
    std::set<void*> streams;
    for (const DeviceValues& v : items) streams.insert(v.stream);
    for (void* stream : streams) {
      if (cudaError_t rc = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
          rc != cudaSuccess) {
        return absl::InternalError(
            absl::StrCat("the collectives' NCCL allreduce: ", cudaGetErrorString(rc)));
      }
    }
    return absl::OkStatus();
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
    return absl::OkStatus();
  }

  const int rank_;
  const int size_;
  std::unique_ptr<NcclLocalReducer> comm_;  // the exchange's thread only
};

}  // namespace

std::shared_ptr<DeviceSummer> MakeNcclDeviceSummer(int rank, int size) {
  return std::make_shared<NcclDeviceSummer>(rank, size);
}
#else
std::shared_ptr<DeviceSummer> MakeNcclDeviceSummer(int, int) { return nullptr; }
#endif

}  // namespace bytecomp::worker
