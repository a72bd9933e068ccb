// The server's threads below the control thread (server.h lists them all), and the inproc
// endpoints between them. Each thread owns its sockets and only moves messages between them
// and its socket-free class: the I/O thread's RequestDispatcher, a shard thread's KeyShard.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "bytecomp/server/key_shard.h"
#include "bytecomp/server/request_dispatcher.h"
#include "zmq.hpp"

namespace bytecomp::server {

// control thread -> I/O thread: shard command messages (key_shard.h).
inline constexpr char kControlEndpoint[] = "inproc://server-control";
// key shards -> I/O thread: replies (identity, header, payload?), sent on to the ROUTER as
// they are.
inline constexpr char kRepliesEndpoint[] = "inproc://server-replies";
// I/O thread -> key shard i: shard messages.
std::string KeyShardEndpoint(size_t index);

// Sends without throwing; a failure here means the process is shutting down.
void SendOrLog(zmq::socket_t& socket, std::vector<zmq::message_t>& frames);

class IoLoop {
 public:
  // Binds the replies endpoint and connects to the control endpoint and to every shard
  // (inproc connect before bind works in ZeroMQ >= 4.0, so the shards may bind later).
  // Runs on the thread that calls Run() afterwards.
  IoLoop(zmq::context_t& ctx, zmq::socket_t& router, RequestDispatcher dispatcher,
         size_t num_shards);

  // Moves messages until the control thread sends kStop; the shards are told to stop too.
  void Run();

 private:
  void Send(DispatchOutbox& out);
  void ForwardReplies();
  void DrainRequests();

  zmq::socket_t& router_;
  zmq::socket_t control_;
  zmq::socket_t replies_;
  std::vector<zmq::socket_t> shards_;
  RequestDispatcher dispatcher_;
};

// A key shard's thread: binds KeyShardEndpoint(index), hands each message to the shard and
// sends its replies to the I/O thread, until kStop; then logs the shard's summary.
void RunKeyShard(zmq::context_t& ctx, size_t index, KeyShard& shard);

}  // namespace bytecomp::server
