// Reduction among the training processes of one machine (hierarchical mode): the local ranks
// sum a tensor into local rank 0 (the local root), which alone talks to the servers, and the
// root hands the result back.
//
// Collectives are matched by tag (tensor name and round), not by call order: the training
// processes of a machine may call push_pull for different tensors in different orders.
// Implementations: HostLocalReducer (host memory, loopback TCP between the processes) and, with
// CUDA and NCCL, NcclLocalReducerAdapter (device memory; compile-checked only), which the
// engine uses for CUDA device tensors (nccl_setup.h).
#pragma once

#include <cstdint>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "data.pb.h"

namespace bytecomp::worker {

class LocalReducer {
 public:
  // Runs once per call, on the reducer's own thread; it must not block for long.
  using Done = absl::AnyInvocable<void(absl::Status)>;

  virtual ~LocalReducer() = default;
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;

  // Every local rank calls this once per tag with `elements` values of `dtype`. On the root,
  // `done` runs once `buffer` holds the machine's sum (summed in fp32, in local rank order);
  // on the other ranks, once `buffer` may be reused. A mismatch (another rank's element count
  // or dtype differs) fails the root's call with an error naming the rank.
  virtual void Reduce(const std::string& tag, void* buffer, int64_t elements, proto::DType dtype,
                      Done done) = 0;
  // Every local rank calls this once per tag after Reduce. The root sends `buffer` to every
  // other local rank (or, if root_status is an error, that error) and `done` runs once sent;
  // on the other ranks `done` runs once `buffer` holds the root's values (or with the root's
  // error).
  virtual void Broadcast(const std::string& tag, void* buffer, int64_t elements,
                         proto::DType dtype, absl::Status root_status, Done done) = 0;
  // Fails every pending call and every later one with `reason` (a local rank or the job failed).
  virtual void Fail(const absl::Status& reason) = 0;
  // Fails what is pending and stops; every callback has run when it returns (including those
  // of calls the callbacks made). Later calls fail at once.
  virtual void Stop() = 0;
};

}  // namespace bytecomp::worker
