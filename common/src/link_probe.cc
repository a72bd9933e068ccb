#include "bytecomp/common/link_probe.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/net.h"
#include "bytecomp/common/stats.h"
#include "bytecomp/common/transport.h"
#include "data.pb.h"

namespace bytecomp {
namespace {

double MedianUs(const std::vector<int64_t>& us) {
  return Median(std::vector<double>(us.begin(), us.end()));
}

// A direction's bandwidth: the payload over the median round trip less the small probes'.
double Gbps(const std::vector<int64_t>& round_trips_us, double latency_us, int64_t bytes) {
  if (round_trips_us.empty()) return 0;
  const double total = MedianUs(round_trips_us);
  const double transfer = total > latency_us ? total - latency_us : total;
  if (transfer <= 0) return 0;
  return static_cast<double>(bytes) * 8 / (transfer * 1000);  // bits per us = Mbit/s
}

void NoFree(void* /*data*/, void* /*hint*/) {}

}  // namespace

LinkProbeOptions LinkProbeOptionsFrom(const proto::ClusterConfig& config) {
  LinkProbeOptions o;
  o.transfers = config.link_probe_count();
  o.transfer_bytes = config.link_probe_bytes();
  o.latency_probes = config.link_latency_probes();
  o.timeout_ms = config.link_probe_timeout_ms();
  return o;
}

zmq::message_t ProbePayload(int64_t bytes) {
  // Never freed: ZeroMQ may still be sending from it when the caller is gone. calloc'd pages
  // that are only read stay shared zero pages, so this costs address space, not memory.
  static char* const zeros = static_cast<char*>(std::calloc(kMaxProbeBytes, 1));
  const size_t size = static_cast<size_t>(std::clamp<int64_t>(bytes, 0, kMaxProbeBytes));
  return zmq::message_t(zeros, size, &NoFree, nullptr);
}

void ProbeExchange::Wait(int64_t us) { std::this_thread::sleep_for(std::chrono::microseconds(us)); }

namespace {

// Sends `ask` (a BEGIN or a QUERY) until the answer is `want`, waiting a few ms more after
// every BUSY; DeadlineExceeded(on_deadline) once deadline_us passed. *waited_us: the time
// since the first ask.
absl::Status AskUntil(ProbeExchange& exchange, ProbeRequest ask, proto::ProbeTurn want,
                      int64_t deadline_us, const std::function<int64_t()>& clock,
                      const char* on_deadline, int64_t* waited_us) {
  const int64_t start = clock();
  int64_t wait_us = kProbeTurnFirstWaitUs;
  while (true) {
    if (ask.turn == proto::PROBE_TURN_BEGIN) {
      // The server may take the turn back once this prober's time limit passed.
      ask.turn_ms = std::clamp<int64_t>((deadline_us - clock() + 999) / 1000, 1, kMaxProbeTurnMs);
    }
    absl::StatusOr<proto::ProbeTurn> answer = exchange.RoundTrip(ask, deadline_us);
    *waited_us = clock() - start;
    if (!answer.ok()) return answer.status();
    if (*answer == want) return absl::OkStatus();
    if (*answer != proto::PROBE_TURN_BUSY) {
      return absl::DataLossError(absl::StrCat("link probe: the reply to ",
                                              proto::ProbeTurn_Name(ask.turn), " says ",
                                              proto::ProbeTurn_Name(*answer), ", not ",
                                              proto::ProbeTurn_Name(want), " or PROBE_TURN_BUSY"));
    }
    const int64_t left = deadline_us - clock();
    if (left <= 0) break;
    exchange.Wait(std::min(wait_us, left));
    wait_us = std::min(2 * wait_us, kProbeTurnMaxWaitUs);
    if (clock() >= deadline_us) break;
  }
  *waited_us = clock() - start;
  return absl::DeadlineExceededError(on_deadline);
}

// Asks for the server's bandwidth turn until it is granted or deadline_us passes.
absl::Status AwaitTurn(ProbeExchange& exchange, int64_t deadline_us,
                       const std::function<int64_t()>& clock, LinkSamples* samples) {
  absl::Status s = AskUntil(
      exchange, ProbeRequest{0, 0, proto::PROBE_TURN_BEGIN}, proto::PROBE_TURN_GRANTED, deadline_us,
      clock, "link probe: no bandwidth turn before the time limit (another prober held it)",
      &samples->turn_wait_us);
  samples->got_turn = s.ok();
  return s;
}

// Both turns: the machine's server's first, then the probed server's, asked once; when that
// one is busy, the machine's turn is given back for the wait (two probers each holding the
// other's machine turn would otherwise wait for each other until the time limit).
absl::Status AwaitBothTurns(ProbeExchange& exchange, ProbeExchange& machine, int64_t deadline_us,
                            const std::function<int64_t()>& clock, LinkSamples* samples) {
  const int64_t start = clock();
  int64_t wait_us = kProbeTurnFirstWaitUs;
  while (true) {
    int64_t waited_us = 0;
    absl::Status s = AskUntil(
        machine, ProbeRequest{0, 0, proto::PROBE_TURN_BEGIN}, proto::PROBE_TURN_GRANTED,
        deadline_us, clock,
        "link probe: no bandwidth turn of this machine's server before the time limit", &waited_us);
    samples->turn_wait_us = clock() - start;
    if (!s.ok()) return s;
    ProbeRequest begin{0, 0, proto::PROBE_TURN_BEGIN};
    begin.turn_ms = std::clamp<int64_t>((deadline_us - clock() + 999) / 1000, 1, kMaxProbeTurnMs);
    absl::StatusOr<proto::ProbeTurn> answer = exchange.RoundTrip(begin, deadline_us);
    samples->turn_wait_us = clock() - start;
    if (answer.ok() && *answer == proto::PROBE_TURN_GRANTED) {
      samples->got_turn = true;
      return absl::OkStatus();
    }
    // Given back before anything else, also when the ask failed.
    absl::StatusOr<proto::ProbeTurn> end =
        machine.RoundTrip(ProbeRequest{0, 0, proto::PROBE_TURN_END}, deadline_us);
    if (!answer.ok()) return answer.status();
    if (*answer != proto::PROBE_TURN_BUSY) {
      return absl::DataLossError(absl::StrCat("link probe: the reply to PROBE_TURN_BEGIN says ",
                                              proto::ProbeTurn_Name(*answer),
                                              ", not PROBE_TURN_GRANTED or PROBE_TURN_BUSY"));
    }
    if (!end.ok()) return end.status();
    const int64_t left = deadline_us - clock();
    if (left <= 0) break;
    exchange.Wait(std::min(wait_us, left));
    wait_us = std::min(2 * wait_us, kProbeTurnMaxWaitUs);
    if (clock() >= deadline_us) break;
  }
  samples->turn_wait_us = clock() - start;
  return absl::DeadlineExceededError(
      "link probe: no bandwidth turn before the time limit (another prober held it)");
}

}  // namespace

absl::Status CollectLinkSamples(ProbeExchange& exchange, const LinkProbeOptions& o,
                                int64_t deadline_us, const std::function<int64_t()>& clock,
                                LinkSamples* samples, ProbeExchange* machine_turn) {
  auto timed = [&](const ProbeRequest& request, std::vector<int64_t>* into) -> absl::Status {
    const int64_t start = clock();
    absl::StatusOr<proto::ProbeTurn> answer = exchange.RoundTrip(request, deadline_us);
    if (answer.ok() && into != nullptr) into->push_back(clock() - start);
    return answer.status();
  };
  if (machine_turn == &exchange) machine_turn = nullptr;  // the machine's own server: one turn
  const ProbeRequest small{o.latency_bytes, o.latency_bytes};
  if (absl::Status s = timed(small, nullptr); !s.ok()) return s;
  const bool both = machine_turn != nullptr && o.transfers > 0;
  if (both) {
    if (absl::Status s = AwaitBothTurns(exchange, *machine_turn, deadline_us, clock, samples);
        !s.ok()) {
      return s;
    }
  }
  // Gives back what is held (the probed server's turn once the last reply arrived, not with the
  // last request: the next holder's first transfer must not meet that reply on the link).
  auto end = [&](absl::Status status) {
    if (samples->got_turn) {
      absl::Status s = timed({0, 0, proto::PROBE_TURN_END}, nullptr);
      if (status.ok()) status = s;
    }
    if (both) {
      absl::StatusOr<proto::ProbeTurn> s =
          machine_turn->RoundTrip(ProbeRequest{0, 0, proto::PROBE_TURN_END}, deadline_us);
      if (status.ok()) status = s.status();
    }
    return status;
  };
  // A failed exchange: with both turns, they are given back (a prober's own machine would
  // otherwise stay closed to the others until its server takes the turn back); with one,
  // the server takes it back (kProbeTurnQuietMs).
  auto fail = [&](absl::Status status) { return both ? end(std::move(status)) : status; };
  for (int i = 0; i < o.latency_probes; ++i) {
    if (absl::Status s = timed(small, &samples->latency_us); !s.ok()) return fail(s);
  }
  if (o.transfers <= 0) return absl::OkStatus();
  if (!both) {
    if (absl::Status s = AwaitTurn(exchange, deadline_us, clock, samples); !s.ok()) return s;
  }
  for (int i = 0; i < o.transfers; ++i) {
    if (absl::Status s = timed({o.transfer_bytes, 0}, &samples->up_us); !s.ok()) return fail(s);
    if (absl::Status s = timed({0, o.transfer_bytes}, &samples->down_us); !s.ok()) return fail(s);
    if (both) {  // the machine's server hears from its holder (kProbeTurnQuietMs)
      absl::StatusOr<proto::ProbeTurn> s = machine_turn->RoundTrip(ProbeRequest{0, 0}, deadline_us);
      if (!s.ok()) return fail(s.status());
    }
  }
  return end(absl::OkStatus());
}

proto::LinkProbe SummarizeLinkSamples(int server, const LinkSamples& samples,
                                      int64_t transfer_bytes) {
  proto::LinkProbe p;
  p.set_server(server);
  p.set_probe_bytes(transfer_bytes);
  const double latency = MedianUs(samples.latency_us);
  p.set_latency_us(latency);
  p.set_latency_samples(static_cast<int>(samples.latency_us.size()));
  p.set_up_gbps(Gbps(samples.up_us, latency, transfer_bytes));
  p.set_down_gbps(Gbps(samples.down_us, latency, transfer_bytes));
  p.set_transfer_samples(static_cast<int>(std::min(samples.up_us.size(), samples.down_us.size())));
  return p;
}

proto::LinkProbeReport ProbeLinks(const std::vector<ProbeExchange*>& servers,
                                  const LinkProbeOptions& options,
                                  const std::function<int64_t()>& clock, int first_server,
                                  int machine_server) {
  proto::LinkProbeReport report;
  const int64_t start = clock();
  const int64_t end = start + options.timeout_ms * 1000;
  const size_t n = servers.size();
  for (size_t i = 0; i < n; ++i) {
    const size_t server = (i + static_cast<size_t>(std::max(0, first_server))) % n;
    const int64_t now = clock();
    const int64_t share = std::max<int64_t>(0, end - now) / static_cast<int64_t>(n - i);
    LinkSamples samples;
    ProbeExchange* machine_turn = machine_server >= 0 && static_cast<size_t>(machine_server) < n
                                      ? servers[machine_server]
                                      : nullptr;
    absl::Status s =
        CollectLinkSamples(*servers[server], options, now + share, clock, &samples, machine_turn);
    proto::LinkProbe* link = report.add_links();
    *link = SummarizeLinkSamples(static_cast<int>(server), samples, options.transfer_bytes);
    if (!s.ok()) {
      const std::string turn =
          samples.got_turn || samples.turn_wait_us > 0
              ? absl::StrCat(", ", samples.got_turn ? "got" : "waited for",
                             " the bandwidth turn after ", samples.turn_wait_us / 1000, " ms")
              : "";
      link->set_error(absl::StrCat(s.message(), " (after ", samples.latency_us.size(), " of ",
                                   options.latency_probes, " small probes", turn, " and ",
                                   link->transfer_samples(), " of ", options.transfers,
                                   " transfers each way)"));
    }
  }
  report.set_elapsed_ms(static_cast<double>(clock() - start) / 1000);
  return report;
}

namespace {

// A numeric address in one spelling (inet_ntop's), or "" when it is not one.
std::string CanonicalAddress(std::string host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  char text[INET6_ADDRSTRLEN] = {};
  in_addr v4;
  in6_addr v6;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    return inet_ntop(AF_INET, &v4, text, sizeof(text)) != nullptr ? text : "";
  }
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    return inet_ntop(AF_INET6, &v6, text, sizeof(text)) != nullptr ? text : "";
  }
  return "";
}

}  // namespace

