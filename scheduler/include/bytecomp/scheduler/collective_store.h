// The rendezvous of the workers' collectives (ClusterConfig.collectives): a small key-value
// store that gloo's full mesh exchanges its pairs' addresses through (worker/README.md,
// "Collectives"). A worker sets keys (CollectiveStoreSet) and asks for others'
// (CollectiveStoreGet); the scheduler answers a get with CollectiveStoreValue as soon as the key
// is set, at once or when it comes.
//
// Refused (an Error, counted as a bad message): from a server, in a job without collectives,
// a key of more than kMaxKeyBytes or empty, a value of more than kMaxValueBytes, a worker's
// key past its kMaxKeysPerWorker, a key another worker set, a worker's get past its
// kMaxWaitingPerWorker unanswered ones. A worker may set its own key again (the latest value
// counts).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "bytecomp/scheduler/node_table.h"
#include "bytecomp/scheduler/outbox.h"
#include "cluster_config.pb.h"
#include "control.pb.h"

namespace bytecomp {

class CollectiveStore {
 public:
  static constexpr size_t kMaxKeyBytes = 256;
  static constexpr size_t kMaxValueBytes = 256 * 1024;
  static constexpr int kMaxKeysPerWorker = 4;
  static constexpr int kMaxWaitingPerWorker = 64;

  CollectiveStore(const proto::ClusterConfig& config, const NodeTable& nodes)
      : collectives_(config.collectives()), nodes_(nodes) {}

  void HandleSet(const RegisteredNode& node, const proto::CollectiveStoreSet& set, Outbox* out);
  void HandleGet(const RegisteredNode& node, const proto::CollectiveStoreGet& get, Outbox* out);

  size_t keys() const { return values_.size(); }

 private:
  // Empty when `node` may use the store; else why not.
  std::string Refusal(const RegisteredNode& node, const std::string& key) const;

  struct Entry {
    int owner = -1;  // the worker rank that set it
    std::string value;
  };
  const bool collectives_;
  const NodeTable& nodes_;
  std::map<std::string, Entry> values_;
  std::map<int, int> keys_by_worker_;
  std::map<std::string, std::vector<int>> waiting_;  // key -> worker ranks that asked
  std::map<int, int> waiting_by_worker_;
};

}  // namespace bytecomp
