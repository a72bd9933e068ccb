#include "bytecomp/scheduler/link_book.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bytecomp/common/stats.h"

namespace bytecomp {
namespace {

bool Complete(const proto::LinkProbe& l) {
  return l.latency_us() > 0 && l.up_gbps() > 0 && l.down_gbps() > 0;
}

// Median of the values > 0 (a probe that did not complete reports 0).
struct Medians {
  std::vector<double> latency, up, down;
  void Add(const proto::LinkProbe& l) {
    if (l.latency_us() > 0) latency.push_back(l.latency_us());
    if (l.up_gbps() > 0) up.push_back(l.up_gbps());
    if (l.down_gbps() > 0) down.push_back(l.down_gbps());
  }
};

std::string Row(const std::string& worker, int server, double latency, double up, double down,
                const std::string& note) {
  std::string row =
      absl::StrFormat("  %6s %6d %12.1f %10.3f %12.3f", worker, server, latency, up, down);
  if (!note.empty()) absl::StrAppend(&row, "  ", note);
  return row + "\n";
}

}  // namespace

bool LinkBook::Add(int worker, const proto::LinkProbeReport& report, int num_workers) {
  reports_[worker] = report;
  if (complete_ || size() < num_workers) return false;
  complete_ = true;
  return true;
}

std::string LinkBook::Table() const {
  int64_t bytes = 0;
  std::map<int, Medians> per_server;
  std::string rows;
  for (const auto& [worker, report] : reports_) {
    std::vector<proto::LinkProbe> links(report.links().begin(), report.links().end());
    std::sort(links.begin(), links.end(), [](const proto::LinkProbe& a, const proto::LinkProbe& b) {
      return a.server() < b.server();  // workers probe from their own rank's server on
    });
    for (const proto::LinkProbe& l : links) {
      bytes = std::max<int64_t>(bytes, l.probe_bytes());
      per_server[l.server()].Add(l);
      rows += Row(absl::StrCat(worker), l.server(), l.latency_us(), l.up_gbps(), l.down_gbps(),
                  l.error().empty() ? "" : absl::StrCat("incomplete: ", l.error()));
    }
  }
  std::string out = absl::StrCat("link probes of ", reports_.size(),
                                 " workers (latency: median "
                                 "round trip of small probes; bandwidth: ",
                                 bytes, "-byte transfers):\n");
  absl::StrAppend(&out, absl::StrFormat("  %6s %6s %12s %10s %12s\n", "worker", "server",
                                        "latency_us", "up_Gbit/s", "down_Gbit/s"));
  out += rows;
  for (const auto& [server, m] : per_server) {
    out += Row("median", server, bytecomp::Median(m.latency), bytecomp::Median(m.up),
               bytecomp::Median(m.down), "");
  }
  absl::StrAppend(&out, "  probing took");
  for (const auto& [worker, report] : reports_) {
    absl::StrAppend(&out, absl::StrFormat(" %.1f ms (worker %d)", report.elapsed_ms(), worker));
  }
  return out;
}

std::optional<MeasuredLinks> LinkBook::Median() const {
  Medians all;
  MeasuredLinks out;
  for (const auto& [worker, report] : reports_) {
    for (const proto::LinkProbe& l : report.links()) {
      all.Add(l);
      if (Complete(l)) ++out.pairs;
    }
  }
  if (out.pairs == 0) return std::nullopt;
  out.latency_us = bytecomp::Median(all.latency);
  out.up_gbps = bytecomp::Median(all.up);
  out.down_gbps = bytecomp::Median(all.down);
  out.workers = size();
  return out;
}

}  // namespace bytecomp