int ServerOnThisMachine(const std::vector<std::string>& server_addresses,
                        const std::vector<std::string>& local_addresses) {
  std::vector<std::string> local;
  for (const std::string& a : local_addresses) {
    if (std::string c = CanonicalAddress(a); !c.empty()) local.push_back(std::move(c));
  }
  int found = -1;
  for (size_t i = 0; i < server_addresses.size(); ++i) {
    absl::StatusOr<HostPort> endpoint = ParseHostPort(server_addresses[i]);
    if (!endpoint.ok()) continue;
    const std::string host = CanonicalAddress(endpoint->host);
    if (host.empty() || std::find(local.begin(), local.end(), host) == local.end()) continue;
    if (found >= 0) return -1;  // several: one machine's job
    found = static_cast<int>(i);
  }
  return found;
}

std::vector<std::string> LocalInterfaceAddresses() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ifa_addr->sa_family == AF_INET) {
      const in_addr& v4 = reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr;
      if ((ntohl(v4.s_addr) >> 24) == 127) continue;
      if (inet_ntop(AF_INET, &v4, text, sizeof(text)) != nullptr) out.emplace_back(text);
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      const in6_addr& v6 = reinterpret_cast<const sockaddr_in6*>(a->ifa_addr)->sin6_addr;
      if (IN6_IS_ADDR_LOOPBACK(&v6)) continue;
      if (inet_ntop(AF_INET6, &v6, text, sizeof(text)) != nullptr) out.emplace_back(text);
    }
  }
  freeifaddrs(list);
  return out;
}

