#include "bytecomp/scheduler/local_groups.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace bytecomp {
namespace {

// Machine names come from the network: bounded, so errors and logs stay readable.
constexpr size_t kMaxMachineName = 256;

}  // namespace

absl::Status CheckSlotRequest(const std::vector<SlotRequest>& registered,
                              const SlotRequest& joining) {
  const std::string who =
      absl::StrCat("worker ", joining.rank, " on machine '", joining.machine, "'");
  if (joining.machine.size() > kMaxMachineName) {
    return absl::InvalidArgumentError(absl::StrCat("worker ", joining.rank, ": a machine name of ",
                                                   joining.machine.size(), " bytes; at most ",
                                                   kMaxMachineName));
  }
  if (joining.declared_local_size.has_value() && *joining.declared_local_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, " declared local size ", *joining.declared_local_size, "; it must be >= 1"));
  }
  if (joining.requested_local_rank.has_value()) {
    const int lr = *joining.requested_local_rank;
    if (lr < 0 || (joining.declared_local_size.has_value() && lr >= *joining.declared_local_size)) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, " asked for local rank ", lr, ", out of range",
                       joining.declared_local_size.has_value()
                           ? absl::StrCat(" for local size ", *joining.declared_local_size)
                           : std::string(" (must be >= 0)")));
    }
  }
  int on_machine = 1;
  std::optional<int> declared = joining.declared_local_size;
  for (const SlotRequest& w : registered) {
    if (w.machine != joining.machine) continue;
    ++on_machine;
    if (w.declared_local_size.has_value()) {
      if (declared.has_value() && *declared != *w.declared_local_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            who, joining.declared_local_size.has_value() ? " declared" : " joins a machine with",
            " local size ", *declared, " but worker ", w.rank, " on the same machine declared ",
            *w.declared_local_size));
      }
      declared = w.declared_local_size;
    }
    if (joining.requested_local_rank.has_value() &&
        w.requested_local_rank == joining.requested_local_rank) {
      return absl::InvalidArgumentError(absl::StrCat(who, " asked for local rank ",
                                                     *joining.requested_local_rank,
                                                     ", already taken by worker ", w.rank));
    }
  }
  if (declared.has_value()) {
    if (joining.requested_local_rank.has_value() && *joining.requested_local_rank >= *declared) {
      return absl::InvalidArgumentError(absl::StrCat(who, " asked for local rank ",
                                                     *joining.requested_local_rank,
                                                     ", out of range for local size ", *declared));
    }
    if (on_machine > *declared) {
      return absl::InvalidArgumentError(absl::StrCat(who, " would be worker ", on_machine,
                                                     " on that machine, whose local size is ",
                                                     *declared));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<LocalAssignment> AssignLocalRanks(const std::vector<SlotRequest>& workers) {
  const int count = static_cast<int>(workers.size());
  std::vector<const SlotRequest*> by_rank(count, nullptr);
  for (const SlotRequest& w : workers) {
    if (w.rank < 0 || w.rank >= count || by_rank[w.rank] != nullptr) {
      return absl::InternalError(absl::StrCat("worker rank ", w.rank, " is invalid or repeated"));
    }
    by_rank[w.rank] = &w;
  }
  // Re-check in rank order, as registration did, so a caller that skipped it gets the same errors
  // (a check looks only at the workers on the same machine).
  std::map<std::string, std::vector<SlotRequest>> seen;
  for (const SlotRequest* w : by_rank) {
    std::vector<SlotRequest>& on_machine = seen[w->machine];
    if (absl::Status s = CheckSlotRequest(on_machine, *w); !s.ok()) return s;
    on_machine.push_back(*w);
  }
  LocalAssignment out;
  out.local_rank.assign(count, -1);
  out.local_size.assign(count, 0);
  out.local_root.assign(count, -1);
  std::map<std::string, size_t> machine_index;
  std::vector<std::vector<const SlotRequest*>> members;
  for (const SlotRequest* w : by_rank) {
    auto [it, added] = machine_index.emplace(w->machine, members.size());
    if (added) {
      members.emplace_back();
      out.machine_names.push_back(w->machine);
    }
    members[it->second].push_back(w);
  }
  for (size_t m = 0; m < members.size(); ++m) {
    const auto& group = members[m];
    const int size = static_cast<int>(group.size());
    std::optional<int> declared;
    for (const SlotRequest* w : group) {
      if (w->declared_local_size.has_value()) declared = w->declared_local_size;
    }
    std::vector<int> slots(size, -1);  // local rank -> worker rank
    for (const SlotRequest* w : group) {
      if (!w->requested_local_rank.has_value()) continue;
      if (*w->requested_local_rank >= size && !declared.has_value()) {
        return absl::FailedPreconditionError(
            absl::StrCat("worker ", w->rank, " asked for local rank ", *w->requested_local_rank,
                         " but only ", size, size == 1 ? " worker" : " workers",
                         " registered from machine '", out.machine_names[m], "'"));
      }
      if (*w->requested_local_rank < size) slots[*w->requested_local_rank] = w->rank;
    }
    if (declared.has_value() && *declared != size) {
      // Which local ranks are missing is known when every worker there named its local rank;
      // they are listed only for a declared size within the job's, which nothing else bounds
      // here (Registration refuses larger ones before they get this far).
      bool all_named = *declared <= count;
      std::vector<bool> taken(all_named ? *declared : 0, false);
      for (const SlotRequest* w : group) {
        if (w->requested_local_rank.has_value() && all_named) {
          taken[*w->requested_local_rank] = true;
        } else {
          all_named = false;
        }
      }
      std::vector<int> missing;
      for (int lr = 0; all_named && lr < *declared; ++lr) {
        if (!taken[lr]) missing.push_back(lr);
      }
      std::vector<std::string> present;
      for (const SlotRequest* w : group) {
        present.push_back(
            w->requested_local_rank.has_value()
                ? absl::StrCat(w->rank, " (local rank ", *w->requested_local_rank, ")")
                : absl::StrCat(w->rank));
      }
      return absl::FailedPreconditionError(absl::StrCat(
          "machine '", out.machine_names[m], "' declared local size ", *declared, " but ", size,
          size == 1 ? " worker" : " workers", " registered from it (worker", size == 1 ? " " : "s ",
          absl::StrJoin(present, ", "), "); missing ",
          all_named ? absl::StrCat("local rank", missing.size() == 1 ? " " : "s ",
                                   absl::StrJoin(missing, ", "))
                    : absl::StrCat(*declared - size, " of its local ranks"),
          ": a worker ran on the wrong machine or with the wrong BYTECOMP_LOCAL_RANK/SIZE"));
    }
    for (const SlotRequest* w : group) {
      if (w->requested_local_rank.has_value()) continue;
      *std::find(slots.begin(), slots.end(), -1) = w->rank;
    }
    for (int lr = 0; lr < size; ++lr) {
      out.local_rank[slots[lr]] = lr;
      out.local_size[slots[lr]] = size;
      out.local_root[slots[lr]] = slots[0];
    }
    out.machines.push_back(slots);
    out.roots.push_back(slots[0]);
  }
  std::sort(out.roots.begin(), out.roots.end());
  return out;
}

}  // namespace bytecomp
