#include <algorithm>
#include <chrono>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/common/transport.h"
#include "server_threads.h"

namespace bytecomp::server {

IoLoop::IoLoop(zmq::socket_t& router, RequestDispatcher dispatcher, ServerQueues& queues,
               DataSeals seals)
    : router_(router),
      queues_(queues),
      dispatcher_(std::move(dispatcher)),
      seals_(std::move(seals)),
      backlog_(dispatcher_.UnreadReplyBound()) {}

void IoLoop::SendToRouter(std::vector<zmq::message_t>& frames, bool sealed) {
  if (absl::Status s = sealed ? absl::OkStatus() : seals_.Seal(frames, /*skip=*/1); !s.ok()) {
    BC_LOG_ERROR("cannot seal a reply: ", s.ToString());
    return;
  }
  if (!backlog_.Track(frames)) {
    const absl::string_view peer(static_cast<const char*>(frames[0].data()), frames[0].size());
    const int64_t unread = backlog_.Unread(peer);
    const std::string cut = backlog_.Cut(peer);
    unread_.RefuseAndLog(
        peer,
        absl::StrCat("a peer left ", unread >> 20, " MiB of its replies unread (", "bound ",
                     backlog_.bound() >> 20, " MiB): reply dropped, ", cut),
        MonotonicMs());
    return;
  }
  if (absl::Status s = SendFrames(router_, frames); !s.ok()) BC_LOG_WARNING("send: ", s.ToString());
}

void IoLoop::Run() {
  zmq::pollitem_t items[] = {{router_.handle(), 0, ZMQ_POLLIN, 0},
                             {nullptr, queues_.replies.fd(), ZMQ_POLLIN, 0},
                             {nullptr, queues_.commands.fd(), ZMQ_POLLIN, 0}};
  bool running = true;
  DispatchOutbox out;
  while (running) {
    // Parked requests expire within kUndeclaredGraceMs: look at them often while there are any.
    // What was taken from the queues and not handled yet goes on at once.
    int64_t wait_ms = dispatcher_.parked() == 0 ? 1000 : 50;
    if (!commands_.empty() || !replies_.empty()) wait_ms = 0;
    // A key shard that is behind holds the ROUTER back: its requests wait in ZeroMQ (up to the
    // receive high-water mark, then in TCP), not in the shard's queue.
    const bool shards_behind = ShardsBehind();
    items[0].events = shards_behind ? 0 : ZMQ_POLLIN;
    if (shards_behind) wait_ms = std::min<int64_t>(wait_ms, 1);
    zmq::poll(items, 3, std::chrono::milliseconds(wait_ms));
    // Commands first, as many as came (up to 256), and sent on before any request: a burst of
    // declarations must not trail a burst of requests by one command per turn (the requests
    // parked for them would overflow kMaxParkedRequests), and a shard hears of a key before
    // any request for it.
    if (items[2].revents & ZMQ_POLLIN) {
      for (ServerCommand& command : queues_.commands.TakeAll()) {
        commands_.push_back(std::move(command));
      }
    }
    for (int i = 0; running && i < 256 && !commands_.empty(); ++i) {
      running = dispatcher_.HandleCommand(commands_.front(), MonotonicMs(), &out);
      commands_.pop_front();
      backlog_.set_bound(dispatcher_.UnreadReplyBound());  // declarations and moves grow it
    }
    Send(out);
    if (items[1].revents & ZMQ_POLLIN) {
      for (ShardReplies& replies : queues_.replies.TakeAll()) {
        replies_.push_back(std::move(replies));
      }
    }
    ForwardReplies();
    if (running && (items[0].revents & ZMQ_POLLIN)) DrainRequests();
    dispatcher_.ExpireParked(MonotonicMs(), &out);
    Send(out);
  }
  BC_LOG_INFO(dispatcher_.Summary());
  if (unsealed_.refused() > 0) {
    BC_LOG_WARNING("data messages not sealed under a worker's data key: ", unsealed_.Summary());
  }
  if (unread_.refused() > 0) {
    BC_LOG_WARNING("replies dropped for peers that did not read theirs: ", unread_.Summary(), "; ",
                   backlog_.cut(), " connections cut");
  }
}

void IoLoop::Send(DispatchOutbox& out) {
  for (std::vector<zmq::message_t>& frames : out.to_router) SendToRouter(frames);
  for (auto& [shard, message] : out.to_shards) queues_.to_shards[shard]->Push(std::move(message));
  out.to_router.clear();
  out.to_shards.clear();
}

bool IoLoop::ShardsBehind() const {
  for (const auto& queue : queues_.to_shards) {
    if (queue->size() >= kMaxShardBacklog) return true;
  }
  return false;
}

// At most 256 replies a turn (whole batches), so neither direction starves the other.
void IoLoop::ForwardReplies() {
  for (size_t sent = 0; sent < 256 && !replies_.empty();) {
    for (RouterMessage& frames : replies_.front()) SendToRouter(frames, /*sealed=*/true);
    sent += replies_.front().size();
    replies_.pop_front();
  }
}

void IoLoop::DrainRequests() {
  DispatchOutbox out;
  for (int i = 0; i < 256; ++i) {
    absl::StatusOr<std::vector<zmq::message_t>> frames =
        RecvFrames(router_, std::chrono::milliseconds(0));
    if (!frames.ok() || frames->empty()) break;
    // ZeroMQ names the connection on the frames the peer sent (not on the routing id it adds),
    // before the header opens into a new frame.
    const int connection = frames->size() > 1 ? zmq_msg_get((*frames)[1].handle(), ZMQ_SRCFD) : -1;
    // The header opens here; a payload stays sealed for its key shard, which opens it.
    if (absl::Status s = seals_.OpenFirst(*frames, /*skip=*/1); !s.ok()) {
      const zmq::message_t& peer = frames->front();
      unsealed_.RefuseAndLog(
          absl::string_view(static_cast<const char*>(peer.data()), peer.size()),
          absl::StrCat("refused a data message not sealed under a worker's data key (", s.message(),
                       ")"),
          MonotonicMs());
      continue;
    }
    const zmq::message_t& peer = frames->front();
    backlog_.Heard(absl::string_view(static_cast<const char*>(peer.data()), peer.size()),
                   connection);
    dispatcher_.HandleRequest(*std::move(frames), MonotonicMs(), &out);
    Send(out);  // each request goes on at once, as it did before the next arrived
  }
}

}  // namespace bytecomp::server
