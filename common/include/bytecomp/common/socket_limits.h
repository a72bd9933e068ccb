// Bounds on what a peer can make a socket hold: the largest frame it may send (ZeroMQ drops
// the connection of a peer that announces a larger one, before its bytes arrive) and how many
// messages may queue each way (a peer that never reads its replies loses the ones beyond the
// send queue instead of growing the daemon). Every socket that faces a peer gets one of these
// (LimitSocket), derived from the largest message the job can legitimately send.
#pragma once

#include <cstdint>

#include "bytecomp/common/connection_book.h"
#include "cluster_config.pb.h"
#include "zmq.hpp"

namespace bytecomp {

struct SocketLimits {
  int64_t max_message_bytes = -1;  // ZMQ_MAXMSGSIZE, per frame (-1: none)
  int send_queue = 1000;           // ZMQ_SNDHWM, messages
  int receive_queue = 1000;        // ZMQ_RCVHWM, messages
};

// Messages each control socket may queue each way. A node reads the scheduler's messages as
// they come, and kernel buffers hold tens of thousands more, so only a peer that stops reading
// fills this; its messages then cost at most about 2 MB.
inline constexpr int kControlQueueMessages = 10000;
// Messages each data socket may queue each way. A worker reads its replies as they come, so
// only a peer that stops reading fills it; the server then drops what is beyond (the peer's
// waits end in their time limit) instead of keeping every round's buffer for it.
inline constexpr int kDataQueueMessages = 16384;
// The largest message the scheduler sends a node: a DeclareReply lists at most
// kMaxJobPartitions servers (about 12 MB), a Topology carries the strategy (at most
// kMaxStrategyBytes) and a token per worker.
inline constexpr int64_t kMaxSchedulerMessageBytes = int64_t{64} << 20;
inline constexpr int64_t kMaxStrategyBytes = int64_t{16} << 20;
// Room for a data message's header frame and protocol overhead above its payload.
inline constexpr int64_t kDataFrameSlack = int64_t{64} << 10;

// The largest payload of a data message for partitions of `partition_bytes`: a partition holds
// at most partition_bytes / 2 elements (fp16, bf16), which every codec encodes, as fp32, in at
// most 8 bytes per element plus 512 KiB (topk or dgc at ratio 1 send a value and an index per
// element; sketch's 65536 bucket means take 256 KiB; test/unit/server/codec_bounds_test.cc
// checks every codec). Raw partitions and fp32 pull replies are smaller.
int64_t MaxDataPayloadBytes(int64_t partition_bytes);

// The largest frame the scheduler takes, from anyone: a node's messages are small but for the
// reports that name every tensor, which a registered node sends in parts (ControlPart), so a
// peer that has not registered holds at most this per connection in a partial frame.
inline constexpr int64_t kMaxControlFrameBytes = int64_t{1} << 20;
// The largest whole message a registered node may send in parts: a profile report (a name and
// some numbers per tensor) or a rejoin report (a DeclareReply per tensor, naming the server of
// each of the job's partitions, and the strategy in force): 1 MiB + max_tensors x
// (max_tensor_name_bytes + 64) + 5 bytes x kMaxJobPartitions + kMaxStrategyBytes.
int64_t MaxControlReportBytes(const proto::ClusterConfig& config);

// The scheduler's ROUTER: frames of at most kMaxControlFrameBytes.
SocketLimits SchedulerSocketLimits();
// A node's DEALER to the scheduler (kMaxSchedulerMessageBytes).
SocketLimits NodeControlSocketLimits();
// Data sockets (a server's ROUTER, a worker's DEALERs to the servers, the host local reducer):
// the larger of MaxDataPayloadBytes and link_probe_bytes (a probe transfer), plus
// kDataFrameSlack; kDataQueueMessages each way.
SocketLimits DataSocketLimits(const proto::ClusterConfig& config);

// The host local reducer's sockets (loopback, between the workers of one machine): a message
// carries a whole tensor (at most max_declared_bytes) plus kDataFrameSlack; each local rank has
// at most one collective per tensor pending, so max_tensors + 1024 messages queue each way.
SocketLimits LocalReduceSocketLimits(const proto::ClusterConfig& config);

// The connections a server's data socket keeps (ConnectionBook): from one address, what the
// whole job's workers open to a server (connections_per_server each, and room for a
// reconnection and a link probe tool), plus 8; in all, twice that. With the largest message
// (DataSocketLimits) this bounds what partial messages can hold.
ConnectionCaps DataConnectionCaps(const proto::ClusterConfig& config);
// The scheduler's: from one address, two per node of the job (a node and its reconnection)
// plus 8 (tools asking for the status); in all, twice that.
ConnectionCaps SchedulerConnectionCaps(const proto::ClusterConfig& config);
// The host local reducer root's (loopback only, so one address): two per local rank (one and
// its reconnection) plus 8.
ConnectionCaps LocalReduceConnectionCaps(int local_size);

// Sets the limits on `socket`; before it binds or connects (they apply to connections made
// after).
void LimitSocket(zmq::socket_t& socket, const SocketLimits& limits);

}  // namespace bytecomp
