// What the server's threads hand each other (server.h), as typed values on WakeQueues
// (common/wake_queue.h), so that nothing between them is framed or parsed again, and a peer's
// routing identity can never read as a command:
//   control thread -> I/O thread: a ServerCommand.
//   I/O thread -> key shard: a ShardMessage: a ShardRequest (a validated PUSH or PULL for one
//     of its keys, its header parsed once, by the I/O thread's validation), or a ServerCommand
//     the I/O thread applied to its own catalog first (all but LostCommand, its own).
//   key shard -> I/O thread: ShardReplies, the frames of each reply, for the ROUTER as they are.
// The control thread's protos are shared, not copied, by the I/O thread and every shard.
// A shard's queue is bounded by the I/O thread, which reads no request from its ROUTER while a
// shard's queue holds 1024 messages (IoLoop::ShardsBehind); the replies answer those requests.
#pragma once

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "control.pb.h"
#include "data.pb.h"
#include "strategy.pb.h"
#include "zmq.hpp"

namespace bytecomp::server {

// A validated PUSH or PULL from the worker behind `identity`.
struct ShardRequest {
  zmq::message_t identity;
  proto::DataHeader header;
  zmq::message_t payload;  // empty when the request came without one
};

// A tensor the scheduler declared (and the I/O thread's catalog took).
struct DeclareCommand {
  std::shared_ptr<const proto::DeclareReply> tensor;
};
// A strategy version committed (and the I/O thread's catalog took).
struct StrategyCommand {
  std::shared_ptr<const proto::Strategy> strategy;
};
// A node failed: every held pull fails with `reason`.
struct FailCommand {
  std::string reason;
};
// Server failover: partitions of a lost server are now on the servers the KeysMoved names;
// this server's resume as a replacement's keys do (key_resume.h).
struct MoveCommand {
  std::shared_ptr<const proto::KeysMoved> moved;
};
// A server was lost: requests for its keys wait, parked, for a MoveCommand (the I/O thread's
// alone).
struct LostCommand {
  int rank = -1;
};
// The thread stops.
struct StopCommand {};

using ServerCommand = std::variant<DeclareCommand, StrategyCommand, FailCommand, MoveCommand,
                                   LostCommand, StopCommand>;

using ShardMessage = std::variant<ShardRequest, ServerCommand>;

// A reply's frames for the ROUTER socket: identity, header, payload?
using RouterMessage = std::vector<zmq::message_t>;
// The replies one shard message caused, in order.
using ShardReplies = std::vector<RouterMessage>;

}  // namespace bytecomp::server
