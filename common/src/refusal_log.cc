#include "bytecomp/common/refusal_log.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bytecomp/common/logging.h"

namespace bytecomp {

std::string Printable(absl::string_view text, size_t max_bytes) {
  std::string out;
  const size_t shown = std::min(text.size(), max_bytes);
  out.reserve(shown + 32);
  for (size_t i = 0; i < shown; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, absl::StrFormat("\\x%02x", c));
    }
  }
  if (shown < text.size()) absl::StrAppend(&out, " ... (", text.size(), " bytes)");
  return out;
}

std::optional<std::string> RefusalLog::Refuse(absl::string_view peer, absl::string_view line,
                                              int64_t now_ms) {
  ++refused_;
  auto it = budgets_.find(peer);
  if (it == budgets_.end()) {
    const bool room = budgets_.size() + 1 < options_.max_peers;
    bool added = false;
    std::tie(it, added) = budgets_.try_emplace(room ? std::string(peer) : std::string());
    if (added) {
      it->second.lines = options_.burst;
      it->second.refilled_ms = now_ms;
    }
  }
  if (!total_started_) {
    total_.lines = options_.total_burst;
    total_.refilled_ms = now_ms;
    total_started_ = true;
  }
  Budget& b = it->second;
  // The peer's own budget first: a peer over its rate does not use the total's lines.
  if (!Take(b, options_.burst, 1, now_ms)) {
    ++b.held_back;
    ++suppressed_;
    return std::nullopt;
  }
  if (!Take(total_, options_.total_burst, options_.total_per_interval, now_ms)) {
    b.lines += 1;  // not this peer's doing: its line stays its own
    ++b.held_back;
    ++total_.held_back;
    ++suppressed_;
    return std::nullopt;
  }
  std::string out = Printable(line, options_.max_line_bytes);
  absl::StrAppend(&out, " (refusal ", refused_);
  if (b.held_back > 0) absl::StrAppend(&out, "; ", b.held_back, " lines from this peer not logged");
  if (total_.held_back > 0) {
    absl::StrAppend(&out, "; ", total_.held_back, " lines from all peers not logged");
  }
  out.push_back(')');
  b.held_back = 0;
  total_.held_back = 0;
  return out;
}

bool RefusalLog::Take(Budget& b, double burst, double per_interval, int64_t now_ms) const {
  if (options_.interval_ms > 0 && now_ms > b.refilled_ms) {
    b.lines = std::min(burst, b.lines + per_interval * static_cast<double>(now_ms - b.refilled_ms) /
                                            static_cast<double>(options_.interval_ms));
    b.refilled_ms = now_ms;
  }
  if (b.lines < 1) return false;
  b.lines -= 1;
  return true;
}

void RefusalLog::RefuseAndLog(absl::string_view peer, absl::string_view line, int64_t now_ms) {
  if (std::optional<std::string> due = Refuse(peer, line, now_ms)) BC_LOG_WARNING(*due);
}

std::string RefusalLog::Summary() const {
  if (refused_ == 0) return "";
  return absl::StrCat("refused ", refused_, refused_ == 1 ? " message" : " messages", " from ",
                      budgets_.size(), budgets_.size() == 1 ? " peer" : " peers", " (", suppressed_,
                      " log lines held back)");
}

}  // namespace bytecomp
