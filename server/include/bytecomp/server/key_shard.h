// A key shard: the keys whose hash falls to it (ShardOf), its own copy of the catalog, and the
// KeyStore that sums them. Each shard runs on its own thread and shares nothing with the other
// shards, so the data path takes no lock. Socket-free: the shard thread hands it each message
// from the I/O thread (shard_messages.h) and sends the replies back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bytecomp/server/catalog.h"
#include "bytecomp/server/key_store.h"
#include "bytecomp/server/round_observer.h"
#include "bytecomp/server/server_job.h"
#include "bytecomp/server/shard_messages.h"

namespace bytecomp::server {

// The shard that owns a key, of num_shards (> 0). Every partition of a tensor may land on a
// different shard.
size_t ShardOf(uint64_t key, size_t num_shards);

class KeyShard {
 public:
  KeyShard(int index, const ServerJob& job);
  KeyShard(const KeyShard&) = delete;
  KeyShard& operator=(const KeyShard&) = delete;

  // Handles one message from the I/O thread and appends the replies it causes to *out.
  // Returns false for StopCommand (the thread then ends).
  bool Handle(ShardMessage message, std::vector<OutgoingReply>* out);

  // "key shard I stops after R rounds on K keys, refused F requests; pushes by worker: 0=N 1=M"
  // (the per-worker push counts show who pushed: one local root per machine when
  // hierarchical).
  std::string Summary() const;

  const KeyStore& store() const { return store_; }
  // Before the shard's thread starts: its rounds go to the timeline and the metrics (either
  // may be null: that part off), through its own RoundTelemetry.
  void Observe(telemetry::Timeline* timeline, telemetry::NodeMetrics* metrics);

 private:
  bool HandleCommand(const ServerCommand& command, std::vector<OutgoingReply>* out);

  int index_;
  int my_rank_;
  Catalog catalog_;  // updated in order with the requests, so no lock is shared
  KeyStore store_;
  std::unique_ptr<RoundTelemetry> telemetry_;
};

}  // namespace bytecomp::server
