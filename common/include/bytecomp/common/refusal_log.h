// Refusals of what peers send (malformed, unauthenticated or out-of-bounds messages), counted
// and logged so that no peer can flood or shape a daemon's log: each peer may log a burst of
// lines, then one per interval; the lines held back are counted, said in the peer's next line
// and in the summary at exit, and what a peer sent is cut short in every line (Printable).
// Socket-free and owned by one thread (the scheduler's loop, the server's I/O thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace bytecomp {

// At most `max_bytes` of `text` for a log line, bytes outside printable ASCII as \xNN, and
// " ... (N bytes)" when it was cut.
std::string Printable(absl::string_view text, size_t max_bytes = 200);

struct RefusalLogOptions {
  int burst = 10;              // lines a peer may log at once
  int64_t interval_ms = 1000;  // then one line per interval
  // Peers tracked one by one; beyond, the others share one budget (a peer cannot grow the
  // table by using many identities).
  size_t max_peers = 4096;
  size_t max_line_bytes = 1024;  // a line is cut to this
  // All peers together: a burst of lines, then this many per interval (many peers, each
  // within its own rate, would otherwise fill the log at their sum).
  int total_burst = 50;
  int total_per_interval = 5;
};

class RefusalLog {
 public:
  explicit RefusalLog(RefusalLogOptions options = {}) : options_(options) {}

  // Counts a refusal of a message from `peer` (a routing id or a name; any bytes) at `now_ms`.
  // Returns the line to log ("<line> (refusal N; M lines from this peer not logged)"), cut to
  // max_line_bytes, or nullopt when the peer is over its rate (counted as suppressed).
  std::optional<std::string> Refuse(absl::string_view peer, absl::string_view line, int64_t now_ms);
  // Refuse, and logs the line (a warning) when it is due.
  void RefuseAndLog(absl::string_view peer, absl::string_view line, int64_t now_ms);

  uint64_t refused() const { return refused_; }
  uint64_t suppressed() const { return suppressed_; }
  // Distinct peers refused (counted up to max_peers; beyond them, +1 for all the others).
  size_t peers() const { return budgets_.size(); }
  // "refused 1234 messages from 3 peers (1200 log lines held back)"; empty when none.
  std::string Summary() const;

 private:
  struct Budget {
    double lines = 0;         // lines this peer may log now
    int64_t refilled_ms = 0;  // when `lines` was last topped up
    uint64_t held_back = 0;   // lines not logged since its last one
  };

  // Tops `b` up for the time since its last refill (at `per_interval` lines per interval, to
  // `burst`) and takes a line if one is there.
  bool Take(Budget& b, double burst, double per_interval, int64_t now_ms) const;

  RefusalLogOptions options_;
  absl::flat_hash_map<std::string, Budget> budgets_;  // by peer; "" for the overflow
  Budget total_;                                      // every peer's lines together
  bool total_started_ = false;
  uint64_t refused_ = 0;
  uint64_t suppressed_ = 0;
};

}  // namespace bytecomp
