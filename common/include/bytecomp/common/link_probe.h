// Link probes: latency and bandwidth between a worker (or bytecomp-linkprobe) and each server,
// measured over the data connection with OP_PROBE requests (proto/data.proto).
//
// Per server: one uncounted small probe (it absorbs the connection set-up), then
// latency_probes small round trips (latency_bytes each way), then `transfers` times an up
// transfer (transfer_bytes to the server, a header-only reply) and a down transfer (a
// header-only request, transfer_bytes back). Latency is the median small round trip; a
// direction's bandwidth is transfer_bytes * 8 bits over (its median round trip - latency).
//
// The transfers to one server are taken one prober at a time: with more workers than servers,
// all probing at start, concurrent transfers through one server's link would each measure a
// share of it (4 workers on one 1 Gbit/s server saw 0.3 Gbit/s each). So before its transfers
// a prober asks the server for the bandwidth turn (PROBE_TURN_BEGIN, proto/data.proto); on
// PROBE_TURN_BUSY it waits a few ms (backing off) and asks again, within its time limit; after
// its last transfer a small probe with PROBE_TURN_END gives the turn back. The server takes back
// the turn of a holder that went quiet (kProbeTurnQuietMs) or whose time limit passed, so a dead or
// slow prober cannot block the others. Small probes need no turn and stay concurrent. A worker
// done with its probes waits for the others (AwaitOtherProbers) before it pushes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bytecomp/common/sealed_messages.h"
#include "cluster_config.pb.h"
#include "control.pb.h"
#include "data.pb.h"
#include "zmq.hpp"

