#include "strategy_switch.h"

#include <algorithm>

#include "bytecomp/common/logging.h"

namespace bytecomp::worker {

absl::Status StrategySwitch::Add(const proto::Strategy& strategy) {
  absl::MutexLock lock(&mu_);
  return history_.Add(strategy);
}

std::optional<compress::TensorPlan> StrategySwitch::Admit(uint64_t round, absl::string_view tensor,
                                                          int64_t tensor_bytes,
                                                          int64_t row_elements) {
  absl::MutexLock lock(&mu_);
  if (hold_after_round_.has_value() && round > *hold_after_round_) return std::nullopt;
  highest_started_round_ = std::max(highest_started_round_, round);
  const proto::Strategy* strategy = history_.ForRound(round);
  if (strategy == nullptr) return compress::TensorPlan{};
  return compress::PlanFor(*strategy, tensor, tensor_bytes, row_elements);
}

uint64_t StrategySwitch::Prepare(uint64_t version) {
  absl::MutexLock lock(&mu_);
  hold_after_round_ = highest_started_round_ + 1;
  BC_LOG_DEBUG("strategy version ", version, " prepared at round ", highest_started_round_);
  return highest_started_round_;
}

void StrategySwitch::Commit(const proto::Strategy& strategy) {
  absl::MutexLock lock(&mu_);
  if (const proto::Strategy* known = history_.Version(strategy.version());
      known != nullptr && known->first_round() == strategy.first_round()) {
    // A restarted scheduler commits the version in force again (takeover.h): a switch its
    // predecessor prepared and never committed ends here, with nothing new.
    if (hold_after_round_.has_value()) {
      BC_LOG_INFO("the strategy switch in progress ended without a change: version ",
                  strategy.version(), " stays in force");
    }
    hold_after_round_.reset();
    return;
  }
  if (absl::Status s = history_.Add(strategy); !s.ok()) {
    BC_LOG_ERROR("strategy update refused: ", s.message());
  }
  hold_after_round_.reset();
}

uint64_t StrategySwitch::SeedOf(uint64_t version) const {
  absl::MutexLock lock(&mu_);
  const proto::Strategy* s = history_.Version(version);
  return s == nullptr ? 0 : s->seed();
}

uint64_t StrategySwitch::VersionAt(uint64_t round) const {
  absl::MutexLock lock(&mu_);
  const proto::Strategy* s = history_.ForRound(round);
  return s == nullptr ? 0 : s->version();
}

}  // namespace bytecomp::worker
