#include "bytecomp/common/net.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace bytecomp {

absl::StatusOr<HostPort> ParseHostPort(absl::string_view address) {
  absl::string_view rest = address;
  if (absl::StartsWith(rest, "tcp://")) rest.remove_prefix(6);
  const size_t colon = rest.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(absl::StrCat("address '", address, "' is not host:port"));
  }
  HostPort hp;
  hp.host = std::string(rest.substr(0, colon));
  if (!absl::SimpleAtoi(rest.substr(colon + 1), &hp.port) || hp.port < 1 || hp.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("address '", address, "' has no valid port (1-65535)"));
  }
  return hp;
}

std::string TcpEndpoint(absl::string_view host, int port) {
  return absl::StrCat("tcp://", host, ":", port);
}

absl::Status ResolveHost(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res); rc != 0) {
    return absl::UnavailableError(gai_strerror(rc));
  }
  freeaddrinfo(res);
  return absl::OkStatus();
}

absl::StatusOr<std::string> LocalAddressToward(const std::string& remote_host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(remote_host.c_str(), "9", &hints, &res); rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve '", remote_host, "': ", gai_strerror(rc)));
  }
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  std::string result;
  absl::Status status;
  if (fd < 0) {
    status = absl::InternalError(absl::StrCat("socket(): ", std::strerror(errno)));
  } else if (connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
    status = absl::UnavailableError(
        absl::StrCat("no route to '", remote_host, "': ", std::strerror(errno)));
  } else {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf));
    result = buf;
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  if (!status.ok()) return status;
  return result;
}

absl::StatusOr<std::string> AdvertisedHost(const std::string& advertise_host,
                                           absl::string_view scheduler_address) {
  if (!advertise_host.empty()) return advertise_host;
  absl::StatusOr<HostPort> scheduler = ParseHostPort(scheduler_address);
  if (!scheduler.ok()) return scheduler.status();
  return LocalAddressToward(scheduler->host);
}

std::string Hostname() {
  char buf[256] = {0};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

std::string RemoteAddressOf(int fd, bool with_port) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (fd < 0 || getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "";
  char host[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&address);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    return with_port ? absl::StrCat(host, ":", ntohs(in->sin_port)) : std::string(host);
  }
  if (address.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&address);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    return with_port ? absl::StrCat("[", host, "]:", ntohs(in6->sin6_port)) : std::string(host);
  }
  return "";
}

}  // namespace bytecomp
