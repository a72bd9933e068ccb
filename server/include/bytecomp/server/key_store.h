// Per key and round: sums pushes, answers pulls. Owned by one key shard (key_shard.h); its
// keys are disjoint from every other shard's, so no lock is taken.
//
// Round bookkeeping: a key accumulates one round at a time. Uncompressed fp32: the first push
// of a round becomes the accumulator (its receive buffer is summed in place: no copy); later
// pushes are added. Compressed: the codec's aggregator (majority vote, sparse add, summed
// values, decode-and-add) sums into fp32. When all pushers pushed (the W workers, or each
// machine's local root in a hierarchical job), the sum becomes the key's
// ready round (re-encoded with the pull codec for two-way compression) and the next round
// starts. A worker pushes round r+1 only after it pulled round r, so two buffers per key
// (accumulating, ready) suffice; a pull for the accumulating round is held until it completes,
// at most one per worker and key. An error reply names the request's round, never the key's
// (which round the key is at is the other workers' business).
// A push carrying an error (an abort: the worker could not encode) completes the round with
// that error for every worker, so no one waits for a push that will never come.
// A replacement server (server failover, `resume_keys`) does not know where each key is: every
// key waits until each pusher has been heard (at most a push and a pull each are held). A
// worker's first request tells its last round completed on the lost server, c: a replay
// (DataHeader.replay) of round c, carrying the result that round gave it, or a push of round
// c+1 when it completed none. With R the highest c, the key goes on at round R+1. A worker
// with c = R-1 never got round R's result (the lost server died before its reply left): it
// pushes R again and pulls it; the push is acknowledged and dropped, and the pull is answered
// with the result a replay of round R carried, the very bytes the others got (whatever the
// codec and the lost server's error-feedback memory). So no round is lost, and none is summed
// twice. The server's two-way error-feedback memory starts from zero at round R+1.
// blocksparse sums block-sparse (its aggregator), and its pulls get the block-sparse sum in its
// own format, one-way too (CodecProperties::sum_in_push_format): nothing dense on the way.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "bytecomp/compress.h"
#include "bytecomp/server/catalog.h"
#include "bytecomp/telemetry/metrics.h"
#include "bytecomp/telemetry/timeline.h"
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
  // `resume_keys`: this server replaces a lost one (see above).
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

  // Counts bytes in and out and round times into `metrics`, and writes each round's summing
  // to `timeline` (either may be null).
  void Observe(telemetry::Timeline* timeline, telemetry::NodeMetrics* metrics) {
    timeline_ = timeline;
    metrics_ = metrics;
  }

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
  struct HeldPull {
    zmq::message_t identity;
    proto::DataHeader header;
  };
  // A request held while its key resumes.
  struct Held {
    zmq::message_t identity;
    proto::DataHeader header;
    zmq::message_t payload;
  };
  static constexpr int64_t kUnheard = -2;
  struct Resume {
    std::vector<int64_t> completed;  // by worker rank: last round completed, -1 none, kUnheard
    std::vector<int> held_by_worker;
    size_t heard = 0;
    std::vector<Held> held;  // in arrival order, but the replays
    // The result of the highest round replayed so far.
    int64_t result_round = -1;
    proto::DataHeader result_header;
    zmq::message_t result;
  };
  // A compressed key's codec objects, kept across rounds while version and stage stay.
  struct CodecState {
    uint64_t version = 0;
    uint32_t stage = 0;
    size_t elements = 0;
    std::unique_ptr<compress::Aggregator> aggregator;
    compress::TensorPlan plan;
    bool encoded_sum_answers = false;                // pulls get aggregator->EncodedSum()
    std::unique_ptr<compress::Codec> pull_codec;     // two-way
    std::unique_ptr<compress::Memory> pull_memory;   // the server's error feedback
    std::vector<float> compensated, decoded;         // scratch for EncodeWithMemory
  };
  struct KeyState {
    uint64_t accumulating_round = 0;
    int pushes = 0;
    std::vector<bool> pushed;       // by worker rank, for the accumulating round
    // What the accumulating round is: its first push sets these, the others must agree.
    uint64_t round_version = 0;
    std::string round_codec;
    uint32_t round_stage = 0;
    uint64_t round_iteration = 0;
    std::string round_error;        // set by an abort or a failed aggregation
    zmq::message_t accumulator;     // raw fp32: the first push's buffer, summed in place
    std::vector<float> wide_sum;    // raw fp16/bf16: summed in fp32 here
    std::unique_ptr<CodecState> codec;
    // Compressed pushes wait here and are aggregated in worker-rank order once all arrived,
    // so a round's result does not depend on arrival order (bit-reproducible).
    std::vector<zmq::message_t> encoded;
    bool has_ready = false;
    uint64_t ready_round = 0;
    std::string ready_error;        // the completed round failed: pulls get this error
    std::string ready_codec;        // codec of the ready payload ("" raw or fp32 sum)
    zmq::message_t ready;           // the sum, shared by every pull reply
    std::vector<HeldPull> held;
    int64_t first_push_us = 0;      // wall clock; with metrics or a timeline
    std::unique_ptr<Resume> resume;  // a replacement's key until every pusher was heard
    // Resumed with a round done on the lost server that some worker pushes again: its pushes
    // are acknowledged and dropped, until the next round completes.
    std::optional<uint64_t> absorbed_round;
  };

  // A request for a key, past resuming.
  void Dispatch(KeyState& key, zmq::message_t identity, const proto::DataHeader& header,
                zmq::message_t payload, std::vector<OutgoingReply>* out);
  void Resuming(KeyState& key, zmq::message_t identity, const proto::DataHeader& header,
                zmq::message_t payload, std::vector<OutgoingReply>* out);
  void StartResumed(KeyState& key, std::vector<OutgoingReply>* out);
  void Push(KeyState& key, zmq::message_t identity, const proto::DataHeader& h,
            zmq::message_t payload, std::vector<OutgoingReply>* out);
  void AddRaw(KeyState& key, const proto::DataHeader& h, zmq::message_t payload);
  absl::Status PrepareCodec(KeyState& key, const proto::DataHeader& h);
  void Pull(KeyState& key, zmq::message_t identity, const proto::DataHeader& h,
            std::vector<OutgoingReply>* out);
  void CompleteRound(KeyState& key, const proto::DataHeader& h, std::vector<OutgoingReply>* out);
  absl::Status FinishEncoded(KeyState& key, const proto::DataHeader& h);
  OutgoingReply PullReply(const KeyState& key, zmq::message_t identity,
                          const proto::DataHeader& request);
  OutgoingReply Reply(zmq::message_t identity, const proto::DataHeader& request,
                      proto::DataOp op);
  OutgoingReply Error(zmq::message_t identity, const proto::DataHeader& request,
                      std::string message);
  // An error reply to a request refused here, counted.
  void Refuse(zmq::message_t identity, const proto::DataHeader& request, std::string message,
              std::vector<OutgoingReply>* out);
  compress::CodecContext ContextOf(const proto::DataHeader& h, uint32_t node) const;

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
  telemetry::Timeline* timeline_ = nullptr;
  telemetry::NodeMetrics* metrics_ = nullptr;
};

}  // namespace bytecomp::server
