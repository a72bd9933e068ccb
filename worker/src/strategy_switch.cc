#include "strategy_switch.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/logging.h"

namespace bytecomp::worker {

const proto::FusionGroup* StrategySwitch::FusionGroups::Named(const std::string& name) const {
  auto it = by_name.find(name);
  return it == by_name.end() ? nullptr : &set_by.fusion_groups(it->second);
}

absl::Status StrategySwitch::Add(const proto::Strategy& strategy) {
  absl::MutexLock lock(&mu_);
  return AddLocked(strategy);
}

absl::Status StrategySwitch::AddLocked(const proto::Strategy& strategy) {
  if (fusion_ != nullptr && !compress::SameFusionGroups(strategy, fusion_->set_by)) {
    return absl::FailedPreconditionError(
        absl::StrCat("strategy version ", strategy.version(),
                     " names other fusion groups than those in force since round ",
                     fusion_->first_round, " (they are fixed once set)"));
  }
  if (absl::Status s = history_.Add(strategy); !s.ok()) return s;
  if (fusion_ != nullptr || strategy.fusion_groups_size() == 0) return absl::OkStatus();
  auto groups = std::make_shared<FusionGroups>();
  groups->first_round = strategy.first_round();
  *groups->set_by.mutable_fusion_groups() = strategy.fusion_groups();
  for (int g = 0; g < groups->set_by.fusion_groups_size(); ++g) {
    groups->by_name[groups->set_by.fusion_groups(g).name()] = g;
    for (const std::string& member : groups->set_by.fusion_groups(g).tensors()) {
      groups->group_of[member] = g;
    }
  }
  fusion_ = std::move(groups);
  return absl::OkStatus();
}

std::shared_ptr<const StrategySwitch::FusionGroups> StrategySwitch::fusion_groups() const {
  absl::MutexLock lock(&mu_);
  return fusion_;
}

std::optional<compress::TensorPlan> StrategySwitch::Admit(uint64_t round, absl::string_view tensor,
                                                          int64_t tensor_bytes,
                                                          int64_t row_elements) {
  absl::MutexLock lock(&mu_);
  if (hold_after_round_.has_value() && round > *hold_after_round_) return std::nullopt;
  highest_started_round_ = std::max(highest_started_round_, round);
  const proto::Strategy* strategy = history_.ForRound(round);
  if (strategy == nullptr) return compress::TensorPlan{};
  if (fusion_ != nullptr && round >= fusion_->first_round) {
    if (auto it = fusion_->group_of.find(tensor); it != fusion_->group_of.end()) {
      compress::TensorPlan fused;
      fused.version = strategy->version();
      fused.fusion_group = fusion_->set_by.fusion_groups(it->second).name();
      return fused;
    }
  }
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
  if (absl::Status s = AddLocked(strategy); !s.ok()) {
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
