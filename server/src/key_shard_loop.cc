#include "absl/strings/str_cat.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/common/refusal_log.h"
#include "bytecomp/common/transport.h"
#include "server_threads.h"

namespace bytecomp::server {

void RunKeyShard(WakeQueue<ShardMessage>& in, WakeQueue<ShardReplies>& replies, KeyShard& shard,
                 DataSeals* seals) {
  std::vector<OutgoingReply> out;
  RefusalLog unopened;  // payloads that did not open: logged per worker, rate limited
  bool running = true;
  while (running) {
    for (ShardMessage& message : in.WaitAndTakeAll()) {
      auto* request = std::get_if<ShardRequest>(&message);
      if (seals != nullptr && request != nullptr && request->payload.size() > 0) {
        // The I/O thread opened the header and checked the payload follows it: the tag says
        // whether it is that message's. One that is not is dropped unanswered.
        if (absl::Status s = seals->opener->OpenFrame(request->payload, 1, 2); !s.ok()) {
          unopened.RefuseAndLog(
              absl::StrCat("worker ", request->header.sender()),
              absl::StrCat("dropped a push whose payload did not open under worker ",
                           request->header.sender(), "'s data key (", s.message(), ")"),
              MonotonicMs());
          continue;
        }
      }
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
          if (seals == nullptr) continue;
          if (absl::Status s = seals->Seal(m, /*skip=*/1); !s.ok()) {
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
  if (unopened.refused() > 0) {
    BC_LOG_WARNING("payloads that did not open under their worker's data key: ",
                   unopened.Summary());
  }
}

}  // namespace bytecomp::server
