#include "bytecomp/server/key_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/dtype.h"

namespace bytecomp::server {

KeyStore::KeyStore(int my_rank, int num_workers, const Catalog& catalog, std::vector<int> pushers,
                   bool resume_keys)
    : my_rank_(my_rank),
      num_workers_(num_workers),
      pushers_(std::move(pushers)),
      pushes_by_worker_(num_workers, 0),
      catalog_(catalog),
      resume_keys_(resume_keys) {
  if (pushers_.empty()) {
    for (int r = 0; r < num_workers; ++r) pushers_.push_back(r);
  }
  std::sort(pushers_.begin(), pushers_.end());
}

void KeyStore::Handle(zmq::message_t identity, const proto::DataHeader& header,
                      zmq::message_t payload, std::vector<OutgoingReply>* out) {
  auto [it, created] =
      keys_.try_emplace(header.key(), num_workers_, static_cast<int>(pushers_.size()));
  KeyState& key = it->second;
  if (created && (resume_keys_ || resume_expected_.erase(header.key()) > 0)) {
    key.resume = std::make_unique<KeyResume>(num_workers_);
  }
  if (key.resume != nullptr) {
    return Resuming(key, std::move(identity), header, std::move(payload), out);
  }
  if (header.replay()) {
    Refuse(std::move(identity), header,
           absl::StrCat("replay for key ", KeyName(header.key()),
                        " refused: the key is not resuming (this server did not replace a lost "
                        "one, or every worker was heard already)"),
           out);
    return;
  }
  if (header.op() == proto::OP_PUSH) {
    Push(key, std::move(identity), header, std::move(payload), out);
  } else {
    Pull(key, std::move(identity), header, out);
  }
}

void KeyStore::Resuming(KeyState& key, zmq::message_t identity, const proto::DataHeader& h,
                        zmq::message_t payload, std::vector<OutgoingReply>* out) {
  if (absl::Status admitted = key.resume->Admit(h); !admitted.ok()) {
    Refuse(std::move(identity), h, std::string(admitted.message()), out);
    return;
  }
  key.resume->Keep(std::move(identity), h, std::move(payload));
  if (key.resume->heard() == pushers_.size()) StartResumed(key, out);
}

void KeyStore::StartResumed(KeyState& key, std::vector<OutgoingReply>* out) {
  KeyResume::Resumed resumed = std::move(*key.resume).Finish(pushers_);
  key.resume.reset();
  ++keys_resumed_;
  if (resumed.replayed.has_value()) ++rounds_answered_from_replays_;
  key.rounds.ResumeAt(resumed.next_round, std::move(resumed.replayed));
  for (KeyResume::HeldRequest& held : resumed.held) {
    Handle(std::move(held.identity), held.header, std::move(held.payload), out);
  }
}

void KeyStore::Push(KeyState& key, zmq::message_t identity, const proto::DataHeader& h,
                    zmq::message_t payload, std::vector<OutgoingReply>* out) {
  absl::StatusOr<KeyRounds::AcceptedPush> accepted = key.rounds.AdmitPush(h);
  if (!accepted.ok()) {
    Refuse(std::move(identity), h, std::string(accepted.status().message()), out);
    return;
  }
  if (accepted->absorbed) {
    out->push_back(Reply(std::move(identity), h, proto::OP_PUSH_ACK));
    return;
  }
  if (accepted->starts_round && observer_ != nullptr) observer_->RoundStarted(h.key());
  const int64_t payload_bytes = static_cast<int64_t>(payload.size());
  if (h.error().empty() && key.rounds.round_error().empty()) {
    if (key.rounds.round_codec().empty()) {
      key.sum.AddRaw(h, std::move(payload), accepted->starts_round);
    } else {
      key.sum.AddEncoded(h.sender(), num_workers_, std::move(payload));
    }
  }
  if (observer_ != nullptr && h.error().empty()) {
    observer_->PushAccepted(key.rounds.round_codec(), payload_bytes,
                            h.element_count() * static_cast<int64_t>(DTypeSize(h.dtype())));
  }
  ++pushes_by_worker_[h.sender()];
  out->push_back(Reply(zmq::message_t(identity.data(), identity.size()), h, proto::OP_PUSH_ACK));
  if (accepted->completes_round) CompleteRound(key, h, out);
}

void KeyStore::CompleteRound(KeyState& key, const proto::DataHeader& h,
                             std::vector<OutgoingReply>* out) {
  RoundResult result;
  if (!key.rounds.round_error().empty()) {
    result.error = key.rounds.round_error();
    key.sum.Drop();
  } else if (key.rounds.round_codec().empty()) {
    result = key.sum.FinishRaw(h);
  } else {
    absl::StatusOr<RoundResult> summed = key.sum.FinishEncoded(h, catalog_, pushers_, my_rank_);
    if (summed.ok()) {
      result = *std::move(summed);
    } else {
      result.error = absl::StrCat("round ", h.round(), " of key ", KeyName(h.key()),
                                  " could not be aggregated: ", summed.status().message());
    }
  }
  const int64_t result_bytes = static_cast<int64_t>(result.payload.size());
  const std::string round_codec = key.rounds.round_codec();
  std::vector<HeldPull> held = key.rounds.Complete(std::move(result));
  ++rounds_completed_;
  if (observer_ != nullptr)
    observer_->RoundSummed(h.key(), h.iteration(), round_codec, result_bytes);
  for (HeldPull& pull : held) {
    out->push_back(PullReply(key.rounds.ready(), std::move(pull.identity), pull.header));
  }
}

void KeyStore::Pull(KeyState& key, zmq::message_t identity, const proto::DataHeader& h,
                    std::vector<OutgoingReply>* out) {
  absl::StatusOr<KeyRounds::PullVerdict> verdict = key.rounds.JudgePull(h);
  if (!verdict.ok()) {
    Refuse(std::move(identity), h, std::string(verdict.status().message()), out);
  } else if (*verdict == KeyRounds::PullVerdict::kAnswerNow) {
    out->push_back(PullReply(key.rounds.ready(), std::move(identity), h));
  } else {
    key.rounds.HoldPull(std::move(identity), h);
  }
}

OutgoingReply KeyStore::PullReply(RoundResult& result, zmq::message_t identity,
                                  const proto::DataHeader& request) {
  if (!result.error.empty()) return Error(std::move(identity), request, result.error);
  OutgoingReply reply = Reply(std::move(identity), request, proto::OP_PULL_REPLY);
  reply.payload.copy(result.payload);  // shares the buffer, no copy
  reply.header.set_payload_bytes(static_cast<int64_t>(reply.payload.size()));
  reply.header.set_codec(result.codec);
  reply.has_payload = true;
  if (observer_ != nullptr) {
    observer_->PullAnswered(
        result.codec, static_cast<int64_t>(reply.payload.size()),
        request.element_count() * static_cast<int64_t>(DTypeSize(request.dtype())));
  }
  return reply;
}

OutgoingReply KeyStore::Reply(zmq::message_t identity, const proto::DataHeader& request,
                              proto::DataOp op) {
  OutgoingReply reply;
  reply.identity = std::move(identity);
  reply.header.set_op(op);
  reply.header.set_key(request.key());
  reply.header.set_round(request.round());
  reply.header.set_dtype(request.dtype());
  reply.header.set_element_count(request.element_count());
  reply.header.set_sender(my_rank_);
  reply.header.set_request_id(request.request_id());
  reply.header.set_strategy_version(request.strategy_version());
  reply.header.set_stage(request.stage());
  reply.header.set_iteration(request.iteration());
  return reply;
}

void KeyStore::Refuse(zmq::message_t identity, const proto::DataHeader& request,
                      std::string message, std::vector<OutgoingReply>* out) {
  ++refused_;
  out->push_back(Error(std::move(identity), request, std::move(message)));
}

OutgoingReply KeyStore::Error(zmq::message_t identity, const proto::DataHeader& request,
                              std::string message) {
  OutgoingReply reply = Reply(std::move(identity), request, proto::OP_ERROR);
  reply.header.set_error(absl::StrCat("server ", my_rank_, ": ", message));
  return reply;
}

void KeyStore::FailHeldPulls(const std::string& reason, std::vector<OutgoingReply>* out) {
  for (auto& [k, key] : keys_) {
    for (HeldPull& pull : key.rounds.TakeHeldPulls()) {
      out->push_back(Error(std::move(pull.identity), pull.header, reason));
    }
    if (key.resume == nullptr) continue;
    for (KeyResume::HeldRequest& held : key.resume->TakeHeld()) {
      if (held.header.op() == proto::OP_PULL) {
        out->push_back(Error(std::move(held.identity), held.header, reason));
      }
    }
  }
}

}  // namespace bytecomp::server
