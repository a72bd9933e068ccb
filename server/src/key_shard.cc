#include "bytecomp/server/key_shard.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "control.pb.h"

namespace bytecomp::server {

size_t ShardOf(uint64_t key, size_t num_shards) { return (key ^ (key >> 32)) % num_shards; }

KeyShard::KeyShard(int index, const ServerJob& job)
    : index_(index),
      my_rank_(job.my_rank),
      catalog_(job.num_servers, job.config),
      store_(job.my_rank, job.num_workers, catalog_, job.pushers, job.replaces_lost_server) {}

void KeyShard::Observe(telemetry::Timeline* timeline, telemetry::NodeMetrics* metrics) {
  telemetry_.reset();
  if (timeline != nullptr || metrics != nullptr) {
    telemetry_ = std::make_unique<RoundTelemetry>(timeline, metrics);
  }
  store_.Observe(telemetry_.get());
}

bool KeyShard::Handle(ShardMessage message, std::vector<OutgoingReply>* out) {
  if (ServerCommand* command = std::get_if<ServerCommand>(&message)) {
    return HandleCommand(*command, out);
  }
  ShardRequest& request = std::get<ShardRequest>(message);
  store_.Handle(std::move(request.identity), request.header, std::move(request.payload), out);
  return true;
}

bool KeyShard::HandleCommand(const ServerCommand& command, std::vector<OutgoingReply>* out) {
  if (std::holds_alternative<StopCommand>(command)) return false;
  if (const auto* fail = std::get_if<FailCommand>(&command)) {
    store_.FailHeldPulls(fail->reason, out);
  } else if (const auto* declare = std::get_if<DeclareCommand>(&command)) {
    // The I/O thread checked and logged it; a declaration it refused is not forwarded.
    (void)catalog_.AddTensor(*declare->tensor);
  } else if (const auto* strategy = std::get_if<StrategyCommand>(&command)) {
    (void)catalog_.AddStrategy(*strategy->strategy);
  } else if (const auto* move = std::get_if<MoveCommand>(&command)) {
    for (const proto::DeclareReply& tensor : move->moved->tensors()) {
      for (uint64_t key : catalog_.MoveTensor(tensor, move->moved->from_rank(), my_rank_)) {
        store_.ExpectResume(key);
      }
    }
  }
  return true;  // LostCommand: the I/O thread's
}

std::string KeyShard::Summary() const {
  std::vector<std::string> pushes;
  const std::vector<int64_t>& by_worker = store_.pushes_by_worker();
  for (size_t r = 0; r < by_worker.size(); ++r) {
    if (by_worker[r] > 0) pushes.push_back(absl::StrCat(r, "=", by_worker[r]));
  }
  return absl::StrCat(
      "key shard ", index_, " stops after ", store_.rounds_completed(), " rounds on ",
      store_.num_keys(), " keys, refused ", store_.refused(),
      " requests; pushes by worker: ", pushes.empty() ? "none" : absl::StrJoin(pushes, " "),
      store_.keys_resumed() == 0
          ? ""
          : absl::StrCat("; as a replacement it resumed ", store_.keys_resumed(),
                         " keys and answered the last round of ",
                         store_.rounds_answered_from_replays(),
                         " of them from replays, for workers that had not got it"));
}

}  // namespace bytecomp::server
