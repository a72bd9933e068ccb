// Per key and round: sums pushes, answers pulls. Owned by one key shard (key_shard.h); its
// keys are disjoint from every other shard's, so no lock is taken.
//
// It composes one job per part, per key: the round protocol (KeyRounds, key_rounds.h: which
// round accumulates and who pushed it, the ready round, held pulls, aborts), the round's sum
// (RoundSum, round_sum.h: raw sums in place, compressed pushes aggregated in worker-rank order,
// re-encoded for two-way compression), and on a replacement server (server failover) the
// resume (KeyResume, key_resume.h: a key waits until every pusher told where it stands), and
// it tells a RoundObserver (round_observer.h, the telemetry) what happened. Here: the replies.
// An error reply names the request's round, never the key's, and "server <rank>: " leads it.
// The pushers are the W workers, or each machine's local root in a hierarchical job.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "bytecomp/server/catalog.h"
#include "bytecomp/server/key_resume.h"
#include "bytecomp/server/key_rounds.h"
#include "bytecomp/server/round_observer.h"
#include "bytecomp/server/round_sum.h"
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
  // `pushers`: the worker ranks whose pushes make a round (Topology.pushers: every worker, or
  // each machine's local root when the job is hierarchical); empty: every worker.
  // `resume_keys`: this server replaces a lost one: every key resumes (key_resume.h).
  KeyStore(int my_rank, int num_workers, const Catalog& catalog, std::vector<int> pushers = {},
           bool resume_keys = false);

  // Handles a validated PUSH or PULL; appends the replies it causes (an ack, held pulls
  // answered, or an error) to *out.
  void Handle(zmq::message_t identity, const proto::DataHeader& header, zmq::message_t payload,
              std::vector<OutgoingReply>* out);
  // Server failover (KeysMoved): `key` was a lost server's and is this one's now; it resumes
  // as a replacement's keys do. A key already here is left alone.
  void ExpectResume(uint64_t key) { resume_expected_.insert(key); }
  // Answers every held pull with an error (a node failed, or shutdown).
  void FailHeldPulls(const std::string& reason, std::vector<OutgoingReply>* out);

  // Tells `observer` (null: no one) of every round from now on.
  void Observe(RoundObserver* observer) { observer_ = observer; }

  size_t num_keys() const { return keys_.size(); }
  uint64_t rounds_completed() const { return rounds_completed_; }
  // Requests refused here (wrong round, a second push or held pull, mixed versions).
  uint64_t refused() const { return refused_; }
  // Replacement server: keys resumed, and of them those whose last round some worker had not
  // got (answered from a replay).
  uint64_t keys_resumed() const { return keys_resumed_; }
  uint64_t rounds_answered_from_replays() const { return rounds_answered_from_replays_; }
  // Pushes accepted, by worker rank (index).
  const std::vector<int64_t>& pushes_by_worker() const { return pushes_by_worker_; }

 private:
  struct KeyState {
    KeyState(int num_workers, int num_pushers) : rounds(num_workers, num_pushers) {}
    KeyRounds rounds;
    RoundSum sum;
    std::unique_ptr<KeyResume> resume;  // a replacement's key until every pusher was heard
  };

  void Resuming(KeyState& key, zmq::message_t identity, const proto::DataHeader& header,
                zmq::message_t payload, std::vector<OutgoingReply>* out);
  void StartResumed(KeyState& key, std::vector<OutgoingReply>* out);
  void Push(KeyState& key, zmq::message_t identity, const proto::DataHeader& h,
            zmq::message_t payload, std::vector<OutgoingReply>* out);
  void Pull(KeyState& key, zmq::message_t identity, const proto::DataHeader& h,
            std::vector<OutgoingReply>* out);
  void CompleteRound(KeyState& key, const proto::DataHeader& h, std::vector<OutgoingReply>* out);
  OutgoingReply PullReply(RoundResult& result, zmq::message_t identity,
                          const proto::DataHeader& request);
  OutgoingReply Reply(zmq::message_t identity, const proto::DataHeader& request, proto::DataOp op);
  OutgoingReply Error(zmq::message_t identity, const proto::DataHeader& request,
                      std::string message);
  // An error reply to a request refused here, counted.
  void Refuse(zmq::message_t identity, const proto::DataHeader& request, std::string message,
              std::vector<OutgoingReply>* out);

  int my_rank_;
  int num_workers_;
  std::vector<int> pushers_;  // ascending worker ranks
  std::vector<int64_t> pushes_by_worker_;
  const Catalog& catalog_;
  uint64_t rounds_completed_ = 0;
  uint64_t refused_ = 0;
  bool resume_keys_;
  absl::flat_hash_set<uint64_t> resume_expected_;
  uint64_t keys_resumed_ = 0;
  uint64_t rounds_answered_from_replays_ = 0;
  absl::flat_hash_map<uint64_t, KeyState> keys_;
  RoundObserver* observer_ = nullptr;
};

}  // namespace bytecomp::server
