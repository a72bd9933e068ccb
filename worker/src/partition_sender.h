// The worker's side of the data protocol, without sockets. It takes partitions from the other
// threads (data_commands.h) and sends each as a push and, right behind it on the same
// connection, its pull, in priority order (first come first within a priority) within an
// in-flight budget per server; it takes the servers' replies, hands pull replies back for the
// operation's stages, and reports the events it owns to the operation tracker (a partition's
// failure; the release of a zero-copy payload that never went out). Server failover: it sends a
// replacement, or the survivors that keys move to, their keys' kept results (FailoverReplay),
// then again every push and pull the lost server had not answered, in their first order.
//
// It sends through ServerConnections: the data loop's DEALER sockets (worker/src/data_loop.cc,
// which only moves messages between its sockets and this), or a test's record of the frames
// (test/unit/worker/partition_sender_test.cc). One thread.
//
// Zero-copy: an uncompressed partition's first push carries the tensor's memory itself, in a
// message whose free function reports kPayloadReleased (and uncounts it in HeldPayloads) on
// whichever thread drops it. A push sent again after a failover carries a copy: the first
// message's free function is the one report. Encoded payloads are shared the same way and
// report nothing (the operation waits for its results only).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <queue>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "bytecomp/common/node_token.h"
#include "bytecomp/common/socket_limits.h"
#include "bytecomp/telemetry.h"
#include "cluster_config.pb.h"
#include "data.pb.h"
#include "data_commands.h"
#include "failover_replay.h"
#include "held_payloads.h"
#include "operation.h"
#include "operation_tracker.h"
#include "traffic_counters.h"
#include "zmq.hpp"

namespace bytecomp::worker {

// Where the sender's messages go: ClusterConfig.connections_per_server connections to each
// server, every one open when the sender starts.
class ServerConnections {
 public:
  virtual ~ServerConnections() = default;
  // Sends `frames` as one message on connection `connection` of `server` (which is open). On
  // an error the frames stay with the caller: dropping them releases a zero-copy payload.
  virtual absl::Status Send(int server, int connection, std::vector<zmq::message_t>& frames) = 0;
  // Opens `server`'s connections to `address`, closing those it had.
  virtual void Open(int server, const std::string& address) = 0;
  // Closes `server`'s connections: ZeroMQ drops what they still queue, on its own threads,
  // which releases zero-copy payloads.
  virtual void Close(int server) = 0;
};

// A pull reply for the operation's stages (StagePipeline::Pulled).
struct PulledPartition {
  std::shared_ptr<Operation> op;
  int64_t partition = 0;
  uint32_t stage = 0;
  zmq::message_t payload;
  int server = 0;  // the one that answered
};

class PartitionSender {
 public:
  // What it uses, all outliving it.
  struct Wiring {
    const proto::ClusterConfig* config = nullptr;  // connections, budget, failover on or off
    int servers = 0;
    int rank = 0;
    NodeToken token;  // carried by every push and pull: the server checks it
    ServerConnections* connections = nullptr;
    OperationTracker* tracker = nullptr;
    TrafficCounters* traffic = nullptr;
    // Counts the zero-copy payloads ZeroMQ holds. Their free functions use it: it must outlive
    // every message the sender made.
    HeldPayloads* held = nullptr;
    telemetry::Timeline* timeline = nullptr;              // null: no timeline
    int64_t (*clock_us)() = &telemetry::Timeline::NowUs;  // the timeline's clock
    // Request ids below it were the link probes': a late probe reply must match no request.
    uint64_t first_request = 1;
  };

  // Pushes sent and not yet acknowledged, per server, at most this many; with their pulls,
  // fewer messages than a socket queues (kDataQueueMessages), so a send never blocks the thread
  // that must read the replies, and the server never has to drop one.
  static constexpr int kMaxInflightPushesPerServer = 4096;
  // Pulls sent and not yet answered, per server, at most this many; the others wait, in order,
  // until answers come (every key's round completes once all workers pushed, and pushes never
  // wait for pulls, so they all do). With the pushes' acks, a worker never has more replies due
  // on a connection than the server's queue holds for it: the server need not drop one however
  // slowly the data thread reads. (The price: a worker that waits for one result before pushing
  // what the others wait for, with this many pulls pending on one server, waits behind its own
  // pulls.)
  static constexpr int kMaxInflightPullsPerServer = 4096;
  static_assert(kMaxInflightPushesPerServer + kMaxInflightPullsPerServer <= kDataQueueMessages / 2,
                "the replies due to a worker must fit in the server's queue for it");

