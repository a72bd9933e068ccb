#include "bytecomp/scheduler/strategy_keeper.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/common/socket_limits.h"
#include "bytecomp/compress/strategy.h"

namespace bytecomp {
namespace {

// A strategy travels in one control message (Topology, StrategyCommit), which nodes take up to
// kMaxSchedulerMessageBytes.
absl::Status CheckStrategySize(const proto::Strategy& strategy, absl::string_view what) {
  const size_t bytes = strategy.ByteSizeLong();
  if (bytes <= static_cast<size_t>(kMaxStrategyBytes)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " is ", bytes, " bytes serialized; at most ",
                                                 kMaxStrategyBytes, " travel to the nodes"));
}

// Every entry that names a collective, as "tensors[i] ('pattern') SCHEME_X".
std::vector<std::string> CollectiveEntries(const proto::Strategy& strategy) {
  std::vector<std::string> entries;
  for (int i = 0; i < strategy.tensors_size(); ++i) {
    const proto::TensorStrategy& t = strategy.tensors(i);
    if (t.scheme() == proto::SCHEME_PS) continue;
    entries.push_back(absl::StrCat("tensors[", i, "] ('", t.name_pattern(), "') ",
                                   proto::Scheme_Name(t.scheme())));
  }
  return entries;
}

}  // namespace

void StrategyKeeper::LogUnencrypted(const proto::Strategy& strategy) const {
  if (!keyed_) return;
  const std::vector<std::string> entries = CollectiveEntries(strategy);
  if (entries.empty()) return;
  BC_LOG_WARNING("strategy version ", strategy.version(),
                 ": the tensors of these entries travel unencrypted in this keyed job (gloo's "
                 "collectives; the strategy sets allow_unencrypted_collectives): ",
                 absl::StrJoin(entries, ", "));
}

absl::Status StrategyKeeper::LoadInitial(const std::string& path) {
  path_ = path;
  current_ = proto::Strategy();
  if (!path.empty()) {
    absl::StatusOr<proto::Strategy> loaded = compress::LoadStrategyFile(path);
    if (!loaded.ok()) return loaded.status();
    if (absl::Status s = CheckStrategySize(*loaded, path); !s.ok()) return s;
    if (absl::Status s = JobRefuses(*loaded); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
    }
    current_ = *loaded;
  } else {
    current_.set_min_compress_bytes(compress::kDefaultMinCompressBytes);
  }
  current_.set_version(1);
  current_.set_first_round(0);
  LogUnencrypted(current_);
  return absl::OkStatus();
}

absl::StatusOr<proto::ControlMessage> StrategyKeeper::BeginReload() {
  if (path_.empty()) {
    return absl::FailedPreconditionError(
        "no strategy file was given (--strategy), nothing to reload");
  }
  absl::StatusOr<proto::Strategy> loaded = compress::LoadStrategyFile(path_);
  if (!loaded.ok()) return loaded.status();
  return BeginUpdate(*std::move(loaded));
}

absl::StatusOr<proto::ControlMessage> StrategyKeeper::BeginUpdate(proto::Strategy strategy) {
  if (pending_.has_value()) {
    return absl::UnavailableError(absl::StrCat("strategy version ", pending_->version(),
                                               " is still being switched to; try again"));
  }
  if (absl::Status s = compress::ValidateStrategy(strategy); !s.ok()) return s;
  if (absl::Status s = CheckStrategySize(strategy, "the new strategy"); !s.ok()) return s;
  if (absl::Status s = JobRefuses(strategy); !s.ok()) return s;
  if (absl::Status s = FusionGroupsChange(strategy); !s.ok()) return s;
  strategy.set_version(current_.version() + 1);
  pending_ = std::move(strategy);
  highest_round_by_worker_.clear();
  proto::ControlMessage prepare;
  prepare.mutable_strategy_prepare()->set_version(pending_->version());
  return prepare;
}

