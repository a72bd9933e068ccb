// What the server's I/O thread decides for every message it receives; socket-free, so the I/O
// loop only moves messages between its sockets and this class.
//   A data request from a worker (identity, header, payload?): a PUSH or PULL that passes the
//     RequestValidator goes to the key shard that owns its key (ShardOf); one naming a tensor
//     or strategy version not heard of yet waits, parked, up to kUndeclaredGraceMs (the worker
//     may learn of it a moment before this server); anything else is answered with OP_ERROR
//     saying what is wrong. A link probe is answered here, off the key shards (BandwidthTurn).
//   A command from the control thread (a ServerCommand, shard_messages.h): a declaration or
//     strategy updates this thread's catalog, is forwarded to every shard, and then releases
//     the parked requests, so a shard hears of a key before any request for it; a failure, a
//     move of a lost server's keys and the stop are forwarded to every shard, a lost server is
//     this thread's alone.
// What goes to a shard is typed (a ShardRequest carries the header parsed here), so nothing is
// parsed twice.
#pragma once

#include "bytecomp/telemetry/metrics.h"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "bytecomp/common/refusal_log.h"
#include "bytecomp/server/bandwidth_turn.h"
#include "bytecomp/server/request_validator.h"
#include "bytecomp/server/server_job.h"
#include "bytecomp/server/shard_messages.h"
#include "data.pb.h"
#include "zmq.hpp"

namespace bytecomp::server {

// How long a request for a key not yet declared waits for the scheduler's declaration.
inline constexpr int64_t kUndeclaredGraceMs = 3000;
// At most this many requests, of at most ParkedBytesBound(job) bytes in all, wait parked;
// beyond either a request is validated (and refused) at once. Many: a burst of small tensors'
// declarations may trail their requests by thousands (the scheduler's replies reach servers and
// workers on separate connections); the bytes bound what that may hold.
inline constexpr size_t kMaxParkedRequests = 65536;
// Twice what the job's workers may have in flight to one server unacknowledged (each its
// max_inflight_bytes_per_server, or a partition, and one message beyond it: the largest a
// partition encodes to), and at least kMinParkedBytes: a peer that sends requests for keys
// never declared holds no more than the job's own workers could. Each worker (the sender a
// request's token proves) may hold its share of it, ParkedBytesBound / workers, so one that
// sends requests for keys never declared takes no other worker's room: at 1,024 workers the
// bound is large (what they may all have in flight), a worker's share is not.
size_t ParkedBytesBound(const ServerJob& job);
inline constexpr size_t kMinParkedBytes = size_t{64} << 20;
// What one peer may leave unread of the replies it is sent (PeerBacklog) before it is cut:
// twice the largest replies one round of this server's keys sends a worker (8 bytes an element:
// a codec at ratio 1 sends a value and an index each), and at least kMinUnreadReplyBytes (link
// probe transfers, keys not declared yet).
inline constexpr int64_t kMinUnreadReplyBytes = int64_t{64} << 20;

// What to send, in order per destination.
struct DispatchOutbox {
  // To the ROUTER socket: identity, header, payload? (error replies and probe replies).
  std::vector<std::vector<zmq::message_t>> to_router;
  // To key shard `first`.
  std::vector<std::pair<size_t, ShardMessage>> to_shards;
};

class RequestDispatcher {
 public:
  // num_shards > 0. Where the job seals its data messages (job.worker_data_keys), a request's
  // header comes opened and its payload still sealed (MessageOpener::OpenFirst): the key shard
  // opens it, and its size here is the sealed frame's less kSealOverheadBytes.
  RequestDispatcher(const ServerJob& job, size_t num_shards);

  // A message from the ROUTER socket at now_ms.
  void HandleRequest(std::vector<zmq::message_t> frames, int64_t now_ms, DispatchOutbox* out);
  // A command from the control thread; returns false for StopCommand (the loop then ends).
  bool HandleCommand(const ServerCommand& command, int64_t now_ms, DispatchOutbox* out);
  // Validates, and so routes or refuses, requests parked longer than kUndeclaredGraceMs.
  void ExpireParked(int64_t now_ms, DispatchOutbox* out);

