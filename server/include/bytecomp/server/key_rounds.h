// The round protocol of one key: which round accumulates and who pushed it, what that round is
// (strategy version, codec, stage, iteration; an abort), which round is ready and its result,
// and the pulls held until the accumulating round completes. It decides what becomes of each
// push and pull; what a push carries is summed elsewhere (RoundSum), and KeyStore
// (key_store.h) composes the two.
//
// A key accumulates one round at a time. A worker pushes round r+1 only after it pulled round
// r, so the accumulating round and the ready one suffice. A push must be for the accumulating
// round, once per worker, and agree with the round's first push on version, codec, stage and
// iteration (no round mixes codecs). When every pusher pushed, the round's result becomes the
// ready round, the held pulls are answered with it and the next round starts. A pull for the
// ready round is answered at once; one for the accumulating round is held, at most one per
// worker. A push carrying an error (an abort) completes the round with that error for every
// worker. Refusals name the request's round, never the key's (which round the key is at is the
// other workers' business).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data.pb.h"
#include "zmq.hpp"

namespace bytecomp::server {

// A key as refusals name it: "tensor:partition".
std::string KeyName(uint64_t key);

// What a completed round answers its pulls with.
struct RoundResult {
  std::string error;       // not empty: the round failed (an abort, an aggregation error)
  std::string codec;       // of the payload: "" for raw values or an fp32 sum
  zmq::message_t payload;  // shared by every pull reply
};

// A pull held until its round completes.
struct HeldPull {
  zmq::message_t identity;
  proto::DataHeader header;
};

class KeyRounds {
 public:
  // `num_workers`: the job's workers (ranks); `num_pushers`: how many of them push a round.
  KeyRounds(int num_workers, int num_pushers);

  // An accepted push: what the caller does with its payload.
  struct AcceptedPush {
    // A round this key resumed with, done on a lost server, pushed again: acknowledged, and
    // nothing is summed.
    bool absorbed = false;
    bool starts_round = false;     // the round's first push
    bool completes_round = false;  // the last pusher's: Complete() follows
  };
  // Admits a PUSH of `h.sender()` (a worker rank) or refuses it (FailedPrecondition, saying
  // why). Records the pusher, the round's kind with its first push, and an abort.
  absl::StatusOr<AcceptedPush> AdmitPush(const proto::DataHeader& h);

  enum class PullVerdict { kAnswerNow, kHold };
  // Whether a PULL is answered from the ready round or held; refused (FailedPrecondition) for
  // a round neither ready nor accumulating, or a second held pull of one worker.
  absl::StatusOr<PullVerdict> JudgePull(const proto::DataHeader& h) const;
  // Holds a pull JudgePull said to hold.
  void HoldPull(zmq::message_t identity, const proto::DataHeader& h);

  // The accumulating round completes with `result`: it becomes the ready round and the next
  // one starts. Returns the held pulls, in the order they were held, to answer with it.
  std::vector<HeldPull> Complete(RoundResult result);

  // A replacement server's key goes on at `round`; with `replayed`, round - 1 completed on the
  // lost server and some worker did not get its result: the result a replay carried answers
  // its pull, and its push of that round again is absorbed until the next round completes.
  void ResumeAt(uint64_t round, std::optional<RoundResult> replayed);

  // The held pulls, taken (they are to fail: a node failed, or the server stops).
  std::vector<HeldPull> TakeHeldPulls();

  uint64_t accumulating_round() const { return accumulating_round_; }
  // The accumulating round's codec ("" raw, however the pushes named it) and abort.
  const std::string& round_codec() const { return round_codec_; }
  const std::string& round_error() const { return round_error_; }
  // The ready round's result (valid once a round completed or a replay was resumed with).
  RoundResult& ready() { return ready_; }

 private:
  int num_pushers_;
  uint64_t accumulating_round_ = 0;
  int pushes_ = 0;
  std::vector<bool> pushed_;  // by worker rank, for the accumulating round
  // What the accumulating round is: its first push sets these, the others must agree.
  uint64_t round_version_ = 0;
  std::string round_codec_;
  uint32_t round_stage_ = 0;
  uint64_t round_iteration_ = 0;
  std::string round_error_;  // set by an abort
  bool has_ready_ = false;
  uint64_t ready_round_ = 0;
  RoundResult ready_;
  std::vector<HeldPull> held_;
  // Resumed with a round done on the lost server that some worker pushes again: its pushes
  // are acknowledged and dropped, until the next round completes.
  std::optional<uint64_t> absorbed_round_;
};

}  // namespace bytecomp::server
