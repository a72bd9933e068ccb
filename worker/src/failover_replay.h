// Server failover, the worker's side, without sockets: what this worker tells a server that
// takes keys over. Per key it keeps the result of the last round the worker completed (the pull
// reply's buffer, shared: no copy). A replacement for a lost server's rank (Replace), or a
// survivor that keys moved to (Move, then ReplaysToNewServers), first gets each of its keys'
// kept result as a replay (DataHeader.replay: "this is where I stand, and what that round
// gave"; server/include/bytecomp/server/key_resume.h says how the server resumes from it). It
// also holds each server's epoch (DataHeader.server_epoch) and where moved keys are.
// The PartitionSender (partition_sender.h) sends the replays, then again what the lost server
// had not answered. One thread.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "bytecomp/common/partition.h"
#include "data.pb.h"
#include "zmq.hpp"

namespace bytecomp::worker {

class FailoverReplay {
 public:
  // A kept result to send to `server` before anything else of its key.
  struct Replay {
    uint64_t key = 0;
    int server = 0;
    std::vector<zmq::message_t> frames;  // the header (replay, the server's epoch), the result
  };

  explicit FailoverReplay(int servers) : epochs_(servers, 0) {}

  // DataHeader.server_epoch for `server`: 0 until a replacement takes its rank over.
  uint64_t epoch(int server) const { return epochs_[server]; }
  // The server holding `partition` of `layout`: the layout's, unless the key moved.
  int ServerOf(const TensorLayout& layout, int64_t partition) const {
    if (!moved_.empty()) {
      auto it = moved_.find(MakeKey(layout.tensor_id, static_cast<uint32_t>(partition)));
      if (it != moved_.end()) return it->second;
    }
    return layout.partition_server[partition];
  }

  // Keeps the result of a round this worker completed on `server`: `replay` is the header to
  // send (round, stage, strategy version, the result's codec and size), `payload` the pull
  // reply's buffer, shared.
  void Keep(uint64_t key, int server, proto::DataHeader replay, const zmq::message_t& payload);
  // A replacement holds `server`'s keys from `epoch` on: the replays it is to get first.
  std::vector<Replay> Replace(int server, uint64_t epoch);
  // `key` is held by `server` from now on (the scheduler's KeysMoved).
  void Move(uint64_t key, int server) { moved_[key] = server; }
  // After Moves: the replays of the moved keys' kept results, each to its new server (once).
  std::vector<Replay> ReplaysToNewServers();

  // How many keys have a kept result.
  int64_t kept() const { return static_cast<int64_t>(kept_.size()); }

 private:
  struct Kept {
    int server = 0;  // where the replay went last, or the round completed
    proto::DataHeader header;
    zmq::message_t payload;
  };
  Replay ReplayOf(uint64_t key, const Kept& kept) const;

  std::vector<uint64_t> epochs_;  // per server
  absl::flat_hash_map<uint64_t, Kept> kept_;
  absl::flat_hash_map<uint64_t, int> moved_;  // key -> the server holding it, after a Move
};

}  // namespace bytecomp::worker
