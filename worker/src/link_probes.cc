// The link probes at start: on the data thread, after connecting and before the first push
// (operations queue meanwhile; the engine's callers are not held up), bounded by
// ClusterConfig.link_probe_timeout_ms. The report goes to the scheduler. Every worker starts at
// server (rank mod S), so that with several servers they wait for different servers' bandwidth
// turns (common/link_probe.h). Where a server runs on this worker's machine (the colocated
// layout), its turn is held too, so that no other prober shares this machine's link.
#include "absl/strings/str_cat.h"
#include "data_loop.h"

namespace bytecomp::worker {

void DataLoop::ProbeLinks(uint64_t* next_request) {
  const LinkProbeOptions options = LinkProbeOptionsFrom(*w_.config);
  if (options.transfers <= 0) return;
  std::vector<ZmqProbeExchange> exchanges;
  exchanges.reserve(sockets_.sockets().size());
  for (auto& conns : sockets_.sockets()) {
    exchanges.emplace_back(conns.front(), w_.rank, next_request, &seals_);
  }
  std::vector<ProbeExchange*> servers;
  for (auto& e : exchanges) servers.push_back(&e);
  proto::ControlMessage message;
  proto::LinkProbeReport* report = message.mutable_link_probe_report();
  const int64_t deadline_us = MonotonicUs() + options.timeout_ms * 1000;
  std::vector<std::string> addresses;  // by server index, as Run opened the sockets
  for (const proto::ServerInfo& server : w_.topology->servers()) {
    addresses.push_back(server.data_address());
  }
  const int machine_server = ServerOnThisMachine(addresses, LocalInterfaceAddresses());
  if (machine_server >= 0) {
    BC_LOG_DEBUG("link probes: server ", machine_server,
                 " runs on this machine; its bandwidth turn is held with each probed server's");
  }
  *report = bytecomp::ProbeLinks(servers, options, &MonotonicUs, w_.rank, machine_server);
  // Our pushes would cross the links of workers still measuring: wait for them (they are
  // needed for the first round anyway), within the same time limit.
  if (absl::Status s = AwaitOtherProbers(servers, deadline_us, &MonotonicUs); !s.ok()) {
    BC_LOG_WARNING(s.message());
  }
  for (const proto::LinkProbe& link : report->links()) {
    if (!link.error().empty()) {
      BC_LOG_WARNING("link probe of server ", link.server(), ": ", link.error());
    }
    BC_LOG_DEBUG("link to server ", link.server(), ": latency ", link.latency_us(), " us, up ",
                 link.up_gbps(), " Gbit/s, down ", link.down_gbps(), " Gbit/s");
  }
  w_.to_control->Push(SendControl{std::move(message)});
}

}  // namespace bytecomp::worker
