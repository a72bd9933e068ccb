#include "local_setup.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/common/transport.h"
#include "host_local_reducer.h"

namespace bytecomp::worker {
namespace {

absl::Status EnvInt(const char* name, std::optional<int>* out) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return absl::OkStatus();
  int parsed = 0;
  if (!absl::SimpleAtoi(v, &parsed)) {
    return absl::InvalidArgumentError(absl::StrCat(name, "='", v, "' is not an integer"));
  }
  *out = parsed;
  return absl::OkStatus();
}

}  // namespace

absl::Status ServeScheduler(SchedulerClient& client, int wait_ms,
                            std::optional<proto::LocalCommunicator>* comm) {
  client.HeartbeatIfDue();
  for (int timeout = wait_ms;; timeout = 0) {
    absl::StatusOr<std::optional<proto::ControlMessage>> got = client.Receive(timeout);
    if (!got.ok()) return got.status();
    if (!got->has_value()) return absl::OkStatus();
    const proto::ControlMessage& m = **got;
    if (m.has_local_communicator() && comm != nullptr) {
      *comm = m.local_communicator();
    } else if (m.has_shutdown()) {
      return absl::CancelledError(
          absl::StrCat("the scheduler shut the job down: ", m.shutdown().reason()));
    } else if (m.has_node_failed()) {
      return absl::UnavailableError(absl::StrCat(
          proto::Role_Name(m.node_failed().node().role()), " ", m.node_failed().node().rank(),
          " failed: ", m.node_failed().reason()));
    } else if (m.has_error()) {
      return absl::FailedPreconditionError(absl::StrCat("scheduler: ", m.error().message()));
    } else {
      BC_LOG_WARNING("hierarchical set-up: ignoring an unexpected control message");
    }
  }
}

absl::StatusOr<Placement> PlacementFromEnv() {
  Placement p;
  if (const char* m = std::getenv("BYTECOMP_MACHINE"); m != nullptr) p.machine = m;
  if (absl::Status s = EnvInt("BYTECOMP_LOCAL_RANK", &p.local_rank); !s.ok()) return s;
  if (absl::Status s = EnvInt("BYTECOMP_LOCAL_SIZE", &p.local_size); !s.ok()) return s;
  return p;
}

absl::StatusOr<std::unique_ptr<LocalReducer>> ConnectLocalReducer(zmq::context_t& context,
                                                                  SchedulerClient& client,
                                                                  const proto::Topology& topology) {
  const int local_rank = topology.local_rank();
  const int local_size = topology.local_size();
  if (!topology.config().hierarchical() || local_size < 2) return std::unique_ptr<LocalReducer>();
  const int64_t timeout_ms = client.config().connect_timeout_ms();
  const int64_t deadline = MonotonicMs() + timeout_ms;
  auto tick = [&client]() { return ServeScheduler(client, 0, nullptr); };
  if (local_rank == 0) {
    absl::StatusOr<std::unique_ptr<HostLocalReducer>> root = HostLocalReducer::Listen(context, local_size);
    if (!root.ok()) return root.status();
    proto::ControlMessage announce;
    announce.mutable_local_communicator()->set_kind("host");
    announce.mutable_local_communicator()->set_id((*root)->endpoint());
    if (absl::Status s = client.Send(announce); !s.ok()) return s;
    if (absl::Status s = (*root)->AcceptAll(timeout_ms, tick); !s.ok()) return s;
    (*root)->Start();
    BC_LOG_INFO("local root of ", local_size, " workers on this machine (", (*root)->endpoint(), ")");
    return std::unique_ptr<LocalReducer>(std::move(*root));
  }
  std::optional<proto::LocalCommunicator> comm;
  while (!comm.has_value()) {
    if (MonotonicMs() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "local rank ", local_rank, " of ", local_size, ": no local communicator from the local root (worker ",
          topology.local_root(), ") within ", timeout_ms / 1000.0, " s"));
    }
    if (absl::Status s = ServeScheduler(client, 100, &comm); !s.ok()) return s;
  }
  if (comm->kind() != "host") {
    return absl::FailedPreconditionError(absl::StrCat(
        "the local root (worker ", topology.local_root(), ") opened a '", comm->kind(),
        "' local communicator; this worker reduces host memory ('host')"));
  }
  absl::StatusOr<std::unique_ptr<HostLocalReducer>> member = HostLocalReducer::Join(
      context, comm->id(), local_rank, local_size, std::max<int64_t>(1, deadline - MonotonicMs()), tick);
  if (!member.ok()) return member.status();
  (*member)->Start();
  return std::unique_ptr<LocalReducer>(std::move(*member));
}

}  // namespace bytecomp::worker
