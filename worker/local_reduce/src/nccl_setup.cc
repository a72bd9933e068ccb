// Hierarchical mode, device tensors: the local ranks of a machine agree at set-up whether they
// form an NCCL communicator, and if so form it (after the host reducer is up; host_setup.cc).
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
#include "machine_setup.h"

#include <chrono>
#include <cstdlib>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/common/transport.h"

#if BYTECOMP_HAVE_NCCL
#include "bytecomp/worker/nccl_reducer.h"
#include "nccl_local_reducer.h"
#endif

namespace bytecomp::worker {
namespace {

// Set-up precedes every tensor, so this tag meets no tensor's ("name@round").
constexpr char kRendezvousTag[] = "\x01nccl-setup";

// The CUDA device this rank would use, or why it cannot join a communicator.
absl::StatusOr<int> NcclDeviceOrWhyNot() {
#if BYTECOMP_HAVE_NCCL
  if (const char* b = std::getenv("BYTECOMP_DEVICE_BACKEND");
      b != nullptr && std::string(b) == "emulated") {
    return absl::FailedPreconditionError(
        "its device is emulated (BYTECOMP_DEVICE_BACKEND=emulated)");
  }
  return CurrentNcclDevice();
#else
  return absl::FailedPreconditionError("this engine was built without CUDA and NCCL");
#endif
}

// Waits for `done` while serving the scheduler, until deadline; LocalCommunicators that arrive
// meanwhile are kept in *comm.
absl::Status AwaitCall(std::future<absl::Status>& done, SchedulerClient& client, int64_t deadline,
                       const std::string& what, std::optional<proto::LocalCommunicator>* comm) {
  while (done.wait_for(std::chrono::milliseconds(0)) != std::future_status::ready) {
    if (MonotonicMs() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": no answer within the connect timeout"));
    }
    if (absl::Status s = ServeScheduler(client, 50, comm); !s.ok()) return s;
  }
  return done.get();
}

// A call's completion as a future (the host reducer calls back on its own thread).
std::pair<LocalReducer::Done, std::future<absl::Status>> Completion() {
  auto promise = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> future = promise->get_future();
  return {[promise](absl::Status s) { promise->set_value(s); }, std::move(future)};
}

#if BYTECOMP_HAVE_NCCL
// The host reducer seen by the NCCL adapter: the engine keeps owning, failing and stopping it;
// the adapter's tags get a prefix no tensor name starts with.
class SharedControlPlane : public LocalReducer {
 public:
  explicit SharedControlPlane(LocalReducer& host) : host_(host) {}
  int local_rank() const override { return host_.local_rank(); }
  int local_size() const override { return host_.local_size(); }
  void Reduce(const std::string& tag, void* buffer, int64_t elements, proto::DType dtype,
              Done done) override {
    host_.Reduce(absl::StrCat("\x01nccl/", tag), buffer, elements, dtype, std::move(done));
  }
  void Broadcast(const std::string& tag, void* buffer, int64_t elements, proto::DType dtype,
                 absl::Status root_status, Done done) override {
    host_.Broadcast(absl::StrCat("\x01nccl/", tag), buffer, elements, dtype, std::move(root_status),
                    std::move(done));
  }
  void Fail(const absl::Status&) override {}
  void Stop() override {}

 private:
  LocalReducer& host_;
};
#endif

}  // namespace

