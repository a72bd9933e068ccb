#include "bytecomp/planner/fusion.h"

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace bytecomp::planner {
namespace {

// A group of `members` as one tensor: their elements, ready with the last of them (their gaps
// summed).
void AddGroupTensor(const std::string& name, absl::Span<const proto::TensorProfile* const> members,
                    proto::ModelProfile* profile) {
  proto::TensorProfile* t = profile->add_tensors();
  t->set_name(name);
  int64_t elements = 0;
  double gap = 0;
  for (const proto::TensorProfile* member : members) {
    elements += member->elements();
    gap += member->ready_gap_us();
  }
  t->set_elements(elements);
  t->set_ready_gap_us(gap);
}

}  // namespace

FusedModel FuseProfile(const proto::ModelProfile& profile, int64_t below_bytes, int64_t cap_bytes) {
  FusedModel fused;
  fused.profile = profile;
  fused.profile.clear_tensors();
  std::vector<const proto::TensorProfile*> run;  // the group being filled
  int64_t run_bytes = 0;
  auto flush = [&] {
    if (run.size() >= 2) {
      proto::FusionGroup group;
      group.set_name(absl::StrCat("fused.", fused.groups.size()));
      AddGroupTensor(group.name(), run, &fused.profile);
      for (const proto::TensorProfile* member : run) group.add_tensors(member->name());
      fused.members += static_cast<int>(run.size());
      fused.groups.push_back(std::move(group));
    } else {
      for (const proto::TensorProfile* t : run) *fused.profile.add_tensors() = *t;
    }
    run.clear();
    run_bytes = 0;
  };
  for (const proto::TensorProfile& t : profile.tensors()) {
    const int64_t element_bytes = t.element_bytes() > 0 ? t.element_bytes() : 4;
    const int64_t bytes = t.elements() * element_bytes;
    // A tensor with blocks of zeros (its measured block density below 1) stays alone: the
    // block-sparse exchange may send it in fewer bytes, which a group would hide.
    const bool sparse = t.has_block_density() && t.block_density() < 1;
    const bool small = element_bytes == 4 && !t.on_device() && !t.some_rounds_only() &&
                       bytes < below_bytes && !sparse;
    if (!small || t.after_wait() || run_bytes + bytes > cap_bytes) flush();
    if (small) {
      run.push_back(&t);
      run_bytes += bytes;
    } else {
      *fused.profile.add_tensors() = t;
    }
  }
  flush();
  return fused;
}

absl::StatusOr<proto::ModelProfile> ProfileWithGroups(
    const proto::ModelProfile& profile, const std::vector<proto::FusionGroup>& groups) {
  absl::flat_hash_map<std::string, int> first_of;  // a group's first member -> the group
  absl::flat_hash_set<std::string> members;
  for (int g = 0; g < static_cast<int>(groups.size()); ++g) {
    if (groups[g].tensors_size() == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("fusion group '", groups[g].name(), "' has no tensors"));
    }
    first_of[groups[g].tensors(0)] = g;
    for (const std::string& name : groups[g].tensors()) {
      if (!members.insert(name).second) {
        return absl::InvalidArgumentError(absl::StrCat("fusion group '", groups[g].name(),
                                                       "': tensor '", name,
                                                       "' is in more than one group"));
      }
    }
  }
  proto::ModelProfile out = profile;
  out.clear_tensors();
  std::vector<bool> placed(groups.size(), false);
  const auto& tensors = profile.tensors();
  for (int i = 0; i < tensors.size(); ++i) {
    const auto group = first_of.find(tensors[i].name());
    if (group == first_of.end()) {
      if (members.contains(tensors[i].name())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", tensors[i].name(),
            "' of a fusion group is not where its group's tensors are, consecutive in the "
            "profile's (ready) order"));
      }
      *out.add_tensors() = tensors[i];
      continue;
    }
    const proto::FusionGroup& g = groups[group->second];
    std::vector<const proto::TensorProfile*> run;
    for (const std::string& name : g.tensors()) {
      if (i >= tensors.size() || tensors[i].name() != name) {
        return absl::InvalidArgumentError(
            absl::StrCat("fusion group '", g.name(), "': its tensor '", name,
                         "' is not next in the profile (a group's tensors are consecutive, in "
                         "the profile's ready order)"));
      }
      run.push_back(&tensors[i++]);
    }
    --i;
    AddGroupTensor(g.name(), run, &out);
    placed[group->second] = true;
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    if (!placed[g]) {
      return absl::InvalidArgumentError(absl::StrCat("fusion group '", groups[g].name(),
                                                     "': tensor '", groups[g].tensors(0),
                                                     "' is not in the profile"));
    }
  }
  return out;
}

absl::StatusOr<std::optional<FusedPlan>> PlanWithFusion(
    const PlannerInputs& inputs, absl::Span<const int64_t> below_bytes, int64_t cap_bytes,
    double unfused_us, double min_gain,
    absl::FunctionRef<absl::StatusOr<PlanResult>(const PreparedProblem&)> plan) {
  std::optional<FusedPlan> best;
  int64_t last_members = -1;
  for (const int64_t below : below_bytes) {
    FusedModel model = FuseProfile(inputs.profile, below, cap_bytes);
    // A larger size that fuses no more tensors makes the same groups.
    if (model.groups.empty() || model.members == last_members) continue;
    last_members = model.members;
    PlannerInputs fused_inputs = inputs;
    fused_inputs.profile = model.profile;
    absl::StatusOr<PreparedProblem> problem = Prepare(fused_inputs);
    if (!problem.ok()) return problem.status();
    absl::StatusOr<PlanResult> result = plan(*problem);
    if (!result.ok()) return result.status();
    if (best.has_value() && result->predicted_us >= best->result.predicted_us) continue;
    best = FusedPlan{std::move(model), below, *std::move(problem), *std::move(result)};
  }
  if (best.has_value()) best->faster = best->result.predicted_us < unfused_us * (1 - min_gain);
  return best;
}

}  // namespace bytecomp::planner
