#include "failover_replay.h"

#include <utility>

#include "bytecomp/common/transport.h"

namespace bytecomp::worker {

void FailoverReplay::Keep(uint64_t key, int server, proto::DataHeader replay,
                          const zmq::message_t& payload) {
  Kept& kept = kept_[key];
  kept.server = server;
  kept.header = std::move(replay);
  // Shares the receive buffer (the stages only read it): no copy.
  kept.payload.copy(const_cast<zmq::message_t&>(payload));
}

FailoverReplay::Replay FailoverReplay::ReplayOf(uint64_t key, const Kept& kept) const {
  Replay replay{key, kept.server, {}};
  proto::DataHeader header = kept.header;
  header.set_replay(true);
  header.set_server_epoch(epochs_[kept.server]);
  replay.frames.push_back(ProtoFrame(header));
  replay.frames.emplace_back();
  replay.frames.back().copy(const_cast<zmq::message_t&>(kept.payload));
  return replay;
}

std::vector<FailoverReplay::Replay> FailoverReplay::Replace(int server, uint64_t epoch) {
  epochs_[server] = epoch;
  std::vector<Replay> replays;
  for (const auto& [key, kept] : kept_) {
    if (kept.server == server) replays.push_back(ReplayOf(key, kept));
  }
  return replays;
}

std::vector<FailoverReplay::Replay> FailoverReplay::ReplaysToNewServers() {
  std::vector<Replay> replays;
  for (auto& [key, kept] : kept_) {
    auto it = moved_.find(key);
    if (it == moved_.end() || it->second == kept.server) continue;
    kept.server = it->second;
    replays.push_back(ReplayOf(key, kept));
  }
  return replays;
}

}  // namespace bytecomp::worker