absl::StatusOr<DeviceReducer> ConnectDeviceReducer(SchedulerClient& client,
                                                   const proto::Topology& topology,
                                                   LocalReducer& host) {
  const int local_rank = host.local_rank();
  const int local_size = host.local_size();
  const int64_t deadline = MonotonicMs() + client.config().connect_timeout_ms();
  const absl::StatusOr<int> device = NcclDeviceOrWhyNot();
  // 1. One flag per local rank: 1 where that rank cannot join.
  auto flags = std::make_shared<std::vector<float>>(local_size, 0.0f);
  if (!device.ok()) (*flags)[local_rank] = 1.0f;
  auto [reduced, reduce_done] = Completion();
  host.Reduce(kRendezvousTag, flags->data(), local_size, proto::DTYPE_FLOAT32,
              [flags, reduced = std::move(reduced)](absl::Status s) mutable { reduced(s); });
  std::optional<proto::LocalCommunicator> comm;
  absl::Status agreed;
  std::string id;
  if (local_rank == 0) {
    if (absl::Status s =
            AwaitCall(reduce_done, client, deadline, "NCCL set-up (local ranks' reports)", nullptr);
        !s.ok()) {
      return s;
    }
    std::vector<int> cannot;
    for (int r = 0; r < local_size; ++r) {
      if ((*flags)[r] != 0.0f) cannot.push_back(r);
    }
    if (!cannot.empty()) {
      agreed = absl::FailedPreconditionError(absl::StrCat(
          "local rank", cannot.size() == 1 ? " " : "s ", absl::StrJoin(cannot, ", "),
          " of this machine cannot join an NCCL communicator",
          device.ok() ? "" : absl::StrCat(" (local rank 0: ", device.status().message(), ")")));
    }
#if BYTECOMP_HAVE_NCCL
    if (agreed.ok()) {
      absl::StatusOr<std::string> made = NewNcclUniqueId();
      if (!made.ok()) {
        agreed = absl::FailedPreconditionError(absl::StrCat(
            "the local root could not make an NCCL unique id: ", made.status().message()));
      } else {
        id = *std::move(made);
        proto::ControlMessage announce;
        announce.mutable_local_communicator()->set_kind("nccl");
        announce.mutable_local_communicator()->set_id(id);
        if (absl::Status s = client.Send(announce); !s.ok()) return s;
      }
    }
#endif
  }
  // 2. The root's verdict.
  auto [sent, broadcast_done] = Completion();
  host.Broadcast(kRendezvousTag, flags->data(), local_size, proto::DTYPE_FLOAT32, agreed,
                 [flags, sent = std::move(sent)](absl::Status s) mutable { sent(s); });
  absl::Status verdict =
      AwaitCall(broadcast_done, client, deadline, "NCCL set-up (the local root's verdict)", &comm);
  if (local_rank == 0) verdict = agreed;  // the root's own call reports only the sending
  DeviceReducer out;
  if (!verdict.ok()) {
    if (verdict.code() != absl::StatusCode::kFailedPrecondition)
      return verdict;  // a failure, not a "no"
    out.unavailable = absl::FailedPreconditionError(absl::StrCat(
        "this machine's local ranks formed no NCCL communicator at set-up: ", verdict.message(),
        local_rank == 0 || device.ok()
            ? ""
            : absl::StrCat("; this process: ", device.status().message())));
    BC_LOG_INFO(out.unavailable.message());
    return out;
  }
#if BYTECOMP_HAVE_NCCL
  // 3. Every rank can: join on this rank's device.
  while (local_rank != 0 && !(comm.has_value() && comm->kind() == "nccl")) {
    if (MonotonicMs() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "local rank ", local_rank, ": no NCCL unique id from the local root (worker ",
          topology.local_root(), ") within the connect timeout"));
    }
    if (absl::Status s = ServeScheduler(client, 100, &comm); !s.ok()) return s;
  }
  if (local_rank != 0) id = comm->id();
  // ncclCommInitRank blocks until every rank has joined: on its own thread, so that this one
  // keeps heartbeating and gives up at the deadline (leaving that thread behind: the set-up
  // has failed and the process is expected to exit).
  auto joined = std::make_shared<std::promise<absl::StatusOr<std::unique_ptr<NcclLocalReducer>>>>();
  std::future<absl::StatusOr<std::unique_ptr<NcclLocalReducer>>> joining = joined->get_future();
  std::thread joiner([joined, id, local_rank, local_size, d = *device] {
    joined->set_value(NcclLocalReducer::Create(id, local_rank, local_size, d));
  });
  while (joining.wait_for(std::chrono::milliseconds(0)) != std::future_status::ready) {
    absl::Status s =
        MonotonicMs() >= deadline
            ? absl::DeadlineExceededError(absl::StrCat("local rank ", local_rank,
                                                       ": ncclCommInitRank did not finish within "
                                                       "the connect timeout"))
            : ServeScheduler(client, 100, nullptr);
    if (!s.ok()) {
      joiner.detach();
      return s;
    }
  }
  joiner.join();
  absl::StatusOr<std::unique_ptr<NcclLocalReducer>> nccl = joining.get();
  if (!nccl.ok()) return nccl.status();
  absl::StatusOr<std::unique_ptr<NcclLocalReducerAdapter>> adapter =
      NcclLocalReducerAdapter::Create(std::make_unique<SharedControlPlane>(host), *std::move(nccl),
                                      *device);
  if (!adapter.ok()) return adapter.status();
  BC_LOG_INFO("local rank ", local_rank, " of ", local_size, ": NCCL communicator on CUDA device ",
              *device);
  out.reducer = *std::move(adapter);
  out.device = *device;
  return out;
#else
  (void)topology;
  return absl::InternalError("NCCL set-up agreed in a build without NCCL");
#endif
}

}  // namespace bytecomp::worker
