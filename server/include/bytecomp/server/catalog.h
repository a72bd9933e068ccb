// What the scheduler told a server: the declared tensors and the strategy versions. The I/O
// thread validates requests against its copy; each key shard keeps its own copy, updated in
// order with the requests it is handed, so no lock is shared. A declaration beyond the job's
// limits (declaration_limits.h) is refused before anything is allocated for it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "bytecomp/common/config.h"
#include "bytecomp/common/declaration_limits.h"
#include "bytecomp/common/partition.h"
#include "bytecomp/compress/strategy.h"
#include "control.pb.h"

namespace bytecomp::server {

struct DeclaredTensor {
  std::string name;
  TensorLayout layout;
};

class Catalog {
 public:
  // `config`: the job's (its declaration limits; defaults applied).
  explicit Catalog(int num_servers, const proto::ClusterConfig& config = WithClusterDefaults({}))
      : num_servers_(num_servers), budget_(config) {}

  absl::Status AddTensor(const proto::DeclareReply& declared);
  absl::Status AddStrategy(const proto::Strategy& strategy);
  // Server failover (KeysMoved): the declared tensor's partitions are now on the servers
  // `moved` names (same id, size and partitions; only servers differ, else nothing changes).
  // Returns the keys that moved from `from_rank` to `my_rank`.
  std::vector<uint64_t> MoveTensor(const proto::DeclareReply& moved, int from_rank, int my_rank);
  // A server was lost (the I/O thread's copy): requests for its keys wait for a KeysMoved.
  void ServerLost(int rank) { lost_servers_.insert(rank); }
  // Whether the request's key is declared and placed on a lost server.
  bool OnLostServer(uint64_t key) const;

  const DeclaredTensor* Tensor(uint32_t tensor_id) const;
  // Elements of the declared partitions that server `rank` holds now.
  int64_t ElementsOn(int rank) const {
    auto it = elements_on_.find(rank);
    return it == elements_on_.end() ? 0 : it->second;
  }
  bool HasVersion(uint64_t version) const { return history_.Version(version) != nullptr; }
  const proto::Strategy* Strategy(uint64_t version) const { return history_.Version(version); }
  // The tensor's plan under a known strategy version (version 0: raw).
  compress::TensorPlan Plan(const DeclaredTensor& tensor, uint64_t version) const;

 private:
  int num_servers_;
  DeclarationBudget budget_;
  absl::flat_hash_map<uint32_t, DeclaredTensor> tensors_;
  absl::flat_hash_map<int, int64_t> elements_on_;  // ElementsOn
  compress::StrategyHistory history_;
  absl::flat_hash_set<int> lost_servers_;
};

}  // namespace bytecomp::server
