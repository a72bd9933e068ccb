// The data I/O thread: owns the DEALER sockets to the servers (C connections each). It takes
// partitions from the other threads (data_commands.h), sends each as a push and, right behind
// it on the same connection, its pull, in priority order within an in-flight budget per server;
// it hands pull replies to the operation's stages and reports the events it owns to the
// operation tracker.
//
// Server failover (ServerFailoverOn): the loop keeps, per key, the result of the last round it
// completed (the pull reply's buffer, shared: no copy). When a replacement takes a lost
// server's rank over (ReconnectServer), the loop connects to it, sends each of that server's
// keys its kept result as a replay (DataHeader.replay: "this is where I stand, and what that
// round gave"), then every push and pull the lost server had not answered, in their order
// (the server's key_resume.h says how the replacement resumes).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <queue>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "bytecomp/common.h"
#include "bytecomp/worker/engine/held_payloads.h"
#include "bytecomp/worker/engine/operation_tracker.h"
#include "bytecomp/worker/wake_queue.h"
#include "control.pb.h"
#include "control_loop.h"
#include "data_commands.h"
#include "stage_pipeline.h"

namespace bytecomp::worker {

class DataLoop {
 public:
  // What the loop uses, all owned by the engine and outliving the loop.
  struct Wiring {
    const proto::ClusterConfig* config = nullptr;  // connections, budget, link probes
    const proto::Topology* topology = nullptr;     // the servers' data addresses
    zmq::context_t* context = nullptr;
    const SocketSecurity* security = nullptr;  // the cluster key (or none) for the DEALERs
    int rank = 0;
    NodeToken token;  // carried by every push and pull: the server checks it
    WakeQueue<DataCommand>* commands = nullptr;
    WakeQueue<ControlCommand>* to_control = nullptr;  // the link probe report
    OperationTracker* tracker = nullptr;
    TrafficCounters* traffic = nullptr;
    telemetry::Timeline* timeline = nullptr;  // null: no timeline
  };
  explicit DataLoop(Wiring wiring) : w_(wiring) {}
  // Until StopData: connects, probes the links, then moves partitions.
  void Run();

 private:
  struct PartitionTask {
    std::shared_ptr<Operation> op;
    std::shared_ptr<EncodedPush> encoded;  // null: uncompressed, zero-copy from host_data()
    int64_t partition = 0;
    int priority = 0;
    uint64_t sequence = 0;
    bool resend = false;  // to a replacement server: an uncompressed payload is copied
    bool operator<(const PartitionTask& other) const {
      if (priority != other.priority) return priority < other.priority;  // max-heap on priority
      return sequence > other.sequence;                                   // then FIFO
    }
  };
  struct InFlight {
    std::shared_ptr<Operation> op;
    std::shared_ptr<EncodedPush> encoded;  // as in PartitionTask
    int priority = 0;
    uint64_t sequence = 0;
    int64_t partition = 0;
    uint32_t stage = 0;
    bool aborted = false;  // an abort was pushed: the op holds its error, no result will come
    int server = 0;
    int64_t bytes = 0;  // push bytes not yet acknowledged by the server
    int64_t sent_us = 0;  // with a timeline: when the push went out
    bool unacked = false;  // counted in inflight_pushes_
    zmq::socket_t* socket = nullptr;  // the connection of the push and its pull
    bool pull_sent = false;           // counted in inflight_pulls_
    zmq::message_t pull;              // the pull, until sent (deferred_pulls_)
  };

  // Server failover: per key, the result of the last round this worker completed.
  struct Completed {
    int server = 0;
    proto::DataHeader header;  // the replay to send: round, stage, version, the result's codec
    zmq::message_t payload;    // the pull reply's buffer, shared
  };

  void Connect();
  // Opens the connections to server `server` at `address` (replacing any it had).
  void ConnectServer(int server, const std::string& address);
  // Server failover: a replacement holds `server`'s keys at `address` (see above).
  void Reconnect(int server, const std::string& address, uint64_t epoch);
  // Server failover without a replacement: the keys' new servers (see above).
  void Move(const MoveKeys& move);
  // The server holding the op's partition: its layout's, unless it moved (Move).
  int ServerOf(const Operation& op, int64_t partition) const;
  // Sends the key's kept result to `server` as a replay; false (and everything failed) when
  // the send fails.
  bool Replay(uint64_t key, const Completed& kept, int server);
  // Keeps the result of a round this worker completed, for a replacement server.
  void KeepCompleted(const InFlight& done, const proto::DataHeader& reply,
                     const zmq::message_t& payload);
  // Before the first push: measures each server's link and reports it (link_probes.cc).
  void ProbeLinks();
  void Take(DataCommand& command, bool* stop);
  void SendReady();
  void Send(const PartitionTask& task);
  void SendAbort(const Operation& op, int64_t partition, uint32_t stage, const std::string& why);
  // Sends the request's pull now if the server's pulls in flight allow, else defers it.
  void SendOrDeferPull(uint64_t request, InFlight& in);
  // Sends deferred pulls of `server` while its pulls in flight allow.
  void SendDeferredPulls(int server);
  // The request is answered (or failed): its counts are freed.
  void Finished(const InFlight& in);
  proto::DataHeader HeaderFor(const Operation& op, int64_t partition, uint32_t stage) const;
  void HandleReply(int server, std::vector<zmq::message_t>& frames);
  // Fails everything queued and in flight and closes the sockets; later work fails at once.
  void FailAll(const absl::Status& reason);

  const Wiring w_;
  std::vector<std::vector<zmq::socket_t>> sockets_;  // [server][connection]
  bool sockets_changed_ = false;  // the poll items must be built again
  std::vector<uint64_t> epochs_;   // per server: DataHeader.server_epoch
  absl::flat_hash_map<uint64_t, Completed> completed_;
  absl::flat_hash_map<uint64_t, int> moved_;  // key -> the server holding it, after a Move
  std::vector<int64_t> inflight_bytes_;
  int64_t budget_bytes_ = 0;
  // Pushes sent and not yet acknowledged, per server, at most kMaxInflightPushesPerServer: with
  // their pulls, fewer messages than a socket queues (kDataQueueMessages), so a send never
  // blocks the thread that must read the replies, and the server never has to drop one.
  std::vector<int> inflight_pushes_;
  static constexpr int kMaxInflightPushesPerServer = 4096;
  // Pulls sent and not yet answered, per server, at most kMaxInflightPullsPerServer; the others
  // wait here, in order, until answers come (every key's round completes once all workers
  // pushed, and pushes never wait for pulls, so they all do). With the pushes' acks, a worker
  // never has more replies due on a connection than the server's queue holds for it: the
  // server need not drop one however slowly this thread reads. (The price: a worker that waits
  // for one result before pushing what the others wait for, with this many pulls pending on
  // one server, waits behind its own pulls.)
  std::vector<int> inflight_pulls_;
  std::vector<std::deque<uint64_t>> deferred_pulls_;  // request ids
  static constexpr int kMaxInflightPullsPerServer = 4096;
  static_assert(kMaxInflightPushesPerServer + kMaxInflightPullsPerServer <= kDataQueueMessages / 2,
                "the replies due to a worker must fit in the server's queue for it");
  std::vector<std::priority_queue<PartitionTask>> queues_;  // per server
  absl::flat_hash_map<uint64_t, InFlight> inflight_;        // by request id
  uint64_t next_request_ = 1;
  uint64_t sequence_ = 0;
  absl::Status closed_;  // why the sockets are closed (OK: open)
  HeldPayloads held_;  // Run waits for none before it returns
};

}  // namespace bytecomp::worker
