#include <chrono>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/common/transport.h"
#include "server_threads.h"

namespace bytecomp::server {

std::string KeyShardEndpoint(size_t index) { return absl::StrCat("inproc://server-shard-", index); }

void SendOrLog(zmq::socket_t& socket, std::vector<zmq::message_t>& frames) {
  if (absl::Status s = SendFrames(socket, frames); !s.ok()) BC_LOG_WARNING("send: ", s.ToString());
}

IoLoop::IoLoop(zmq::context_t& ctx, zmq::socket_t& router, RequestDispatcher dispatcher,
               size_t num_shards)
    : router_(router),
      control_(ctx, zmq::socket_type::pair),
      replies_(ctx, zmq::socket_type::pull),
      dispatcher_(std::move(dispatcher)) {
  control_.connect(kControlEndpoint);
  replies_.bind(kRepliesEndpoint);
  for (size_t i = 0; i < num_shards; ++i) {
    shards_.emplace_back(ctx, zmq::socket_type::push);
    shards_.back().set(zmq::sockopt::sndhwm, 0);
    shards_.back().connect(KeyShardEndpoint(i));
  }
}

void IoLoop::Run() {
  zmq::pollitem_t items[] = {{router_.handle(), 0, ZMQ_POLLIN, 0},
                             {replies_.handle(), 0, ZMQ_POLLIN, 0},
                             {control_.handle(), 0, ZMQ_POLLIN, 0}};
  bool running = true;
  DispatchOutbox out;
  while (running) {
    // Parked requests expire within kUndeclaredGraceMs: look at them often while there are any.
    zmq::poll(items, 3, std::chrono::milliseconds(dispatcher_.parked() == 0 ? 1000 : 50));
    // Commands first, as many as came (up to 256), and sent on before any request: a burst of
    // declarations must not trail a burst of requests by one command per turn (the requests
    // parked for them would overflow kMaxParkedRequests), and a shard hears of a key before
    // any request for it.
    for (int i = 0; running && i < 256 && (items[2].revents & ZMQ_POLLIN); ++i) {
      absl::StatusOr<std::vector<zmq::message_t>> message =
          RecvFrames(control_, std::chrono::milliseconds(0));
      if (!message.ok() || message->empty()) break;
      running = dispatcher_.HandleCommand(*std::move(message), MonotonicMs(), &out);
    }
    Send(out);
    if (items[1].revents & ZMQ_POLLIN) ForwardReplies();
    if (running && (items[0].revents & ZMQ_POLLIN)) DrainRequests();
    dispatcher_.ExpireParked(MonotonicMs(), &out);
    Send(out);
  }
  BC_LOG_INFO(dispatcher_.Summary());
}

void IoLoop::Send(DispatchOutbox& out) {
  for (std::vector<zmq::message_t>& frames : out.to_router) SendOrLog(router_, frames);
  for (auto& [shard, message] : out.to_shards) SendOrLog(shards_[shard], message);
  out.to_router.clear();
  out.to_shards.clear();
}

// At most 256 messages per poll from each socket, so neither direction starves the other.
void IoLoop::ForwardReplies() {
  for (int i = 0; i < 256; ++i) {
    absl::StatusOr<std::vector<zmq::message_t>> frames =
        RecvFrames(replies_, std::chrono::milliseconds(0));
    if (!frames.ok() || frames->empty()) return;
    SendOrLog(router_, *frames);
  }
}

void IoLoop::DrainRequests() {
  DispatchOutbox out;
  for (int i = 0; i < 256; ++i) {
    absl::StatusOr<std::vector<zmq::message_t>> frames =
        RecvFrames(router_, std::chrono::milliseconds(0));
    if (!frames.ok() || frames->empty()) break;
    dispatcher_.HandleRequest(*std::move(frames), MonotonicMs(), &out);
    Send(out);  // each request goes on at once, as it did before the next arrived
  }
}

}  // namespace bytecomp::server
