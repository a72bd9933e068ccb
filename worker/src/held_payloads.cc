#include "bytecomp/worker/engine/held_payloads.h"

namespace bytecomp::worker {

void HeldPayloads::Hold() {
  absl::MutexLock lock(&mu_);
  ++held_;
}

void HeldPayloads::Release() {
  absl::MutexLock lock(&mu_);
  --held_;
}

int64_t HeldPayloads::AwaitNone(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const auto none = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return held_ == 0; };
  mu_.AwaitWithTimeout(absl::Condition(&none), timeout);
  return held_;
}

}  // namespace bytecomp::worker
