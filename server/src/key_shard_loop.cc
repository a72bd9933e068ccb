#include "bytecomp/common/logging.h"
#include "bytecomp/common/transport.h"
#include "server_threads.h"

namespace bytecomp::server {

void RunKeyShard(WakeQueue<ShardMessage>& in, WakeQueue<ShardReplies>& replies, KeyShard& shard,
                 MessageSealer* sealer) {
  std::vector<OutgoingReply> out;
  bool running = true;
  while (running) {
    for (ShardMessage& message : in.WaitAndTakeAll()) {
      running = shard.Handle(std::move(message), &out);
      if (!out.empty()) {
        ShardReplies frames;
        frames.reserve(out.size());
        for (OutgoingReply& reply : out) {
          RouterMessage& m = frames.emplace_back();
          m.reserve(3);
          m.push_back(std::move(reply.identity));
          m.push_back(ProtoFrame(reply.header));
          if (reply.has_payload) m.push_back(std::move(reply.payload));
          if (sealer == nullptr) continue;
          if (absl::Status s = sealer->Seal(m, /*skip=*/1); !s.ok()) {
            BC_LOG_ERROR("cannot seal a reply: ", s.ToString());
            frames.pop_back();
          }
        }
        replies.Push(std::move(frames));
        out.clear();
      }
      if (!running) break;
    }
  }
  BC_LOG_INFO(shard.Summary());
}

}  // namespace bytecomp::server
