#include "tensor_fusion.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "operation.h"

namespace bytecomp::worker {

absl::StatusOr<std::optional<TensorFusion::GroupRound>> TensorFusion::Add(
    const std::shared_ptr<Operation>& member, const proto::FusionGroup& definition) {
  const PushPullRequest& r = member->request;
  auto refuse = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", r.name, "' of fusion group '", definition.name(), "': ", why));
  };
  if (r.on_device || r.dtype != ElementType::kFloat32) {
    return refuse("a fusion group takes host fp32 tensors only");
  }
  absl::MutexLock lock(&mu_);
  std::unique_ptr<Group>& slot = groups_[definition.name()];
  if (slot == nullptr) {
    slot = std::make_unique<Group>();
    slot->name = definition.name();
    slot->size = static_cast<size_t>(definition.tensors_size());
    for (int m = 0; m < definition.tensors_size(); ++m) slot->position[definition.tensors(m)] = m;
    slot->counts.assign(slot->size, -1);
  }
  Group& group = *slot;
  auto at = group.position.find(r.name);
  if (at == group.position.end()) return refuse("not one of its members");
  const size_t position = static_cast<size_t>(at->second);
  int64_t& count = group.counts[position];
  if (count >= 0 && count != r.element_count) {
    return refuse(absl::StrCat(r.element_count, " elements, where it had ", count));
  }
  const uint64_t index = member->round();
  Round* round = nullptr;
  for (const std::unique_ptr<Round>& candidate : group.rounds) {
    if (candidate->index == index) round = candidate.get();
  }
  if (round == nullptr) {
    group.rounds.push_back(std::make_unique<Round>());
    round = group.rounds.back().get();
    round->index = index;
    round->members.resize(group.size);
  }
  if (round->members[position] != nullptr) {
    return refuse(absl::StrCat("a second push_pull in round ", index));
  }
  if (round->arrived == 0) {
    round->average = r.average;
  } else if (round->average != r.average) {
    return refuse("averaged unlike the other members of its round (one push_pull sums them)");
  }
  count = r.element_count;
  round->members[position] = member;
  ++counts_.members;
  if (++round->arrived < static_cast<int>(group.size)) return std::nullopt;
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
  request.average = round.average;
  return request;
}

std::vector<std::shared_ptr<Operation>> TensorFusion::Finish(const std::string& group_name,
                                                             uint64_t index,
                                                             const absl::Status& status) {
  std::unique_ptr<Round> round;
  {
    absl::MutexLock lock(&mu_);
    auto found = groups_.find(group_name);
    if (found == groups_.end()) return {};
    Group& group = *found->second;
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
  for (auto& [name, group] : groups_) {
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
