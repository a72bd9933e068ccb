#include "bytecomp/server/key_rounds.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bytecomp/common/partition.h"
#include "bytecomp/compress/strategy.h"

namespace bytecomp::server {

std::string KeyName(uint64_t key) { return absl::StrCat(KeyTensor(key), ":", KeyPartition(key)); }

KeyRounds::KeyRounds(int num_workers, int num_pushers)
    : num_pushers_(num_pushers), pushed_(num_workers, false) {}

absl::StatusOr<KeyRounds::AcceptedPush> KeyRounds::AdmitPush(const proto::DataHeader& h) {
  AcceptedPush accepted;
  if (absorbed_round_.has_value() && h.round() == *absorbed_round_) {
    // Pushed again to a replacement by a worker that never got this round's result, which is
    // known (its pull gets it): nothing to sum.
    accepted.absorbed = true;
    return accepted;
  }
  if (h.round() != accumulating_round_) {
    // Which round the key is at is the other workers' business: not said.
    return absl::FailedPreconditionError(
        absl::StrCat("push for round ", h.round(), " of key ", KeyName(h.key()),
                     " refused: it is not the round the key accumulates"));
  }
  if (pushed_[h.sender()]) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", h.sender(), " already pushed round ", h.round(), " of key ", KeyName(h.key())));
  }
  // The round's codec as keys record it: "" for raw values, however the push named them.
  const absl::string_view push_codec =
      compress::IsNoneName(h.codec()) ? absl::string_view() : absl::string_view(h.codec());
  if (pushes_ == 0) {
    accepted.starts_round = true;
    round_version_ = h.strategy_version();
    round_codec_ = std::string(push_codec);
    round_stage_ = h.stage();
    round_iteration_ = h.iteration();
    round_error_.clear();
  } else if (h.strategy_version() != round_version_ || round_codec_ != push_codec ||
             h.stage() != round_stage_ || h.iteration() != round_iteration_) {
    // No round mixes codecs or strategy versions.
    return absl::FailedPreconditionError(absl::StrCat(
        "push for round ", h.round(), " of key ", KeyName(h.key()), " with strategy version ",
        h.strategy_version(), " codec '", h.codec(), "' stage ", h.stage(), " iteration ",
        h.iteration(), "; the round has version ", round_version_, " codec '", round_codec_,
        "' stage ", round_stage_, " iteration ", round_iteration_));
  }
  if (!h.error().empty() && round_error_.empty()) {
    round_error_ = absl::StrCat("worker ", h.sender(), " aborted round ", h.round(), " of key ",
                                KeyName(h.key()), ": ", h.error());
  }
  pushed_[h.sender()] = true;
  ++pushes_;
  accepted.completes_round = pushes_ == num_pushers_;
  return accepted;
}

absl::StatusOr<KeyRounds::PullVerdict> KeyRounds::JudgePull(const proto::DataHeader& h) const {
  if (has_ready_ && h.round() == ready_round_) return PullVerdict::kAnswerNow;
  if (h.round() != accumulating_round_) {
    return absl::FailedPreconditionError(
        absl::StrCat("pull for round ", h.round(), " of key ", KeyName(h.key()),
                     " refused: the key has no such round ready or under way"));
  }
  // At most one held pull per worker and key: a worker pulls each round once, and a peer must
  // not pile up pulls that each will hold a reply.
  for (const HeldPull& held : held_) {
    if (held.header.sender() == h.sender()) {
      return absl::FailedPreconditionError(
          absl::StrCat("pull for round ", h.round(), " of key ", KeyName(h.key()),
                       " refused: worker ", h.sender(), " already has a pull of it waiting"));
    }
  }
  return PullVerdict::kHold;
}

void KeyRounds::HoldPull(zmq::message_t identity, const proto::DataHeader& h) {
  held_.push_back(HeldPull{std::move(identity), h});
}

std::vector<HeldPull> KeyRounds::Complete(RoundResult result) {
  ready_ = std::move(result);
  has_ready_ = true;
  ready_round_ = accumulating_round_;
  ++accumulating_round_;
  pushes_ = 0;
  std::fill(pushed_.begin(), pushed_.end(), false);
  absorbed_round_.reset();  // every push of it came before this round's
  return TakeHeldPulls();
}

void KeyRounds::ResumeAt(uint64_t round, std::optional<RoundResult> replayed) {
  accumulating_round_ = round;
  if (!replayed.has_value()) return;
  has_ready_ = true;
  ready_round_ = round - 1;
  ready_ = *std::move(replayed);
  absorbed_round_ = ready_round_;
}

std::vector<HeldPull> KeyRounds::TakeHeldPulls() {
  std::vector<HeldPull> held;
  held.swap(held_);
  return held;
}

}  // namespace bytecomp::server
