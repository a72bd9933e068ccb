// Set-up of a machine's local reducers: the host reducer first (its endpoint relayed through
// the scheduler), then the NCCL one over it (nccl_setup.cc).
#include "machine_setup.h"

#include "absl/strings/str_cat.h"
#include "bytecomp/common/config.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/common/transport.h"
#include "host_local_reducer.h"

namespace bytecomp::worker {

absl::Status ServeScheduler(SchedulerClient& client, int wait_ms,
                            std::optional<proto::LocalCommunicator>* comm) {
  client.HeartbeatIfDue();
  if (absl::Status heard = client.CheckSchedulerHeard(); !heard.ok()) return heard;
  for (int timeout = wait_ms;; timeout = 0) {
    absl::StatusOr<std::optional<proto::ControlMessage>> got = client.Receive(timeout);
    if (!got.ok()) return got.status();
    if (!got->has_value()) return absl::OkStatus();
    const proto::ControlMessage& m = **got;
    if (m.has_heartbeat()) continue;  // the scheduler's: it is alive
    if (m.has_local_communicator() && comm != nullptr) {
      *comm = m.local_communicator();
    } else if (m.has_shutdown()) {
      return absl::CancelledError(
          absl::StrCat("the scheduler shut the job down: ", m.shutdown().reason()));
    } else if (m.has_node_failed()) {
      return absl::UnavailableError(absl::StrCat(proto::Role_Name(m.node_failed().node().role()),
                                                 " ", m.node_failed().node().rank(),
                                                 " failed: ", m.node_failed().reason()));
    } else if (m.has_error()) {
      return absl::FailedPreconditionError(absl::StrCat("scheduler: ", m.error().message()));
    } else {
      BC_LOG_WARNING("hierarchical set-up: ignoring an unexpected control message");
    }
  }
}

absl::StatusOr<std::unique_ptr<LocalReducer>> ConnectHostReducer(zmq::context_t& context,
                                                                 SocketSecurity& security,
                                                                 SchedulerClient& client,
                                                                 const proto::Topology& topology) {
  const int local_rank = topology.local_rank();
  const int local_size = topology.local_size();
  if (!topology.config().hierarchical() || local_size < 2) return std::unique_ptr<LocalReducer>();
  const int64_t timeout_ms = client.config().connect_timeout_ms();
  const int64_t deadline = MonotonicMs() + timeout_ms;
  auto tick = [&client]() { return ServeScheduler(client, 0, nullptr); };
  if (local_rank == 0) {
    absl::StatusOr<std::unique_ptr<LoopbackReducer>> root = LoopbackReducer::Listen(
        context, local_size, LocalReduceSocketLimits(WithClusterDefaults(topology.config())),
        &security);
    if (!root.ok()) return root.status();
    proto::ControlMessage announce;
    announce.mutable_local_communicator()->set_kind("host");
    announce.mutable_local_communicator()->set_id((*root)->endpoint());
    if (absl::Status s = client.Send(announce); !s.ok()) return s;
    if (absl::Status s = (*root)->AcceptAll(timeout_ms, tick); !s.ok()) return s;
    (*root)->Start();
    BC_LOG_INFO("local root of ", local_size, " workers on this machine (", (*root)->endpoint(),
                ")");
    return std::unique_ptr<LocalReducer>(std::move(*root));
  }
  std::optional<proto::LocalCommunicator> comm;
  while (!comm.has_value()) {
    if (MonotonicMs() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("local rank ", local_rank, " of ", local_size,
                       ": no local communicator from the local root (worker ",
                       topology.local_root(), ") within ", timeout_ms / 1000.0, " s"));
    }
    if (absl::Status s = ServeScheduler(client, 100, &comm); !s.ok()) return s;
  }
  if (comm->kind() != "host") {
    return absl::FailedPreconditionError(
        absl::StrCat("the local root (worker ", topology.local_root(), ") opened a '", comm->kind(),
                     "' local communicator; this worker reduces host memory ('host')"));
  }
  absl::StatusOr<std::unique_ptr<LoopbackReducer>> member = LoopbackReducer::Join(
      context, comm->id(), local_rank, local_size, std::max<int64_t>(1, deadline - MonotonicMs()),
      tick, LocalReduceSocketLimits(WithClusterDefaults(topology.config())), &security);
  if (!member.ok()) return member.status();
  (*member)->Start();
  return std::unique_ptr<LocalReducer>(std::move(*member));
}

absl::StatusOr<MachineReducers> ConnectMachineReducers(zmq::context_t& context,
                                                       SocketSecurity& security,
                                                       SchedulerClient& client,
                                                       const proto::Topology& topology) {
  MachineReducers out;
  absl::StatusOr<std::unique_ptr<LocalReducer>> host =
      ConnectHostReducer(context, security, client, topology);
  if (!host.ok()) return host.status();
  out.host = *std::move(host);
  if (out.host == nullptr) return out;
  absl::StatusOr<DeviceReducer> device = ConnectDeviceReducer(client, topology, *out.host);
  if (!device.ok()) return device.status();
  out.device = *std::move(device);
  return out;
}

void MachineReducers::Fail(const absl::Status& reason) {
  if (host != nullptr) host->Fail(reason);
  if (device.reducer != nullptr) device.reducer->Fail(reason);
}

void MachineReducers::Stop() {
  if (host != nullptr) host->Stop();  // its callbacks still see the NCCL adapter
  if (device.reducer != nullptr) device.reducer->Stop();
  device.reducer.reset();
  host.reset();
}

bool DeviceReductionBuilt() { return BYTECOMP_HAVE_NCCL != 0; }

}  // namespace bytecomp::worker