absl::Status AwaitOtherProbers(const std::vector<ProbeExchange*>& servers, int64_t deadline_us,
                               const std::function<int64_t()>& clock) {
  for (size_t i = 0; i < servers.size(); ++i) {
    int64_t waited_us = 0;
    absl::Status s =
        AskUntil(*servers[i], ProbeRequest{0, 0, proto::PROBE_TURN_QUERY}, proto::PROBE_TURN_IDLE,
                 deadline_us, clock, "other probers still measuring at the time limit", &waited_us);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("link probe: server ", i, ": ", s.message(),
                                                 " (waited ", waited_us / 1000, " ms)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<proto::ProbeTurn> ZmqProbeExchange::RoundTrip(const ProbeRequest& request,
                                                             int64_t deadline_us) {
  const int64_t send_bytes = request.send_bytes;
  const int64_t reply_bytes = request.reply_bytes;
  const uint64_t id = (*next_request_id_)++;
  proto::DataHeader header;
  header.set_op(proto::OP_PROBE);
  header.set_sender(sender_);
  header.set_request_id(id);
  header.set_payload_bytes(send_bytes);
  header.set_probe_reply_bytes(reply_bytes);
  header.set_probe_turn(request.turn);
  header.set_probe_turn_ms(request.turn_ms);
  std::vector<zmq::message_t> frames;
  frames.push_back(ProtoFrame(header));
  if (send_bytes > 0) frames.push_back(ProbePayload(send_bytes));
  if (seals_ != nullptr) {
    if (absl::Status s = seals_->Seal(frames); !s.ok()) return s;
  }
  if (absl::Status s = SendFrames(socket_, frames); !s.ok()) return s;
  while (true) {
    const int64_t left_us = deadline_us - MonotonicUs();
    if (left_us <= 0) {
      return absl::DeadlineExceededError("link probe: no reply before the time limit");
    }
    absl::StatusOr<std::vector<zmq::message_t>> reply =
        RecvFrames(socket_, std::chrono::milliseconds((left_us + 999) / 1000));
    if (!reply.ok()) return reply.status();
    if (reply->empty()) continue;
    if (seals_ != nullptr && !seals_->Open(*reply).ok()) continue;  // not the server's
    proto::DataHeader answer;
    if (!answer.ParseFromArray((*reply)[0].data(), static_cast<int>((*reply)[0].size()))) {
      return absl::DataLossError("link probe: the reply header is not a DataHeader");
    }
    if (answer.request_id() != id) continue;  // a reply to a probe given up on earlier
    if (answer.op() == proto::OP_ERROR) return absl::FailedPreconditionError(answer.error());
    const size_t got = reply->size() > 1 ? (*reply)[1].size() : 0;
    if (answer.op() != proto::OP_PROBE_REPLY || got != static_cast<size_t>(reply_bytes)) {
      return absl::DataLossError(absl::StrCat("link probe: expected OP_PROBE_REPLY with ",
                                              reply_bytes, " bytes, got ",
                                              proto::DataOp_Name(answer.op()), " with ", got));
    }
    return answer.probe_turn();
  }
}

}  // namespace bytecomp
