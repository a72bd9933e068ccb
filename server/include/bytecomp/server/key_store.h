// Per key and round: sums pushes, answers pulls. Owned by one engine thread; its keys are
// disjoint from every other engine's, so no lock is taken.
//
// Round bookkeeping: a key accumulates one round at a time. The first push of a round becomes
// the accumulator (its receive buffer is reused in place: no copy); later pushes are added.
// When all W workers pushed, the sum becomes the key's ready round and the next round starts
// accumulating. A worker pushes round r+1 only after it pulled round r, so two buffers per key
// (accumulating, ready) suffice; a pull for the accumulating round is held until it completes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "data.pb.h"
#include "zmq.hpp"

namespace bytecomp::server {

struct OutgoingReply {
  zmq::message_t identity;
  proto::DataHeader header;
  zmq::message_t payload;
  bool has_payload = false;
};

class KeyStore {
 public:
  KeyStore(int my_rank, int num_workers) : my_rank_(my_rank), num_workers_(num_workers) {}

  // Handles a validated PUSH or PULL; appends the replies it causes (an ack, held pulls
  // answered, or an error) to *out.
  void Handle(zmq::message_t identity, const proto::DataHeader& header, zmq::message_t payload,
              std::vector<OutgoingReply>* out);
  // Answers every held pull with an error (a node failed, or shutdown).
  void FailHeldPulls(const std::string& reason, std::vector<OutgoingReply>* out);

  size_t num_keys() const { return keys_.size(); }
  uint64_t rounds_completed() const { return rounds_completed_; }

 private:
  struct HeldPull {
    zmq::message_t identity;
    proto::DataHeader header;
  };
  struct KeyState {
    uint64_t accumulating_round = 0;
    int pushes = 0;
    std::vector<bool> pushed;       // by worker rank, for the accumulating round
    zmq::message_t accumulator;     // fp32 payload: the first push's buffer, summed in place
    std::vector<float> wide_sum;    // fp16/bf16 payloads: summed in fp32 here
    bool has_ready = false;
    uint64_t ready_round = 0;
    zmq::message_t ready;           // the sum in the key's dtype, shared by every pull reply
    std::vector<HeldPull> held;
  };

  void Push(KeyState& key, zmq::message_t identity, const proto::DataHeader& h,
            zmq::message_t payload, std::vector<OutgoingReply>* out);
  void Pull(KeyState& key, zmq::message_t identity, const proto::DataHeader& h,
            std::vector<OutgoingReply>* out);
  void CompleteRound(KeyState& key, const proto::DataHeader& h, std::vector<OutgoingReply>* out);
  OutgoingReply PullReply(const KeyState& key, zmq::message_t identity,
                          const proto::DataHeader& request);
  OutgoingReply Reply(zmq::message_t identity, const proto::DataHeader& request,
                      proto::DataOp op);
  OutgoingReply Error(zmq::message_t identity, const proto::DataHeader& request,
                      std::string message);

  int my_rank_;
  int num_workers_;
  uint64_t rounds_completed_ = 0;
  absl::flat_hash_map<uint64_t, KeyState> keys_;
};

}  // namespace bytecomp::server