std::optional<proto::ControlMessage> StrategyKeeper::OnPrepareReply(
    int worker_rank, const proto::StrategyPrepareReply& reply, int num_workers) {
  if (!pending_.has_value() || reply.version() != pending_->version()) return std::nullopt;
  highest_round_by_worker_[worker_rank] = reply.highest_started_round();
  if (static_cast<int>(highest_round_by_worker_.size()) < num_workers) return std::nullopt;
  uint64_t highest = 0;
  for (const auto& [rank, round] : highest_round_by_worker_) highest = std::max(highest, round);
  // Every worker holds rounds beyond (its highest + 1) until the commit: highest + 2 is a
  // round nobody has started, and the earliest safe one.
  pending_->set_first_round(highest + 2);
  previous_ = std::move(current_);
  current_ = *std::move(pending_);
  pending_.reset();
  proto::ControlMessage commit;
  *commit.mutable_strategy_commit()->mutable_strategy() = current_;
  BC_LOG_INFO("strategy version ", current_.version(), " applies from round ",
              current_.first_round(), " (", current_.tensors_size(), " entries)");
  LogUnencrypted(current_);
  return commit;
}

absl::Status StrategyKeeper::FusionGroupsChange(const proto::Strategy& strategy) const {
  if (compress::SameFusionGroups(strategy, current_)) return absl::OkStatus();
  if (current_.fusion_groups_size() > 0) {
    return absl::FailedPreconditionError(
        "the new strategy's fusion_groups differ from the job's: once set they are fixed for "
        "the job (the workers pack their members' rounds into the groups' from the round they "
        "were set)");
  }
  // Groups set now: a member's own error feedback (what its codec left out so far) would be
  // dropped when its rounds move into its group's.
  for (const proto::FusionGroup& group : strategy.fusion_groups()) {
    for (const std::string& member : group.tensors()) {
      const proto::TensorStrategy* entry = compress::EntryFor(current_, member);
      if (entry == nullptr ||
          (entry->push_codec().memory().empty() && entry->pull_codec().memory().empty())) {
        continue;
      }
      return absl::FailedPreconditionError(absl::StrCat(
          "fusion group '", group.name(), "': its member '", member,
          "' has error-feedback memory under the job's strategy (entry '", entry->name_pattern(),
          "'), which its group's rounds would drop: fusion groups may be set at a switch only "
          "over tensors without it"));
    }
  }
  return absl::OkStatus();
}

absl::Status StrategyKeeper::JobRefuses(const proto::Strategy& strategy) const {
  if (hierarchical_ && strategy.fusion_groups_size() > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("fusion_groups[0] ('", strategy.fusion_groups(0).name(),
                     "'): the job is hierarchical, and fusion groups run on flat jobs only"));
  }
  for (int i = 0; i < strategy.tensors_size(); ++i) {
    const proto::TensorStrategy& t = strategy.tensors(i);
    if (t.scheme() == proto::SCHEME_PS) continue;
    const std::string entry = absl::StrCat("tensors[", i, "] ('", t.name_pattern(), "') asks for ",
                                           proto::Scheme_Name(t.scheme()));
    if (!collectives_) {
      return absl::FailedPreconditionError(
          absl::StrCat(entry,
                       ", but the job's ClusterConfig.collectives is off: the workers "
                       "joined no collective (set collectives: true in the cluster config)"));
    }
    if (hierarchical_) {
      return absl::FailedPreconditionError(
          absl::StrCat(entry,
                       ", but the job is hierarchical: only each machine's local root "
                       "reaches the network, and a collective spans every worker"));
    }
    if (keyed_ && !strategy.allow_unencrypted_collectives()) {
      return absl::FailedPreconditionError(absl::StrCat(
          entry,
          ", but the job has a cluster key and gloo's collectives travel unencrypted; "
          "set allow_unencrypted_collectives: true in the strategy to accept that, or use "
          "scheme SCHEME_PS"));
    }
  }
  return absl::OkStatus();
}

void StrategyKeeper::Adopt(const proto::Strategy& strategy) {
  current_ = strategy;
  pending_.reset();
  highest_round_by_worker_.clear();
}

}  // namespace bytecomp
