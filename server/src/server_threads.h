// The server's threads below the control thread (server.h lists them all), and the queues
// between them (shard_messages.h says what travels on each). Each thread owns its sockets and
// only moves messages between them, its queues and its socket-free class: the I/O thread's
// RequestDispatcher, a shard thread's KeyShard.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <vector>

#include "bytecomp/common/peer_backlog.h"
#include "bytecomp/common/refusal_log.h"
#include "bytecomp/common/sealed_messages.h"
#include "bytecomp/common/wake_queue.h"
#include "bytecomp/server/key_shard.h"
#include "bytecomp/server/request_dispatcher.h"
#include "bytecomp/server/shard_messages.h"
#include "zmq.hpp"

namespace bytecomp::server {

// The queues between the threads. The I/O thread polls the eventfds of `commands` and
// `replies` beside its ROUTER socket; a key shard, which has no socket, waits on its own.
// Unbounded, as the inproc sockets toward the shards were: what reaches a shard was bounded
// where it came in (the ROUTER's queues and message size, the parked requests), and a shard's
// replies are bounded by what it was handed (an ack or error each, and the held pulls: one per
// worker and key). The I/O thread takes the replies whenever it wakes and sends at most 256 a
// turn, as it did from the inproc socket.
struct ServerQueues {
  explicit ServerQueues(size_t num_shards) {
    for (size_t i = 0; i < num_shards; ++i) {
      to_shards.push_back(std::make_unique<WakeQueue<ShardMessage>>());
    }
  }
  WakeQueue<ServerCommand> commands;                                // control -> I/O
  std::vector<std::unique_ptr<WakeQueue<ShardMessage>>> to_shards;  // I/O -> key shard i
  WakeQueue<ShardReplies> replies;                                  // key shards -> I/O
};

class IoLoop {
 public:
  // Runs on the thread that calls Run() afterwards; `router` is that thread's. `seals`: where
  // the job seals its data messages, this server's sealer and the opener of every worker's key
  // (the key shards' replies come sealed).
  IoLoop(zmq::socket_t& router, RequestDispatcher dispatcher, ServerQueues& queues,
         DataSeals seals = {});

  // Moves messages until the control thread sends StopCommand; the shards are told to stop
  // too.
  void Run();

 private:
  void Send(DispatchOutbox& out);
  // Seals (where the job does, unless `sealed` already) and sends one message; a failure here
  // is logged (the process is shutting down, or a sealer error). A message to a peer that left
  // too much unread is dropped and the peer cut (backlog_).
  void SendToRouter(std::vector<zmq::message_t>& frames, bool sealed = false);
  void ForwardReplies();
  void DrainRequests();
  // Whether a key shard's queue holds kMaxShardBacklog messages or more: then the I/O thread
  // reads no request until it caught up (the inproc sockets' high-water mark did that before).
  bool ShardsBehind() const;
  static constexpr size_t kMaxShardBacklog = 1024;

  zmq::socket_t& router_;
  ServerQueues& queues_;
  RequestDispatcher dispatcher_;
  DataSeals seals_;
  // Messages refused because they were not sealed under a worker's key (the dispatcher never
  // sees them and nothing is answered).
  RefusalLog unsealed_;
  // What each peer has not read of its replies; one that leaves more than the dispatcher's
  // UnreadReplyBound is cut (its reply dropped), and logged here.
  PeerBacklog backlog_;
  RefusalLog unread_;
  // Taken from the queues and not handled yet: at most 256 of each a turn, so that neither
  // direction starves the other.
  std::deque<ServerCommand> commands_;
  std::deque<ShardReplies> replies_;
};

// A key shard's thread: hands each message from its queue to the shard and sends its replies
// to the I/O thread, until StopCommand; then logs the shard's summary. Where the job seals its
// data messages, `seals` (this thread's: a sealer under the server's key, an opener of every
// worker's) opens the requests' payloads and seals the replies here, so that the shards share
// the work; the I/O thread opened the headers and sends the replies as they are.
void RunKeyShard(WakeQueue<ShardMessage>& in, WakeQueue<ShardReplies>& replies, KeyShard& shard,
                 DataSeals* seals = nullptr);

}  // namespace bytecomp::server
