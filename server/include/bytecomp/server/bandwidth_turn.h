// The bandwidth turn of the link probes (proto/data.proto ProbeTurn): one prober at a time does
// its bandwidth transfers through this server, so that each measures its own link instead of a
// share of the server's. Small probes need no turn. Owned by the server's I/O thread.
#pragma once

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data.pb.h"

namespace bytecomp::server {

class BandwidthTurn {
 public:
  // quiet_ms: the turn is taken back from a holder that sent no probe for this long.
  explicit BandwidthTurn(int64_t quiet_ms);

  // A validated probe from `prober` (its connection) at now_ms: the probe_turn of the reply
  // (GRANTED or BUSY for a BEGIN; IDLE or BUSY for a QUERY: BUSY while one holds the turn or
  // another asked for it within quiet_ms; NONE otherwise), or an error for an END from a
  // prober that does not hold the turn.
  absl::StatusOr<proto::ProbeTurn> OnProbe(absl::string_view prober, const proto::DataHeader& probe,
                                           int64_t now_ms);

  bool held() const { return !holder_.empty(); }

 private:
  // Takes the turn back from a holder that went quiet or whose time limit passed; forgets
  // waiters that stopped asking.
  void Expire(int64_t now_ms);

  int64_t quiet_ms_;
  std::string holder_;  // empty: nobody holds it
  int holder_sender_ = 0;
  int64_t last_seen_ms_ = 0;
  int64_t until_ms_ = 0;
  absl::flat_hash_map<std::string, int64_t> waiters_;  // told BUSY: when they last asked
};

}  // namespace bytecomp::server
