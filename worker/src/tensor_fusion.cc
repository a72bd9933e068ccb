#include "tensor_fusion.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "operation.h"

namespace bytecomp::worker {

TensorFusion::TensorFusion(const proto::Strategy& strategy) {
  for (const proto::FusionGroup& g : strategy.fusion_groups()) {
    auto group = std::make_unique<Group>();
    group->name = g.name();
    group->tensors.assign(g.tensors().begin(), g.tensors().end());
    group->counts.assign(group->tensors.size(), -1);
    for (size_t m = 0; m < group->tensors.size(); ++m) {
      group_of_[group->tensors[m]] = Member{group.get(), static_cast<int>(m)};
    }
    by_group_name_[group->name] = group.get();
    groups_.push_back(std::move(group));
  }
}

bool TensorFusion::IsGroup(const std::string& name) const { return by_group_name_.contains(name); }

const std::string& TensorFusion::GroupOf(const std::string& name) const {
  auto it = group_of_.find(name);
  return it == group_of_.end() ? name : it->second.group->name;
}

absl::StatusOr<std::optional<TensorFusion::GroupRound>> TensorFusion::Add(
    const std::shared_ptr<Operation>& member) {
  const PushPullRequest& r = member->request;
  const Member& m = group_of_.at(r.name);
  Group& group = *m.group;
  auto refuse = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", r.name, "' of fusion group '", group.name, "': ", why));
  };
  if (r.on_device || r.dtype != ElementType::kFloat32) {
    return refuse("a fusion group takes host fp32 tensors only");
  }
  absl::MutexLock lock(&mu_);
  int64_t& count = group.counts[static_cast<size_t>(m.position)];
  if (count >= 0 && count != r.element_count) {
    return refuse(absl::StrCat(r.element_count, " elements, where it had ", count));
  }
  Round* round = nullptr;
  for (const std::unique_ptr<Round>& candidate : group.rounds) {
    if (candidate->members[static_cast<size_t>(m.position)] == nullptr) {
      round = candidate.get();
      break;
    }
  }
  if (round == nullptr) {
    group.rounds.push_back(std::make_unique<Round>());
    round = group.rounds.back().get();
    round->index = group.next_round++;
    round->members.resize(group.tensors.size());
  }
  for (const std::shared_ptr<Operation>& other : round->members) {
    if (other != nullptr && other->request.average != r.average) {
      return refuse("averaged unlike the other members of its round (one push_pull sums them)");
    }
  }
  count = r.element_count;
  round->members[static_cast<size_t>(m.position)] = member;
  ++counts_.members;
  if (++round->arrived < static_cast<int>(group.tensors.size())) return std::nullopt;
  // Rounds start in order: a complete round behind an incomplete one cannot be (a member comes
  // to the first round that lacks it).
  ++counts_.group_rounds;
  return GroupRound{Pack(group, *round), round->index};
}

PushPullRequest TensorFusion::Pack(Group& group, Round& round) {
  int64_t total = 0;
  for (const std::shared_ptr<Operation>& member : round.members) {
    total += member->request.element_count;
  }
  round.buffer.resize(static_cast<size_t>(total));
  int64_t at = 0;
  int priority = round.members.front()->request.priority;
  for (const std::shared_ptr<Operation>& member : round.members) {
    const PushPullRequest& r = member->request;
    if (r.element_count > 0) {
      std::memcpy(round.buffer.data() + at, r.data, static_cast<size_t>(r.element_count) * 4);
    }
    at += r.element_count;
    priority = std::max(priority, r.priority);
  }
  PushPullRequest request;
  request.name = group.name;
  request.data = round.buffer.data();
  request.element_count = total;
  request.dtype = ElementType::kFloat32;
  request.priority = priority;
  request.average = round.members.front()->request.average;
  return request;
}

std::vector<std::shared_ptr<Operation>> TensorFusion::Finish(const std::string& group_name,
                                                             uint64_t index,
                                                             const absl::Status& status) {
  auto found = by_group_name_.find(group_name);
  if (found == by_group_name_.end()) return {};
  Group& group = *found->second;
  std::unique_ptr<Round> round;
  {
    absl::MutexLock lock(&mu_);
    auto it = std::find_if(group.rounds.begin(), group.rounds.end(),
                           [&](const std::unique_ptr<Round>& r) { return r->index == index; });
    if (it == group.rounds.end() || !(*it)->started()) return {};
    round = std::move(*it);
    group.rounds.erase(it);
  }
  if (status.ok()) {
    int64_t at = 0;
    for (const std::shared_ptr<Operation>& member : round->members) {
      const PushPullRequest& r = member->request;
      if (r.element_count > 0) {
        std::memcpy(r.data, round->buffer.data() + at, static_cast<size_t>(r.element_count) * 4);
      }
      at += r.element_count;
    }
  }
  return std::move(round->members);
}

std::vector<std::shared_ptr<Operation>> TensorFusion::TakeWaiting() {
  std::vector<std::shared_ptr<Operation>> waiting;
  absl::MutexLock lock(&mu_);
  for (const std::unique_ptr<Group>& group : groups_) {
    for (auto it = group->rounds.begin(); it != group->rounds.end();) {
      if ((*it)->started()) {
        ++it;
        continue;
      }
      for (std::shared_ptr<Operation>& member : (*it)->members) {
        if (member != nullptr) waiting.push_back(std::move(member));
      }
      it = group->rounds.erase(it);
    }
  }
  return waiting;
}

TensorFusion::Counts TensorFusion::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

}  // namespace bytecomp::worker
