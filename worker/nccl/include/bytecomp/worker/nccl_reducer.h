// Intra-machine hierarchical reduction with NCCL (BytePS's scheme): the G training processes
// of one machine form an NCCL communicator; before the push, a reduce-scatter leaves each
// local rank with the machine's sum of its shard of every tensor, and that rank alone pushes
// that shard over the network (it is the local root for it); after the pull, an all-gather
// gives every local rank the whole tensor. A variant reduces to / broadcasts from one local
// root, for tensors too small to shard.
//
// The communicator's unique id is 128 opaque bytes: local rank 0 makes one (NewUniqueId),
// the scheduler passes it to the other local ranks (LocalCommunicator, kind "nccl"), and each
// calls Create with it.
//
// The engine's hierarchical mode (worker/src/hierarchy.cc) uses the root variant: the whole
// machine's sum is at local rank 0, which alone compresses, pushes and pulls; see
// worker/local_reduce (NcclLocalReducerAdapter) for the engine-facing LocalReducer built on
// this class.
// Built only with CUDA (target bytecomp_nccl); without a GPU here it is compile-checked, and
// its host-side logic (id parsing, shard arithmetic) is unit-tested.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bytecomp/common/dtype.h"

namespace bytecomp::worker {

// Size of an NCCL unique id on the wire (NCCL_UNIQUE_ID_BYTES).
constexpr size_t kNcclUniqueIdBytes = 128;

// A new unique id, to be sent to every local rank through the scheduler.
absl::StatusOr<std::string> NewNcclUniqueId();

// The CUDA device this process would join a communicator on: its current device
// (cudaGetDevice; frameworks set it per local rank). FailedPrecondition naming CUDA's error when
// the process sees no GPU.
absl::StatusOr<int> CurrentNcclDevice();

// The slice of a tensor of `elements` that local rank `rank` of `ranks` reduces and pushes:
// equal shards of ceil(elements / ranks) (the last ones shorter or empty), so that the
// reduce-scatter and all-gather can work in place on a buffer padded to
// padded_elements = shard_elements * ranks.
struct LocalShard {
  size_t shard_elements = 0;   // the padded shard length every rank exchanges
  size_t padded_elements = 0;  // shard_elements * ranks: the buffer length the calls need
  size_t offset = 0;           // this rank's first element
  size_t elements = 0;         // this rank's real (unpadded) element count, may be 0
};
LocalShard ShardOf(size_t elements, int rank, int ranks);

class NcclLocalReducer {
 public:
  // Joins the communicator of `local_size` ranks as `local_rank`, on CUDA device `device`.
  // Blocks until every local rank has joined (ncclCommInitRank). unique_id must be
  // kNcclUniqueIdBytes bytes from NewNcclUniqueId.
  static absl::StatusOr<std::unique_ptr<NcclLocalReducer>> Create(absl::string_view unique_id,
                                                                  int local_rank, int local_size,
                                                                  int device);
  ~NcclLocalReducer();
  NcclLocalReducer(const NcclLocalReducer&) = delete;
  NcclLocalReducer& operator=(const NcclLocalReducer&) = delete;

  int local_rank() const { return rank_; }
  int local_size() const { return size_; }
  int device() const { return device_; }

  // In place on `buffer` (device memory of padded_elements = ShardOf(...).padded_elements
  // elements of dtype): afterwards this rank's shard [offset, offset + shard_elements) holds
  // the machine's sum of that shard. Enqueued on `stream` (a cudaStream_t); returns once
  // enqueued, not when done.
  absl::Status ReduceScatterInPlace(void* buffer, size_t padded_elements, DType dtype,
                                    void* stream);
  // In place: every rank's shard is gathered into the whole buffer on every rank.
  absl::Status AllGatherInPlace(void* buffer, size_t padded_elements, DType dtype, void* stream);
  // Sum into `root`'s buffer only (in place), and broadcast from it: for small tensors.
  absl::Status ReduceToRoot(void* buffer, size_t elements, DType dtype, int root, void* stream);
  absl::Status BroadcastFromRoot(void* buffer, size_t elements, DType dtype, int root,
                                 void* stream);

  // In place on `buffer` (elements of dtype, device memory): every rank's sum (average: the
  // mean, NCCL's ncclAvg). Also across machines: a communicator of a job's W workers on W hosts
  // runs over NCCL's network transport (worker/src/nccl_device_summer.cc).
  absl::Status AllReduceInPlace(void* buffer, size_t elements, DType dtype, bool average,
                                void* stream);

  // Ends the communicator at once (ncclCommAbort), its operations in flight too: for a peer
  // that will not come. Nothing may be called on the reducer afterwards but its destructor.
  void Abort();

  // Calls between GroupStart and GroupEnd are fused into one NCCL launch (many partitions).
  absl::Status GroupStart();
  absl::Status GroupEnd();

 private:
  NcclLocalReducer(void* comm, int rank, int size, int device)
      : comm_(comm), rank_(rank), size_(size), device_(device) {}
  void* comm_;  // ncclComm_t, kept opaque so this header needs no NCCL headers
  int rank_;
  int size_;
  int device_;
};

}  // namespace bytecomp::worker
