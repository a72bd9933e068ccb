// The two steps of ConnectMachineReducers (bytecomp/worker/local_reducer.h), and what both
// wait with: serving the scheduler (heartbeats, and the LocalCommunicator relays).
#pragma once

#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bytecomp/common/scheduler_client.h"
#include "bytecomp/worker/local_reducer.h"
#include "control.pb.h"
#include "zmq.hpp"

namespace bytecomp::worker {

// Heartbeats and reads what the scheduler sent, waiting at most wait_ms for a message. A
// LocalCommunicator is stored in *comm (when comm is not null); Shutdown, NodeFailed and Error
// end the set-up with that reason.
absl::Status ServeScheduler(SchedulerClient& client, int wait_ms,
                            std::optional<proto::LocalCommunicator>* comm);

// The host reducer: the local root listens and sends its endpoint to the scheduler, the other
// local ranks wait for it and join (host_setup.cc).
absl::StatusOr<std::unique_ptr<LocalReducer>> ConnectHostReducer(zmq::context_t& context,
                                                                 SocketSecurity& security,
                                                                 SchedulerClient& client,
                                                                 const proto::Topology& topology);

// The NCCL reducer for device tensors, agreed and formed over the started host reducer `host`,
// which must outlive the result's reducer (nccl_setup.cc). Errors (the rendezvous timed out,
// the scheduler ended the job, NCCL failed to initialise after all ranks said they could) fail
// the set-up; a machine that cannot use NCCL is not an error: the result says why in
// `unavailable`.
absl::StatusOr<DeviceReducer> ConnectDeviceReducer(SchedulerClient& client,
                                                   const proto::Topology& topology,
                                                   LocalReducer& host);

}  // namespace bytecomp::worker
