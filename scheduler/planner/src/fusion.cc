#include "bytecomp/planner/fusion.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace bytecomp::planner {

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
      proto::TensorProfile* t = fused.profile.add_tensors();
      t->set_name(group.name());
      int64_t elements = 0;
      double gap = 0;
      for (const proto::TensorProfile* member : run) {
        group.add_tensors(member->name());
        elements += member->elements();
        gap += member->ready_gap_us();
      }
      t->set_elements(elements);
      t->set_ready_gap_us(gap);  // ready with its last member
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
    const bool small = element_bytes == 4 && bytes < below_bytes && !t.has_block_density();
    if (!small || run_bytes + bytes > cap_bytes) flush();
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

}  // namespace bytecomp::planner
