#include "bytecomp/common/rejoin_record.h"

#include <algorithm>

namespace bytecomp {

void RejoinRecord::Registered(const proto::Topology& topology) { strategy_ = topology.strategy(); }

void RejoinRecord::Sent(const proto::ControlMessage& message) {
  if (message.has_declare_tensor()) {
    const std::string& name = message.declare_tensor().name();
    if (!declared_.contains(name) && !pending_declarations_.contains(name)) {
      pending_declarations_[name] = {order_++, message.declare_tensor()};
    }
  } else if (message.has_barrier_request()) {
    const proto::BarrierRequest& request = message.barrier_request();
    auto released = released_.find(request.group());
    if (released == released_.end() || request.sequence() > released->second) {
      pending_barriers_.try_emplace({request.group(), request.sequence()}, order_++);
    }
  } else if (message.has_profile_report()) {
    profile_report_ = message;
  } else if (message.has_link_probe_report()) {
    link_probe_report_ = message;
  } else if (message.has_worker_done()) {
    worker_done_ = true;
  }
}

void RejoinRecord::Received(const proto::ControlMessage& message) {
  if (message.has_declare_reply()) {
    const proto::DeclareReply& reply = message.declare_reply();
    pending_declarations_.erase(reply.name());
    if (reply.ok()) declared_[reply.name()] = reply;
  } else if (message.has_barrier_release()) {
    const proto::BarrierRelease& release = message.barrier_release();
    uint64_t& highest = released_[release.group()];
    highest = std::max(highest, release.sequence());
    for (auto it = pending_barriers_.begin(); it != pending_barriers_.end();) {
      it = it->first.first == release.group() && it->first.second <= highest
               ? pending_barriers_.erase(it)
               : std::next(it);
    }
  } else if (message.has_strategy_prepare()) {
    prepared_version_ = message.strategy_prepare().version();
  } else if (message.has_strategy_commit()) {
    const proto::Strategy& committed = message.strategy_commit().strategy();
    if (committed.version() >= strategy_.version()) strategy_ = committed;
    prepared_version_ = 0;
  }
}

proto::Rejoin RejoinRecord::Report() const {
  proto::Rejoin report;
  for (const auto& [name, reply] : declared_) *report.add_declarations() = reply;
  *report.mutable_strategy() = strategy_;
  report.set_prepared_version(prepared_version_);
  for (const auto& [group, sequence] : released_) {
    proto::BarrierRelease* r = report.add_released();
    r->set_group(group);
    r->set_sequence(sequence);
  }
  return report;
}

std::vector<proto::ControlMessage> RejoinRecord::Unanswered() const {
  std::vector<std::pair<uint64_t, proto::ControlMessage>> ordered;
  for (const auto& [name, entry] : pending_declarations_) {
    proto::ControlMessage m;
    *m.mutable_declare_tensor() = entry.second;
    ordered.push_back({entry.first, std::move(m)});
  }
  for (const auto& [key, order] : pending_barriers_) {
    proto::ControlMessage m;
    m.mutable_barrier_request()->set_group(key.first);
    m.mutable_barrier_request()->set_sequence(key.second);
    ordered.push_back({order, std::move(m)});
  }
  std::sort(ordered.begin(), ordered.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<proto::ControlMessage> out;
  for (const std::optional<proto::ControlMessage>& report : {link_probe_report_, profile_report_}) {
    if (report.has_value()) out.push_back(*report);
  }
  for (auto& [order, m] : ordered) out.push_back(std::move(m));
  if (worker_done_) {
    proto::ControlMessage done;
    done.mutable_worker_done();
    out.push_back(std::move(done));
  }
  return out;
}

}  // namespace bytecomp
