// A node's control connection to the scheduler: register, receive the topology, heartbeats
// both ways. It draws the node's token (node_token.h) and, where data frames are sealed, its
// data key (sealed_messages.h), registers with them and puts the token in every later message; it
// keeps the time it last heard from the scheduler, so that its owner sees a silent scheduler
// (SchedulerTimeoutMs) instead of waiting for it forever.
//
// A scheduler that restarts takes the running job up (scheduler/.../takeover.h): its answer
// to this node's next message says it does not know the node (Error.not_registered), and
// Receive rejoins (Register.rejoining with its rank and token, then a rejoin report of what
// RejoinRecord kept of the job), then, once the scheduler says Rejoined, sends again what the
// old one left unanswered. The owner sees neither; a refused rejoin is an error from Receive. A
// restart is taken up when it comes within SchedulerTimeoutMs of the last word from the old
// scheduler. Owned by exactly one thread (the node's control thread), like its ZeroMQ socket.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "bytecomp/common/clock_offset.h"
#include "bytecomp/common/node_token.h"
#include "bytecomp/common/rejoin_record.h"
#include "bytecomp/common/socket_security.h"
#include "cluster_config.pb.h"
#include "control.pb.h"
#include "zmq.hpp"

namespace bytecomp {

class SchedulerClient {
 public:
  // `security` (the cluster key, or none) secures the connection; it must outlive this.
  SchedulerClient(zmq::context_t& context, proto::ClusterConfig config,
                  const SocketSecurity& security);

  // Connects, registers and waits for the topology, at most connect_timeout_ms. The error
  // names the scheduler address (a host that does not resolve is said at once), or carries the
  // scheduler's error reply. Without a cluster key a scheduler that is not on loopback is
  // refused (unless allow_insecure).
  absl::StatusOr<proto::Topology> Register(proto::Role role, int requested_rank,
                                           const std::string& data_address);
  // Workers, before Register: the machine (empty: the hostname) and the local rank and size a
  // launcher assigned (nullopt: the scheduler decides).
  void SetMachineSlot(std::string machine, std::optional<int> local_rank,
                      std::optional<int> local_size);

  // Sends `message` with this node's token (Register without), in parts when it is larger than
  // one of the scheduler's frames (control_parts.h).
  absl::Status Send(const proto::ControlMessage& message);
  // Sends a heartbeat (and a clock probe) when heartbeat_interval_ms passed since the last
  // message sent.
  void HeartbeatIfDue();
  // Receives one control message, waiting at most timeout_ms; nullopt on timeout. Clock
  // replies are taken here (clock()) and read as nothing received.
  absl::StatusOr<std::optional<proto::ControlMessage>> Receive(int timeout_ms);
  // OK while the scheduler was heard from (any message, its heartbeats included) within
  // SchedulerTimeoutMs of now, counted from the topology; else Unavailable naming the
  // scheduler and how long it has been silent. Called from a loop: when this process itself
  // did not run for most of the silence (stopped by SIGSTOP, a stalled host), the error says
  // so instead of blaming the scheduler.
  absl::Status CheckSchedulerHeard() const;

  // This node's token: every message it sends carries it, and a worker's pushes and pulls too.
  const NodeToken& token() const { return token_; }
  // With sealed data frames (SealsDataFrames of the config): the key this node seals its data
  // messages with, drawn by Register and sent in it (Register.data_key); empty otherwise.
  const std::string& data_key() const { return data_key_; }

  zmq::socket_t& socket() { return socket_; }
  const proto::ClusterConfig& config() const { return config_; }
  // This node's clock against the scheduler's, from the clock probes (timelines use it).
  const ClockOffset& clock() const { return *clock_; }
  // The same, shared with whoever outlives this client (a timeline keeps following it).
  std::shared_ptr<const ClockOffset> shared_clock() const { return clock_; }

 private:
  void SendClockProbe();
  // Sends one frame, waiting for room in the socket's queue at most the scheduler timeout.
  absl::Status SendWaiting(const proto::ControlMessage& message);
  // Sends Register{rejoining} and the rejoin report (again once per heartbeat interval while
  // not answered).
  absl::Status Rejoin();

  proto::ClusterConfig config_;
  const SocketSecurity& security_;
  const NodeToken token_;
  std::string data_key_;
  zmq::socket_t socket_;
  std::string machine_;
  std::optional<int> local_rank_, local_size_;
  int64_t last_sent_ms_ = 0;
  uint64_t split_messages_ = 0;          // ControlPart.message_id of the last message sent in parts
  int64_t last_heard_ms_ = 0;            // 0: nothing yet
  mutable int64_t last_checked_ms_ = 0;  // CheckSchedulerHeard's previous call
  uint64_t heartbeat_sequence_ = 0;
  std::shared_ptr<ClockOffset> clock_ = std::make_shared<ClockOffset>();
  static constexpr int kQuickClockProbes = 16;
  static constexpr int64_t kClockProbeGapMs = 20;
  int clock_probes_ = 0;
  int64_t last_probe_ms_ = 0;
  // For a rejoin: the Register sent, with the rank and local slot the topology gave.
  proto::Register registration_;
  bool registered_ = false;  // the topology came
  RejoinRecord record_;
  bool rejoining_ = false;  // a rejoin went out, Rejoined has not come
  int64_t last_rejoin_ms_ = 0;
};

}  // namespace bytecomp