  // Counts refusals by reason, and the parked requests, into `metrics` (null: none).
  void Observe(telemetry::NodeMetrics* metrics);

  size_t parked() const { return parked_count_; }
  size_t parked_bytes_bound() const { return parked_bytes_bound_; }
  // What a peer may leave unread of its replies now (kMinUnreadReplyBytes); it grows with the
  // keys declared on this server.
  int64_t UnreadReplyBound();
  uint64_t requests() const { return requests_; }
  uint64_t rejected() const { return rejected_; }
  // Requests refused because they did not carry the token of the worker they named.
  uint64_t rejected_without_token() const { return rejected_without_token_; }
  // "served N requests; rejected M (K without the sender's token); refused ... from P peers
  // (L log lines held back)", for the log at exit.
  std::string Summary() const;

 private:
  struct Parked {
    int64_t since_ms;
    uint64_t sequence;  // its place in parked_order_
    size_t bytes;
    int sender;  // its worker rank, which CheckSender proved
    std::vector<zmq::message_t> frames;
  };

  // arrived_ms: when the request first arrived; a request released from parking and parked
  // again keeps it, so it waits kUndeclaredGraceMs in all.
  void Dispatch(std::vector<zmq::message_t> frames, bool may_park, int64_t arrived_ms,
                int64_t now_ms, DispatchOutbox* out);
  void AnswerProbe(zmq::message_t& identity, const proto::DataHeader& request, size_t payload_size,
                   bool has_payload, int64_t now_ms, DispatchOutbox* out);
  // `reason`: the metrics' label, a fixed word for the kind of refusal.
  void Reject(zmq::message_t& identity, const proto::DataHeader& request, const std::string& why,
              int64_t now_ms, DispatchOutbox* out, const char* reason = "invalid request");
  void ToEveryShard(const ServerCommand& command, DispatchOutbox* out) const;
  void Park(uint32_t tensor, int sender, int64_t arrived_ms, size_t bytes,
            std::vector<zmq::message_t> frames);
  void Unparked(const Parked& p);
  // Dispatches again, in arrival order, the requests parked for `tensor` (nullopt: all).
  void ReleaseParked(std::optional<uint32_t> tensor, int64_t now_ms, DispatchOutbox* out);

  int my_rank_;
  size_t num_shards_;
  size_t payload_seal_bytes_;  // what a sealed payload adds to its size (0: not sealed)
  RequestValidator validator_;
  BandwidthTurn bandwidth_turn_;
  // Requests that arrived before their tensor's declaration (or their strategy version), per
  // tensor id in arrival order: a declaration releases its tensor's alone, so a burst of
  // declarations behind a burst of requests costs each declaration only its own requests.
  // parked_order_ holds (sequence, tensor) of each parked request in arrival order, for
  // expiry; entries of requests released since are skipped there.
  absl::flat_hash_map<uint32_t, std::deque<Parked>> parked_;
  std::deque<std::pair<uint64_t, uint32_t>> parked_order_;
  size_t parked_count_ = 0;
  size_t parked_bytes_ = 0;  // of the parked requests' frames
  size_t parked_bytes_bound_;
  size_t parked_bytes_per_worker_;              // a worker's share of parked_bytes_bound_
  std::vector<size_t> parked_bytes_by_sender_;  // by worker rank
  uint64_t park_sequence_ = 0;
  RefusalLog refusals_;
  uint64_t requests_ = 0;
  uint64_t rejected_ = 0;
  telemetry::NodeMetrics* metrics_ = nullptr;
  prometheus::Gauge* parked_gauge_ = nullptr;
  uint64_t rejected_without_token_ = 0;
};

}  // namespace bytecomp::server
