// What a node of a running job remembers of its talk with the scheduler, so that it can take
// part in a restarted scheduler's takeover (scheduler/include/bytecomp/scheduler/takeover.h):
// what it reports when it rejoins (proto::Rejoin), and what it sends again once the new
// scheduler holds the job (the requests the old one never answered). SchedulerClient keeps one
// and feeds it every message it sends and receives; socket-free, owned by the client's thread.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "control.pb.h"
#include "strategy.pb.h"

namespace bytecomp {

class RejoinRecord {
 public:
  // The topology arrived: its strategy is the one in force.
  void Registered(const proto::Topology& topology);
  void Sent(const proto::ControlMessage& message);
  void Received(const proto::ControlMessage& message);

  // What this node tells a restarted scheduler.
  proto::Rejoin Report() const;
  // What to send the new scheduler once it holds the job, in the order first sent: the
  // declarations and barrier requests not answered, the profile and link reports (a
  // restarted scheduler plans and prints with them; it ignores what it no longer needs) and
  // WorkerDone, if sent.
  std::vector<proto::ControlMessage> Unanswered() const;

  const proto::Strategy& strategy() const { return strategy_; }

 private:
  std::map<std::string, proto::DeclareReply> declared_;  // answered ok, by name
  // Sent and not answered, each with the order it was first sent in.
  std::map<std::string, std::pair<uint64_t, proto::DeclareTensor>> pending_declarations_;
  std::map<std::pair<std::string, uint64_t>, uint64_t> pending_barriers_;  // (group, seq) -> order
  std::map<std::string, uint64_t> released_;  // group -> highest sequence released
  proto::Strategy strategy_;
  uint64_t prepared_version_ = 0;
  std::optional<proto::ControlMessage> profile_report_, link_probe_report_;
  bool worker_done_ = false;
  uint64_t order_ = 0;
};

}  // namespace bytecomp
