#include "bytecomp/common/socket_limits.h"

#include <algorithm>

#include "bytecomp/common/declaration_limits.h"

namespace bytecomp {

int64_t MaxDataPayloadBytes(int64_t partition_bytes) {
  const int64_t elements = std::max<int64_t>(1, partition_bytes / 2);
  return 8 * elements + (int64_t{512} << 10);
}

int64_t MaxControlReportBytes(const proto::ClusterConfig& config) {
  return (int64_t{1} << 20) +
         int64_t{config.max_tensors()} * (int64_t{config.max_tensor_name_bytes()} + 64) +
         5 * kMaxJobPartitions + kMaxStrategyBytes;
}

SocketLimits SchedulerSocketLimits() {
  SocketLimits limits;
  limits.max_message_bytes = kMaxControlFrameBytes;
  limits.send_queue = kControlQueueMessages;
  limits.receive_queue = kControlQueueMessages;
  return limits;
}

SocketLimits NodeControlSocketLimits() {
  SocketLimits limits;
  limits.max_message_bytes = kMaxSchedulerMessageBytes;
  limits.send_queue = kControlQueueMessages;
  limits.receive_queue = kControlQueueMessages;
  return limits;
}

SocketLimits DataSocketLimits(const proto::ClusterConfig& config) {
  SocketLimits limits;
  limits.max_message_bytes =
      std::max(MaxDataPayloadBytes(config.partition_bytes()), config.link_probe_bytes()) +
      kDataFrameSlack;
  limits.send_queue = kDataQueueMessages;
  limits.receive_queue = kDataQueueMessages;
  return limits;
}

SocketLimits LocalReduceSocketLimits(const proto::ClusterConfig& config) {
  SocketLimits limits;
  limits.max_message_bytes = config.max_declared_bytes() + kDataFrameSlack;
  limits.send_queue = config.max_tensors() + 1024;
  limits.receive_queue = limits.send_queue;
  return limits;
}

ConnectionCaps DataConnectionCaps(const proto::ClusterConfig& config) {
  const int per_address =
      std::max(1, config.num_workers()) * (std::max(1, config.connections_per_server()) + 2) + 8;
  return ConnectionCaps{per_address, 2 * per_address};
}

ConnectionCaps SchedulerConnectionCaps(const proto::ClusterConfig& config) {
  const int per_address =
      2 * (std::max(1, config.num_workers()) + std::max(1, config.num_servers())) + 8;
  return ConnectionCaps{per_address, 2 * per_address};
}

ConnectionCaps LocalReduceConnectionCaps(int local_size) {
  const int cap = 2 * std::max(1, local_size) + 8;
  return ConnectionCaps{cap, cap};
}

void LimitSocket(zmq::socket_t& socket, const SocketLimits& limits) {
  socket.set(zmq::sockopt::maxmsgsize, limits.max_message_bytes);
  socket.set(zmq::sockopt::sndhwm, limits.send_queue);
  socket.set(zmq::sockopt::rcvhwm, limits.receive_queue);
}

}  // namespace bytecomp
