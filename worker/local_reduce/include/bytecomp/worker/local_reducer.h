// The local reducers of hierarchical mode: reduction among the training processes of one
// machine. The local ranks sum a tensor into local rank 0 (the local root), which alone talks
// to the servers, and the root hands the result back.
//
// Collectives are matched by tag (tensor name and round), not by call order: the training
// processes of a machine may call push_pull for different tensors in different orders.
// Implementations: the host local reducer (host memory, loopback TCP between the processes)
// and, with CUDA and NCCL, an adapter over worker/nccl's NcclLocalReducer (device memory;
// compile-checked only), which the engine uses for CUDA device tensors.
//
// ConnectMachineReducers makes both at set-up (the door the engine uses); HostLocalReducer's
// factories are the host reducer's own door (its unit test uses them).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bytecomp/common/scheduler_client.h"
#include "bytecomp/common/socket_security.h"
#include "control.pb.h"
#include "data.pb.h"
#include "zmq.hpp"

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
  virtual void Broadcast(const std::string& tag, void* buffer, int64_t elements, proto::DType dtype,
                         absl::Status root_status, Done done) = 0;
  // Fails every pending call and every later one with `reason` (a local rank or the job failed).
  virtual void Fail(const absl::Status& reason) = 0;
  // Fails what is pending and stops; every callback has run when it returns (including those
  // of calls the callbacks made). Later calls fail at once.
  virtual void Stop() = 0;
};

// LocalReducer for host memory: the local ranks of a machine exchange tensors with the local
// root over loopback TCP (ZeroMQ; the root binds a ROUTER on 127.0.0.1, every other local rank
// connects a DEALER). Every local rank sends its whole tensor to the root, which sums; the root
// sends the result back. (For G processes this moves (G-1) tensors each way through the root:
// a CPU machine's network traffic drops by G at the price of loopback copies.)
//
// Setup, all bounded by a timeout: the root Listen()s and its endpoint is relayed to the others
// through the scheduler (LocalCommunicator); each other rank Join()s (connects, says HELLO);
// the root's AcceptAll() waits for every HELLO and answers WELCOME. A `tick` callback runs at
// least every 100 ms while waiting (heartbeats; a non-OK return aborts the wait).
//
// After Start(), one thread owns the socket; calls from other threads are queued to it.
// A local rank that dies is noticed through the scheduler (heartbeats), which fails the engine
// and through it this reducer (Fail).
class HostLocalReducer : public LocalReducer {
 public:
  using Tick = std::function<absl::Status()>;

  // The root (local rank 0 of local_size): binds 127.0.0.1 on an ephemeral port. With a keyed
  // `security` (the cluster key of `context`; it must outlive the reducer) the socket speaks
  // CURVE and admits only key holders; null or unkeyed: plain TCP. With `security`, keyed or
  // not, connections beyond LocalReduceConnectionCaps are cut as they are accepted.
  static absl::StatusOr<std::unique_ptr<HostLocalReducer>> Listen(
      zmq::context_t& context, int local_size, SocketSecurity* security = nullptr);
  // A non-root local rank: connects to the root's endpoint and waits for its WELCOME.
  static absl::StatusOr<std::unique_ptr<HostLocalReducer>> Join(
      zmq::context_t& context, const std::string& endpoint, int local_rank, int local_size,
      int64_t timeout_ms, const Tick& tick, const SocketSecurity* security = nullptr);

  // The root's endpoint (tcp://127.0.0.1:port), to relay to the other local ranks.
  virtual const std::string& endpoint() const = 0;
  // The root: waits for every other local rank's HELLO, then welcomes them all.
  virtual absl::Status AcceptAll(int64_t timeout_ms, const Tick& tick) = 0;
  // Starts the I/O thread; call once, after the setup.
  virtual void Start() = 0;
};

// The NCCL reducer for device tensors, or why this machine has none.
struct DeviceReducer {
  std::unique_ptr<LocalReducer> reducer;  // null when the machine has no NCCL communicator
  int device = -1;                        // the CUDA device the communicator is on
  absl::Status unavailable;               // why reducer is null (for device tensors' errors)
};

// A worker's local reducers, made at set-up.
struct MachineReducers {
  // Null when this worker does not reduce locally (not hierarchical, or alone on its machine).
  std::unique_ptr<LocalReducer> host;
  // With `host`: the reducer of CUDA device tensors.
  DeviceReducer device;

  // Fails both (a local rank or the job failed).
  void Fail(const absl::Status& reason);
  // Stops both: the host reducer first, since its callbacks include the NCCL adapter's
  // control plane's; then releases them (their sockets close before the context ends).
  void Stop();
};

// With topology.config().hierarchical and local_size > 1: the local root opens a host reducer
// and sends its endpoint to the scheduler; the other local ranks wait for it and join. Then the
// local ranks agree whether they form an NCCL communicator for device tensors, and if so form
// it (the protocol: local_reduce/README.md). Every wait is bounded by connect_timeout_ms and
// keeps heartbeating; a Shutdown, NodeFailed or Error from the scheduler meanwhile ends it with
// that reason. Runs on the thread that registered, before the engine's threads start.
// `security`: the cluster key of `context` (or none), for the host reducer's sockets.
absl::StatusOr<MachineReducers> ConnectMachineReducers(zmq::context_t& context,
                                                       SocketSecurity& security,
                                                       SchedulerClient& client,
                                                       const proto::Topology& topology);

// Whether this build reduces CUDA device tensors (built with CUDA and NCCL).
bool DeviceReductionBuilt();

}  // namespace bytecomp::worker
