// Hierarchical mode, device tensors: the local ranks of a machine agree at set-up whether they
// form an NCCL communicator, and if so form it (after the host reducer is up; local_setup.h).
//
// Protocol, the same in every build so that engines built with and without NCCL agree:
//  1. every local rank reports over the host reducer whether it can join (a CUDA build with
//     NCCL, a visible GPU, and BYTECOMP_DEVICE_BACKEND not "emulated"); one flag per rank;
//  2. the local root, if all can, makes an NCCL unique id and sends it to the scheduler
//     (LocalCommunicator kind "nccl"), which relays it; it then broadcasts OK, or the reason
//     why the machine has no NCCL communicator (which local ranks cannot join);
//  3. on OK every local rank joins the communicator on its current CUDA device
//     (ncclCommInitRank, collective: all reach it, since all said they could) and wraps it in
//     an NcclLocalReducerAdapter whose control plane is the host reducer (tags kept apart).
// Every wait is bounded by connect_timeout_ms and keeps heartbeating. Communicator set-up
// happens here rather than with the first device tensor so that no training thread blocks in
// a collective init, and a machine where one rank lacks a GPU gets an error on every rank
// instead of a hang; the cost: a GPU machine's hierarchical job makes the communicator even
// if it only ever pushes host tensors.
#pragma once

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bytecomp/common/scheduler_client.h"
#include "control.pb.h"
#include "local_reducer.h"

namespace bytecomp::worker {

struct DeviceReducer {
  std::unique_ptr<LocalReducer> reducer;  // null when the machine has no NCCL communicator
  int device = -1;                        // the CUDA device the communicator is on
  absl::Status unavailable;               // why reducer is null (for device tensors' errors)
};

// `host`: the started host reducer of this machine (it must outlive the result's reducer).
// Errors (the rendezvous timed out, the scheduler ended the job, NCCL failed to initialise
// after all ranks said they could) fail the set-up; a machine that cannot use NCCL is not an
// error: the result says why in `unavailable`.
absl::StatusOr<DeviceReducer> ConnectDeviceReducer(SchedulerClient& client,
                                                   const proto::Topology& topology,
                                                   LocalReducer& host);

}  // namespace bytecomp::worker