  explicit PartitionSender(Wiring wiring);

  // A command of the other threads; StopData is the data loop's own.
  void Take(DataCommand& command);
  // Sends what the budgets allow, highest priority first, and publishes the queue and the bytes
  // in flight (TrafficCounters). After each batch of commands and replies.
  void SendReady();
  // A reply from `server`. A pull reply with a result comes back for the operation's stages;
  // every other outcome is reported here.
  std::optional<PulledPartition> HandleReply(int server, std::vector<zmq::message_t>& frames);
  // Fails everything queued and in flight and closes every connection; later work fails at
  // once. Only the first reason counts.
  void FailAll(const absl::Status& reason);
  // Why the connections are closed (FailAll); OK while they are open.
  const absl::Status& closed() const { return closed_; }

  // Per server: partitions queued, push bytes not yet acknowledged, pushes not yet
  // acknowledged, pulls sent and not yet answered, pulls waiting for the last to go down.
  int64_t queued(int server) const { return static_cast<int64_t>(queues_[server].size()); }
  int64_t inflight_bytes(int server) const { return inflight_bytes_[server]; }
  int inflight_pushes(int server) const { return inflight_pushes_[server]; }
  int inflight_pulls(int server) const { return inflight_pulls_[server]; }
  int64_t deferred_pulls(int server) const {
    return static_cast<int64_t>(deferred_pulls_[server].size());
  }
  const FailoverReplay& failover() const { return failover_; }

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
      return sequence > other.sequence;                                  // then FIFO
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
    int connection = 0;      // of the push and its pull
    int64_t bytes = 0;       // push bytes not yet acknowledged by the server
    int64_t sent_us = 0;     // with a timeline: when the push went out
    bool unacked = false;    // counted in inflight_pushes_
    bool pull_sent = false;  // counted in inflight_pulls_
    zmq::message_t pull;     // the pull, until sent (deferred_pulls_)
  };

  // Server failover: a replacement holds `server`'s keys at `address` from `epoch` on.
  void Reconnect(int server, const std::string& address, uint64_t epoch);
  // Server failover without a replacement: the keys' new servers.
  void Move(const MoveKeys& move);
  // Sends the replays; false (and everything failed) when a send fails.
  bool SendReplays(std::vector<FailoverReplay::Replay>& replays);
  int ServerOf(const Operation& op, int64_t partition) const {
    return failover_.ServerOf(op.layout(), partition);
  }
  // A key's requests and its replays take one connection, which keeps their order.
  int ConnectionOf(uint64_t tensor, uint64_t partition) const {
    return static_cast<int>((tensor + partition) % connections_per_server_);
  }
  void Send(const PartitionTask& task);
  void SendAbort(const Operation& op, int64_t partition, uint32_t stage, const std::string& why);
  // Sends the request's pull now if the server's pulls in flight allow, else defers it.
  void SendOrDeferPull(uint64_t request, InFlight& in);
  // Sends deferred pulls of `server` while its pulls in flight allow.
  void SendDeferredPulls(int server);
  // The request is answered (or failed): its counts are freed.
  void Finished(const InFlight& in);
  proto::DataHeader HeaderFor(const Operation& op, int64_t partition, uint32_t stage) const;

  const Wiring w_;
  const uint64_t connections_per_server_;
  const int64_t budget_bytes_;
  const bool keep_results_;  // server failover is on
  std::vector<bool> open_;   // per server: its connections are open
  FailoverReplay failover_;
  std::vector<int64_t> inflight_bytes_;
  std::vector<int> inflight_pushes_;
  std::vector<int> inflight_pulls_;
  std::vector<std::deque<uint64_t>> deferred_pulls_;        // request ids, per server
  std::vector<std::priority_queue<PartitionTask>> queues_;  // per server
  absl::flat_hash_map<uint64_t, InFlight> inflight_;        // by request id
  uint64_t next_request_;
  uint64_t sequence_ = 0;
  absl::Status closed_;  // why the connections are closed (OK: open)
};

}  // namespace bytecomp::worker
