// The collectives' DeviceSummer over NCCL (collective_exchange.h): device tensors whose plan
// is an uncompressed allreduce are summed in place on their GPUs instead of through a pinned
// host copy and gloo. One communicator of the job's W workers, formed at the first batch with
// device values: worker 0's unique id goes to the others over the exchange's gloo mesh, every
// worker joins on the device of that batch's first item; across machines NCCL runs over its
// network transport (sockets; InfiniBand where present). The sums run on the communicator's
// own stream, each after an event behind its gradient's writes on the tensor's stream, so the
// training stream does not wait for the network (as DDP's NCCL stream); a batch not done within
// `timeout` (a peer gone: NCCL itself has no timeout) aborts the communicator (ncclCommAbort)
// and fails, which ends the collectives with that reason.
//
// Null from a build without NCCL: device tensors then take the pinned copy. Built with CUDA and
// NCCL (worker/nccl); no GPU runs in CI, so this is compile-checked here and run by
// deploy/gpu_check.sh on a GPU machine.
#pragma once

#include <chrono>
#include <memory>

#include "collective_exchange.h"

namespace bytecomp::worker {

std::shared_ptr<DeviceSummer> MakeNcclDeviceSummer(int rank, int size,
                                                   std::chrono::milliseconds timeout);

}  // namespace bytecomp::worker
