// Link probes: latency and bandwidth between a worker (or bytecomp-linkprobe) and each server,
// measured over the data connection with OP_PROBE requests (proto/data.proto).
//
// Per server: one uncounted small probe (it absorbs the connection set-up), then
// latency_probes small round trips (latency_bytes each way), then `transfers` times an up
// transfer (transfer_bytes to the server, a header-only reply) and a down transfer (a
// header-only request, transfer_bytes back). Latency is the median small round trip; a
// direction's bandwidth is transfer_bytes * 8 bits over (its median round trip - latency).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "cluster_config.pb.h"
#include "control.pb.h"
#include "zmq.hpp"

namespace bytecomp {

// Largest probe payload either way; the server refuses larger requests.
inline constexpr int64_t kMaxProbeBytes = int64_t{64} << 20;

struct LinkProbeOptions {
  int latency_probes = 16;
  int64_t latency_bytes = 16;
  int transfers = 3;  // per direction; 0: no probes at all
  int64_t transfer_bytes = int64_t{1} << 20;
  int64_t timeout_ms = 5000;  // for every server together
};

// The options a cluster config sets (defaults applied, WithClusterDefaults).
LinkProbeOptions LinkProbeOptionsFrom(const proto::ClusterConfig& config);

// One probe exchange with one server: send send_bytes, wait for a reply carrying reply_bytes.
class ProbeExchange {
 public:
  virtual ~ProbeExchange() = default;
  // DeadlineExceeded if no reply came by deadline_us (on the caller's clock); the error reply
  // of the server otherwise, or OK.
  virtual absl::Status RoundTrip(int64_t send_bytes, int64_t reply_bytes, int64_t deadline_us) = 0;
};

// Round trips of one server's probes, in us.
struct LinkSamples {
  std::vector<int64_t> latency_us;
  std::vector<int64_t> up_us;
  std::vector<int64_t> down_us;
};

// Runs one server's probes, stopping at deadline_us or the first failed exchange (returned;
// the samples hold what completed). clock() gives the time in us.
absl::Status CollectLinkSamples(ProbeExchange& exchange, const LinkProbeOptions& options,
                                int64_t deadline_us, const std::function<int64_t()>& clock,
                                LinkSamples* samples);

// Latency and bandwidths from samples (0 where a kind has none).
proto::LinkProbe SummarizeLinkSamples(int server, const LinkSamples& samples,
                                      int64_t transfer_bytes);

// Probes servers[i] (server i) in turn, from first_server on (workers start at their rank, so
// that W <= S workers probe distinct servers at a time); each gets an equal share of the time
// still left. A server whose probes did not all complete carries the error.
proto::LinkProbeReport ProbeLinks(const std::vector<ProbeExchange*>& servers,
                                  const LinkProbeOptions& options,
                                  const std::function<int64_t()>& clock, int first_server = 0);

// OP_PROBE exchanges over a DEALER socket connected to a server. Replies to other requests
// (a probe that timed out earlier) are dropped. request ids come from *next_request_id.
class ZmqProbeExchange final : public ProbeExchange {
 public:
  ZmqProbeExchange(zmq::socket_t& socket, int sender, uint64_t* next_request_id)
      : socket_(socket), sender_(sender), next_request_id_(next_request_id) {}
  absl::Status RoundTrip(int64_t send_bytes, int64_t reply_bytes, int64_t deadline_us) override;

 private:
  zmq::socket_t& socket_;
  int sender_;
  uint64_t* next_request_id_;
};

// A payload frame of `bytes` zeros, zero-copy from a static buffer (bytes <= kMaxProbeBytes).
zmq::message_t ProbePayload(int64_t bytes);

}  // namespace bytecomp
