// The workers' link probe reports (proto::LinkProbeReport, sent once at start): kept per
// worker, printed as one table once every worker reported, and summarized for
// --strategy=auto (auto_planner.h).
#pragma once

#include <map>
#include <optional>
#include <string>

#include "control.pb.h"

namespace bytecomp {

// Medians over every (worker, server) pair that measured the value (> 0).
struct MeasuredLinks {
  double latency_us = 0;  // round trip of a small probe
  double up_gbps = 0;     // worker -> server
  double down_gbps = 0;   // server -> worker
  int pairs = 0;          // (worker, server) pairs with all three values
  int workers = 0;        // workers that reported
};

class LinkBook {
 public:
  // Keeps the worker's report (a repeated one replaces the earlier). True when this report
  // made every one of num_workers workers reported, the first time only.
  bool Add(int worker, const proto::LinkProbeReport& report, int num_workers);
  int size() const { return static_cast<int>(reports_.size()); }
  const std::map<int, proto::LinkProbeReport>& reports() const { return reports_; }

  // One row per (worker, server), then the median over workers per server.
  std::string Table() const;
  // nullopt when no pair measured all three values.
  std::optional<MeasuredLinks> Median() const;

 private:
  std::map<int, proto::LinkProbeReport> reports_;  // by worker rank
  bool complete_ = false;
};

}  // namespace bytecomp
