#include "bytecomp/common/logging.h"
#include "bytecomp/common/transport.h"
#include "server_threads.h"

namespace bytecomp::server {

void RunKeyShard(zmq::context_t& ctx, size_t index, KeyShard& shard) {
  zmq::socket_t in(ctx, zmq::socket_type::pull);
  in.bind(KeyShardEndpoint(index));
  zmq::socket_t out(ctx, zmq::socket_type::push);
  out.connect(kRepliesEndpoint);
  std::vector<OutgoingReply> replies;
  bool running = true;
  while (running) {
    absl::StatusOr<std::vector<zmq::message_t>> message = RecvFrames(in);
    if (!message.ok() || message->empty()) break;
    running = shard.Handle(*std::move(message), &replies);
    for (OutgoingReply& reply : replies) {
      std::vector<zmq::message_t> frames;
      frames.push_back(std::move(reply.identity));
      frames.push_back(ProtoFrame(reply.header));
      if (reply.has_payload) frames.push_back(std::move(reply.payload));
      SendOrLog(out, frames);
    }
    replies.clear();
  }
  BC_LOG_INFO(shard.Summary());
}

}  // namespace bytecomp::server