namespace bytecomp {

// Largest probe payload either way; the server refuses larger requests.
inline constexpr int64_t kMaxProbeBytes = int64_t{64} << 20;
// Longest bandwidth turn a prober may ask for (PROBE_TURN_BEGIN's probe_turn_ms).
inline constexpr int64_t kMaxProbeTurnMs = 600000;
// A server takes the turn back from a holder that sent no probe for this long. A down and the
// next up transfer (2 x 1 MiB by default) must fit: links down to about 17 Mbit/s.
inline constexpr int64_t kProbeTurnQuietMs = 1000;
// A prober told BUSY asks again after this long, doubled on every BUSY up to the maximum.
inline constexpr int64_t kProbeTurnFirstWaitUs = 2000;
inline constexpr int64_t kProbeTurnMaxWaitUs = 32000;

struct LinkProbeOptions {
  int latency_probes = 16;
  int64_t latency_bytes = 16;
  int transfers = 3;  // per direction; 0: no probes at all
  int64_t transfer_bytes = int64_t{1} << 20;
  int64_t timeout_ms = 5000;  // for every server together
};

// The options a cluster config sets (defaults applied, WithClusterDefaults).
LinkProbeOptions LinkProbeOptionsFrom(const proto::ClusterConfig& config);

// One probe: send_bytes to the server, reply_bytes back, and what it says of the turn.
struct ProbeRequest {
  int64_t send_bytes = 0;
  int64_t reply_bytes = 0;
  proto::ProbeTurn turn = proto::PROBE_TURN_NONE;  // BEGIN: ask for it; END: give it back
  int64_t turn_ms = 0;                             // BEGIN: the longest the turn is held
};

// One probe exchange with one server: send a request, wait for its reply.
class ProbeExchange {
 public:
  virtual ~ProbeExchange() = default;
  // The reply's probe_turn (GRANTED or BUSY for a BEGIN, NONE otherwise). DeadlineExceeded if
  // no reply came by deadline_us (on the caller's clock); the error reply of the server.
  virtual absl::StatusOr<proto::ProbeTurn> RoundTrip(const ProbeRequest& request,
                                                     int64_t deadline_us) = 0;
  // Waits `us` before asking for the turn again (on the caller's clock).
  virtual void Wait(int64_t us);
};

// Round trips of one server's probes, in us, and the time spent waiting for the turn.
struct LinkSamples {
  std::vector<int64_t> latency_us;
  std::vector<int64_t> up_us;
  std::vector<int64_t> down_us;
  int64_t turn_wait_us = 0;  // from the first BEGIN to GRANTED (or to the time limit)
  bool got_turn = false;
};

// Runs one server's probes, stopping at deadline_us or the first failed exchange (returned;
// the samples hold what completed). The transfers wait for the server's bandwidth turn, asked
// for until deadline_us. clock() gives the time in us.
//
// machine_turn: the server on the prober's own machine (null: none, or not known). A machine
// that runs a server beside a worker (BytePS's colocated layout) carries on its one link both
// the worker's probes and the replies of its server to other probers: measured at once, each
// saw a share (0.04-0.11 of a 0.1 Gbit/s link, 4 workers and 4 colocated servers). With
// machine_turn, the prober holds that server's turn too (asked for first, given back while it
// waits for the other), from the latency probes to its last transfer, so that no other prober
// uses either machine's link meanwhile; a small probe after each transfer pair keeps that turn
// alive. The machine's own server (machine_turn == &exchange) takes one turn, as without.
absl::Status CollectLinkSamples(ProbeExchange& exchange, const LinkProbeOptions& options,
                                int64_t deadline_us, const std::function<int64_t()>& clock,
                                LinkSamples* samples, ProbeExchange* machine_turn = nullptr);

// Latency and bandwidths from samples (0 where a kind has none).
proto::LinkProbe SummarizeLinkSamples(int server, const LinkSamples& samples,
                                      int64_t transfer_bytes);

// Probes servers[i] (server i) in turn, from first_server on (workers start at their rank, so
// that W <= S workers probe distinct servers at a time); each gets an equal share of the time
// still left. A server whose probes did not all complete carries the error. machine_server:
// the index of the server on the prober's machine (CollectLinkSamples' machine_turn), or -1.
proto::LinkProbeReport ProbeLinks(const std::vector<ProbeExchange*>& servers,
                                  const LinkProbeOptions& options,
                                  const std::function<int64_t()>& clock, int first_server = 0,
                                  int machine_server = -1);

// The server that runs on this machine: the one server whose data address (tcp://host:port,
// host a numeric IPv4 or IPv6 address) is one of local_addresses (this machine's interface
// addresses, loopback left out by the caller), or -1 when none or several are (a job on one
// machine: every link is local).
int ServerOnThisMachine(const std::vector<std::string>& server_addresses,
                        const std::vector<std::string>& local_addresses);

// This machine's interface addresses, numeric, loopback left out (getifaddrs).
std::vector<std::string> LocalInterfaceAddresses();

// Waits until no prober holds or waits for the bandwidth turn of any server (PROBE_TURN_QUERY
// until PROBE_TURN_IDLE), or deadline_us: a worker done with its probes calls it before its
// first push, which would otherwise cross a link that another worker is still measuring.
absl::Status AwaitOtherProbers(const std::vector<ProbeExchange*>& servers, int64_t deadline_us,
                               const std::function<int64_t()>& clock);

// OP_PROBE exchanges over a DEALER socket connected to a server (the server knows the turn's
// holder by this connection). Replies to other requests (a probe that timed out earlier) are
// dropped. request ids come from *next_request_id. Where the job seals its data messages,
// `seals` seals the probes and opens the replies (a reply that does not open is dropped).
class ZmqProbeExchange final : public ProbeExchange {
 public:
  ZmqProbeExchange(zmq::socket_t& socket, int sender, uint64_t* next_request_id,
                   DataSeals* seals = nullptr)
      : socket_(socket), sender_(sender), next_request_id_(next_request_id), seals_(seals) {}
  absl::StatusOr<proto::ProbeTurn> RoundTrip(const ProbeRequest& request,
                                             int64_t deadline_us) override;

 private:
  zmq::socket_t& socket_;
  int sender_;
  uint64_t* next_request_id_;
  DataSeals* seals_;
};

// A payload frame of `bytes` zeros, zero-copy from a static buffer (bytes <= kMaxProbeBytes).
zmq::message_t ProbePayload(int64_t bytes);

}  // namespace bytecomp
