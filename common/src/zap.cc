#include "bytecomp/common/zap.h"

#include "absl/strings/str_cat.h"

namespace bytecomp {
namespace {

constexpr int64_t kMinuteMs = 60000;

std::vector<std::string> Reply(const std::string& request_id, absl::string_view code,
                               absl::string_view text, absl::string_view user_id) {
  return {"1.0", request_id, std::string(code), std::string(text), std::string(user_id), ""};
}

}  // namespace

ZapDecision DecideZapRequest(const std::vector<std::string>& request,
                             absl::string_view job_public_key) {
  ZapDecision d;
  // RFC 27: version, request id, domain, address, identity, mechanism, credentials...
  const std::string request_id = request.size() > 1 ? request[1] : "";
  if (request.size() > 3) d.peer_address = request[3];
  if (request.size() < 6 || request[0] != "1.0") {
    d.reason = "malformed ZAP request";
    d.reply = Reply(request_id, "500", "malformed ZAP request", "");
    return d;
  }
  const std::string& mechanism = request[5];
  if (mechanism != "CURVE") {
    d.reason = absl::StrCat("mechanism ", mechanism, ", not CURVE with the cluster key");
  } else if (request.size() != 7 || request[6].size() != 32) {
    d.reason = "malformed CURVE credentials";
  } else if (request[6] != job_public_key) {
    d.reason = "a CURVE key that is not the cluster key";
  } else {
    d.admitted = true;
    d.reply = Reply(request_id, "200", "OK", "cluster-key");
    return d;
  }
  d.reply = Reply(request_id, "400", "not a holder of the cluster key", "");
  return d;
}

std::optional<std::string> ConnectionRefusalLog::Refused(const std::string& peer,
                                                         absl::string_view why, int64_t now_ms) {
  ++total_;
  if (!peers_.contains(peer)) {
    if (peers_.size() >= max_peers_) {
      ++peers_not_remembered_;
      return std::nullopt;
    }
    peers_.insert(peer);
  } else {
    return std::nullopt;  // each peer once
  }
  if (window_start_ms_ < 0 || now_ms - window_start_ms_ >= kMinuteMs) {
    window_start_ms_ = now_ms;
    lines_in_window_ = 0;
  }
  if (lines_in_window_ >= lines_per_minute_) {
    ++lines_unlogged_;
    if (told_rate_limited_) return std::nullopt;
    told_rate_limited_ = true;
    return absl::StrCat("more than ", lines_per_minute_,
                        " peers refused within a minute: further refusals are counted, not "
                        "logged (summary at exit)");
  }
  ++lines_in_window_;
  return absl::StrCat("refused ", peer, ": ", why, " (logged once per peer; summary at exit)");
}

std::string ConnectionRefusalLog::Summary() const {
  if (total_ == 0) return "";
  std::string s = absl::StrCat("refused ", total_, " connection", total_ == 1 ? "" : "s", " from ",
                               peers_.size(), " peer", peers_.size() == 1 ? "" : "s",
                               " without the cluster key");
  if (peers_not_remembered_ > 0) {
    absl::StrAppend(&s, ", and ", peers_not_remembered_, " from peers beyond the first ",
                    max_peers_);
  }
  if (lines_unlogged_ > 0)
    absl::StrAppend(&s, " (", lines_unlogged_, " peers not logged: rate limit)");
  return s;
}

}  // namespace bytecomp
