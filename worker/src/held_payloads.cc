#include "held_payloads.h"

namespace bytecomp::worker {

void HeldPayloads::Hold() {
  absl::MutexLock lock(&mu_);
  none_held_ = ++held_ == 0;
}

void HeldPayloads::Release() {
  absl::MutexLock lock(&mu_);
  none_held_ = --held_ == 0;
}

int64_t HeldPayloads::AwaitNone(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&none_held_), timeout);
  return held_;
}

}  // namespace bytecomp::worker
