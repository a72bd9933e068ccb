#include "bytecomp/scheduler/collective_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/logging.h"

namespace bytecomp {

std::string CollectiveStore::Refusal(const RegisteredNode& node, const std::string& key) const {
  if (node.role != proto::ROLE_WORKER)
    return absl::StrCat(NodeTable::Name(node), " is not a worker");
  if (!collectives_) {
    return "the job has no collectives (ClusterConfig.collectives is off)";
  }
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return absl::StrCat("a key of ", key.size(), " bytes (1 to ", kMaxKeyBytes, ")");
  }
  return "";
}

namespace {

// Refuses `message` from `node`: its error reply and the scheduler's log name why.
auto Refuser(const RegisteredNode& node, absl::string_view message, Outbox* out) {
  return [&node, message, out](const std::string& why) {
    out->Refuse(node.identity, absl::StrCat(message, " refused: ", why),
                absl::StrCat(message, " from ", NodeTable::Name(node), " refused: ", why));
  };
}

}  // namespace

void CollectiveStore::HandleSet(const RegisteredNode& node, const proto::CollectiveStoreSet& set,
                                Outbox* out) {
  const std::string name = NodeTable::Name(node);
  auto refuse = Refuser(node, "CollectiveStoreSet", out);
  if (std::string why = Refusal(node, set.key()); !why.empty()) return refuse(why);
  if (set.value().size() > kMaxValueBytes) {
    return refuse(
        absl::StrCat("a value of ", set.value().size(), " bytes (at most ", kMaxValueBytes, ")"));
  }
  auto it = values_.find(set.key());
  if (it != values_.end() && it->second.owner != node.rank) {
    return refuse(absl::StrCat("key '", set.key(), "' was set by worker ", it->second.owner));
  }
  if (it == values_.end()) {
    int& count = keys_by_worker_[node.rank];
    if (count >= kMaxKeysPerWorker) {
      return refuse(absl::StrCat(name, " has set ", count, " keys, the most one worker may"));
    }
    ++count;
    it = values_.emplace(set.key(), Entry{node.rank, ""}).first;
  }
  it->second.value = set.value();
  auto waiting = waiting_.find(set.key());
  if (waiting == waiting_.end()) return;
  proto::ControlMessage reply;
  reply.mutable_collective_store_value()->set_key(set.key());
  reply.mutable_collective_store_value()->set_value(set.value());
  for (int rank : waiting->second) {
    --waiting_by_worker_[rank];
    if (const RegisteredNode* w = nodes_.At(proto::ROLE_WORKER, rank); w != nullptr) {
      out->Send(w->identity, reply);
    }
  }
  waiting_.erase(waiting);
}

void CollectiveStore::HandleGet(const RegisteredNode& node, const proto::CollectiveStoreGet& get,
                                Outbox* out) {
  const std::string name = NodeTable::Name(node);
  auto refuse = Refuser(node, "CollectiveStoreGet", out);
  if (std::string why = Refusal(node, get.key()); !why.empty()) return refuse(why);
  if (auto it = values_.find(get.key()); it != values_.end()) {
    proto::ControlMessage reply;
    reply.mutable_collective_store_value()->set_key(get.key());
    reply.mutable_collective_store_value()->set_value(it->second.value);
    out->Send(node.identity, std::move(reply));
    return;
  }
  std::vector<int>& ranks = waiting_[get.key()];
  if (std::find(ranks.begin(), ranks.end(), node.rank) != ranks.end()) return;  // asked already
  int& count = waiting_by_worker_[node.rank];
  if (count >= kMaxWaitingPerWorker) {
    if (ranks.empty()) waiting_.erase(get.key());
    return refuse(absl::StrCat(name, " waits for ", count, " keys, the most one worker may"));
  }
  ++count;
  ranks.push_back(node.rank);
}

}  // namespace bytecomp
