// Addresses: host:port parsing, ZeroMQ endpoints, and which local address to advertise.
#pragma once

#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace bytecomp {

struct HostPort {
  std::string host;
  int port = 0;
};

// "host:port" or "tcp://host:port"; port in [1, 65535].
absl::StatusOr<HostPort> ParseHostPort(absl::string_view address);
std::string TcpEndpoint(absl::string_view host, int port);
// OK when `host` (a name or an address) resolves; else Unavailable with the resolver's reason.
absl::Status ResolveHost(const std::string& host);
// The local IPv4 address the kernel would use to reach `remote_host` (no packet is sent),
// so nodes advertise an address their peers can reach without naming an interface.
absl::StatusOr<std::string> LocalAddressToward(const std::string& remote_host);
// The host a node advertises to its peers: `advertise_host` when set, else the local address
// towards the scheduler at `scheduler_address` (ClusterConfig's fields of those names).
absl::StatusOr<std::string> AdvertisedHost(const std::string& advertise_host,
                                           absl::string_view scheduler_address);
std::string Hostname();
// The remote address of connected socket `fd` ("1.2.3.4:5678", or "1.2.3.4" without the
// port), or "" when it has none (not connected, not TCP).
std::string RemoteAddressOf(int fd, bool with_port = true);

}  // namespace bytecomp
