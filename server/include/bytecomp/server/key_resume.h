// A key of a replacement server (server failover) until every pusher was heard. The lost
// server's rounds are gone with it, so the key waits until each pusher told where it stands:
// a worker's first request tells its last round completed on the lost server, c: a replay
// (DataHeader.replay) of round c, carrying the result that round gave it, or a push of round
// c+1 when it completed none. With R the highest c, the key goes on at round R+1. A worker with
// c = R-1 never got round R's result (the lost server died before its reply left): it pushes R
// again and pulls it; the push is acknowledged and dropped, and the pull is answered with the
// result a replay of round R carried, the very bytes the others got (whatever the codec and
// the lost server's error-feedback memory). So no round is lost, and none is summed twice.
// Meanwhile each worker's other requests wait here (at most two: a push and a pull), and are
// handled in arrival order once the key goes on. KeyStore (key_store.h) resumes its keys so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "bytecomp/server/key_rounds.h"
#include "data.pb.h"
#include "zmq.hpp"

namespace bytecomp::server {

class KeyResume {
 public:
  explicit KeyResume(int num_workers);

  // Hears a request for the key (a worker rank's PUSH or PULL, maybe a replay), or refuses it
  // (FailedPrecondition, saying why): a pull from a worker not heard yet, a second replay, a
  // third request waiting. An admitted request goes to Keep.
  absl::Status Admit(const proto::DataHeader& h);
  // Keeps an admitted request: a replay for its result, any other to handle once the key goes
  // on.
  void Keep(zmq::message_t identity, const proto::DataHeader& h, zmq::message_t payload);
  // How many workers were heard.
  size_t heard() const { return heard_; }

  // A request kept while the key resumed.
  struct HeldRequest {
    zmq::message_t identity;
    proto::DataHeader header;
    zmq::message_t payload;
  };
  // Where the key goes on once every one of `pushers` was heard.
  struct Resumed {
    uint64_t next_round = 0;
    // The last round completed on the lost server, as a replay carried it, when some worker
    // had not got it.
    std::optional<RoundResult> replayed;
    std::vector<HeldRequest> held;  // in arrival order
  };
  Resumed Finish(const std::vector<int>& pushers) &&;

  // The requests held, taken (their pulls are to fail: a node failed, or the server stops).
  std::vector<HeldRequest> TakeHeld();

 private:
  static constexpr int64_t kUnheard = -2;
  std::vector<int64_t> completed_;  // by worker rank: last round completed, -1 none, kUnheard
  std::vector<int> held_by_worker_;
  size_t heard_ = 0;
  std::vector<HeldRequest> held_;  // in arrival order, but the replays
  // The result of the highest round replayed so far.
  int64_t result_round_ = -1;
  std::string result_codec_;
  zmq::message_t result_;
};

}  // namespace bytecomp::server
