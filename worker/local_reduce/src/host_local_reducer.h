// The host local reducer (bytecomp/worker/local_reducer.h: HostLocalReducer): its ZeroMQ
// socket, owned by its I/O thread once started, and the root's and the other ranks' pending
// collectives.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "bytecomp/common/socket_limits.h"
#include "bytecomp/worker/local_reducer.h"
#include "bytecomp/worker/wake_queue.h"
#include "zmq.hpp"

namespace bytecomp::worker {

class LoopbackReducer final : public HostLocalReducer {
 public:
  // The root (local rank 0 of local_size): binds 127.0.0.1 on an ephemeral port. `limits`:
  // the socket's (LocalReduceSocketLimits of the job; the default bounds only the queues);
  // `security`: the job's cluster key (CURVE), if any.
  static absl::StatusOr<std::unique_ptr<LoopbackReducer>> Listen(
      zmq::context_t& context, int local_size, const SocketLimits& limits = {},
      SocketSecurity* security = nullptr);
  // A non-root local rank: connects to the root's endpoint and waits for its WELCOME.
  static absl::StatusOr<std::unique_ptr<LoopbackReducer>> Join(
      zmq::context_t& context, const std::string& endpoint, int local_rank, int local_size,
      int64_t timeout_ms, const Tick& tick, const SocketLimits& limits = {},
      const SocketSecurity* security = nullptr);
  ~LoopbackReducer() override;

  // The root's endpoint (tcp://127.0.0.1:port), to relay to the other local ranks.
  const std::string& endpoint() const override { return endpoint_; }
  // The root: waits for every other local rank's HELLO, then welcomes them all.
  absl::Status AcceptAll(int64_t timeout_ms, const Tick& tick) override;
  // Starts the I/O thread; call once, after the setup.
  void Start() override;

  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  void Reduce(const std::string& tag, void* buffer, int64_t elements, proto::DType dtype,
              Done done) override;
  void Broadcast(const std::string& tag, void* buffer, int64_t elements, proto::DType dtype,
                 absl::Status root_status, Done done) override;
  void Fail(const absl::Status& reason) override;
  void Stop() override;

 private:
  struct Call {
    bool broadcast = false;
    std::string tag;
    void* buffer = nullptr;
    int64_t elements = 0;
    proto::DType dtype = proto::DTYPE_FLOAT32;
    absl::Status root_status;
    Done done;
  };
  struct FailCall {
    absl::Status reason;
  };
  struct StopCall {};
  using Command = std::variant<Call, FailCall, StopCall>;
  // The root's view of one tag's reduction.
  struct Collect {
    std::optional<Call> own;
    std::map<int, std::vector<zmq::message_t>> contributions;  // by local rank: header, payload
  };

  LoopbackReducer(zmq::context_t& context, int local_rank, int local_size,
                  const SocketLimits& limits);
  void Run();
  void Handle(Call call);
  void HandleMessage(std::vector<zmq::message_t>& frames);
  // By value: callers pass the tag of the entry this erases (found by ThreadSanitizer as a
  // use after free in the error message).
  void TryFinishReduce(std::string tag);
  void FailAll(const absl::Status& reason);
  absl::Status SendTo(int local_rank, std::vector<zmq::message_t>& frames);

  const int local_rank_;
  const int local_size_;
  // No mutex: the set-up thread owns the socket and the state below until Start(), the I/O
  // thread from then on, and Stop() again once it has joined that thread. Other threads only
  // push to queue_ and read stopped_.
  zmq::socket_t socket_;
  std::string endpoint_;
  std::vector<std::string> peer_identity_;  // root: routing id of each local rank
  WakeQueue<Command> queue_;
  std::thread thread_;
  std::atomic<bool> stopped_{false};
  absl::Status failed_;  // the I/O thread's: set once, every later call fails with it
  std::map<std::string, Collect> collecting_;                 // root, by tag
  std::map<std::string, Call> waiting_;                       // non-root broadcasts, by tag
  std::map<std::string, std::vector<zmq::message_t>> early_;  // non-root results before the call
};

}  // namespace bytecomp::worker
