// A key shard: the keys whose hash falls to it (ShardOf), its own copy of the catalog, and the
// KeyStore that sums them. Each shard runs on its own thread and shares nothing with the other
// shards, so the data path takes no lock. Socket-free: the shard thread hands it each message
// from the I/O thread and sends the replies back.
//
// Shard messages (from the I/O thread, over inproc) start with a kind frame, so that a peer's
// routing identity can never read as a command:
//   [kRequest, identity, header, payload?]  a validated PUSH or PULL for one of its keys
//   [kDeclare, DeclareReply]  [kStrategy, Strategy]  [kFail, reason]  [kStop]
//   [kMove, KeysMoved] (server failover: partitions of a lost server that are now whose they
//   say; this server's resume as a replacement's do)
// and, for the I/O thread alone, [kLost, rank] (a server was lost: requests for its keys wait,
// parked, for a KeysMoved).
// The control thread sends the I/O thread the same command messages; the I/O thread applies
// them to its own catalog and forwards them to every shard.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "bytecomp/server/catalog.h"
#include "bytecomp/server/key_store.h"
#include "bytecomp/server/server_job.h"
#include "zmq.hpp"

namespace bytecomp::server {

enum class ShardMessageKind : char {
  kRequest = 'r',
  kDeclare = 'd',   // body: a serialized proto::DeclareReply
  kStrategy = 's',  // body: a serialized proto::Strategy
  kFail = 'f',      // body: why held pulls fail (a node failed)
  kStop = 'x',      // no body
  kMove = 'm',      // body: a serialized proto::KeysMoved
  kLost = 'l',      // body: the lost server's rank, in decimal (the I/O thread's alone)
};

// A command message: [kind, body] (no body frame for kStop).
std::vector<zmq::message_t> ShardCommand(ShardMessageKind kind, absl::string_view body = {});
// A request message: the kRequest frame, then the request's frames (identity, header, payload?).
std::vector<zmq::message_t> ShardRequest(std::vector<zmq::message_t> request);
// The kind of a shard message; false when its first frame is not one.
bool ParseShardMessageKind(const std::vector<zmq::message_t>& message, ShardMessageKind* kind);

// The shard that owns a key, of num_shards (> 0). Every partition of a tensor may land on a
// different shard.
size_t ShardOf(uint64_t key, size_t num_shards);

class KeyShard {
 public:
  KeyShard(int index, const ServerJob& job);
  KeyShard(const KeyShard&) = delete;
  KeyShard& operator=(const KeyShard&) = delete;

  // Handles one shard message and appends the replies it causes to *out. Returns false for
  // kStop (the thread then ends). A message that is none of the above is dropped, logged.
  bool Handle(std::vector<zmq::message_t> message, std::vector<OutgoingReply>* out);

  // "key shard I stops after R rounds on K keys, refused F requests; pushes by worker: 0=N 1=M"
  // (the per-worker push counts show who pushed: one local root per machine when
  // hierarchical).
  std::string Summary() const;

  const KeyStore& store() const { return store_; }
  // Before the shard's thread starts: KeyStore::Observe.
  void Observe(telemetry::Timeline* timeline, telemetry::NodeMetrics* metrics) {
    store_.Observe(timeline, metrics);
  }

 private:
  int index_;
  int my_rank_;
  Catalog catalog_;  // updated in order with the requests, so no lock is shared
  KeyStore store_;
};

}  // namespace bytecomp::server
