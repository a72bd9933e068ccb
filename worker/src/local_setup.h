// Start-up of hierarchical mode in a worker: where this process runs (environment), and the
// local communicator, whose id the local root sends through the scheduler to the other local
// ranks. Runs on the thread that registered, before the engine's threads start.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "bytecomp/common/scheduler_client.h"
#include "control.pb.h"
#include "local_reducer.h"
#include "zmq.hpp"

namespace bytecomp::worker {

struct Placement {
  std::string machine;  // empty: the hostname
  std::optional<int> local_rank;
  std::optional<int> local_size;
};

// BYTECOMP_MACHINE, BYTECOMP_LOCAL_RANK, BYTECOMP_LOCAL_SIZE (each optional); the error names
// the variable and its value.
absl::StatusOr<Placement> PlacementFromEnv();

// Heartbeats and reads what the scheduler sent, waiting at most wait_ms for a message. A
// LocalCommunicator is stored in *comm (when comm is not null); Shutdown, NodeFailed and Error
// end the set-up with that reason.
absl::Status ServeScheduler(SchedulerClient& client, int wait_ms,
                            std::optional<proto::LocalCommunicator>* comm);

// With topology.config().hierarchical and local_size > 1: the local root opens a
// HostLocalReducer and sends its endpoint to the scheduler; the other local ranks wait for
// it and join. Every wait is bounded by connect_timeout_ms and keeps heartbeating; a Shutdown,
// NodeFailed or Error from the scheduler meanwhile ends it with that reason. Returns null when
// the worker does not reduce locally.
absl::StatusOr<std::unique_ptr<LocalReducer>> ConnectLocalReducer(zmq::context_t& context,
                                                                  SchedulerClient& client,
                                                                  const proto::Topology& topology);

}  // namespace bytecomp::worker
