#include "bytecomp/server/key_resume.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace bytecomp::server {

KeyResume::KeyResume(int num_workers)
    : completed_(num_workers, kUnheard), held_by_worker_(num_workers, 0) {}

absl::Status KeyResume::Admit(const proto::DataHeader& h) {
  const int sender = h.sender();
  if (completed_[sender] == kUnheard) {
    if (h.op() != proto::OP_PUSH) {
      return absl::FailedPreconditionError(absl::StrCat("pull for round ", h.round(), " of key ",
                                                        KeyName(h.key()), " refused: worker ",
                                                        sender, " has not pushed it"));
    }
    completed_[sender] =
        h.replay() ? static_cast<int64_t>(h.round()) : static_cast<int64_t>(h.round()) - 1;
    ++heard_;
  } else if (h.replay()) {
    return absl::FailedPreconditionError(absl::StrCat("replay for key ", KeyName(h.key()),
                                                      " refused: worker ", sender,
                                                      " was heard for it already"));
  }
  // A push and its pull: a worker pushes nothing further before it pulled.
  if (!h.replay() && held_by_worker_[sender] >= 2) {
    return absl::FailedPreconditionError(absl::StrCat("request for round ", h.round(), " of key ",
                                                      KeyName(h.key()), " refused: worker ", sender,
                                                      " sent 2 already while the key resumes"));
  }
  return absl::OkStatus();
}

void KeyResume::Keep(zmq::message_t identity, const proto::DataHeader& h, zmq::message_t payload) {
  if (h.replay()) {  // where the worker stands, and the result it got there
    if (completed_[h.sender()] > result_round_) {
      result_round_ = completed_[h.sender()];
      result_codec_ = h.codec();
      result_ = std::move(payload);
    }
    return;
  }
  ++held_by_worker_[h.sender()];
  held_.push_back(HeldRequest{std::move(identity), h, std::move(payload)});
}

KeyResume::Resumed KeyResume::Finish(const std::vector<int>& pushers) && {
  int64_t highest = -1;
  bool same = true;
  for (int w : pushers) highest = std::max(highest, completed_[w]);
  for (int w : pushers) same = same && completed_[w] == highest;
  Resumed resumed;
  resumed.next_round = static_cast<uint64_t>(highest + 1);
  if (!same && result_round_ == highest) {
    // Round `highest` completed on the lost server, and some worker did not get its result:
    // it gets what a replay says the others got.
    resumed.replayed.emplace();
    resumed.replayed->codec = std::move(result_codec_);
    resumed.replayed->payload = std::move(result_);
  }
  resumed.held = std::move(held_);
  return resumed;
}

std::vector<KeyResume::HeldRequest> KeyResume::TakeHeld() {
  std::vector<HeldRequest> held;
  held.swap(held_);
  return held;
}

}  // namespace bytecomp::server
