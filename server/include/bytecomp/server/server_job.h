// What a server knows of its job from the Topology, and checks every request and declaration
// against: its rank, the workers and which of them push, each worker's token, and the job's
// configuration (its declaration limits).
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "bytecomp/common/frame_seal.h"
#include "bytecomp/common/node_token.h"
#include "cluster_config.pb.h"
#include "control.pb.h"

namespace bytecomp::server {

struct ServerJob {
  int my_rank = 0;
  int num_workers = 0;
  int num_servers = 0;
  // The worker ranks whose pushes make a round (Topology.pushers); empty: every worker.
  std::vector<int> pushers;
  // By worker rank (Topology.worker_tokens): a PUSH or PULL naming rank r must carry tokens[r].
  std::vector<NodeToken> worker_tokens;
  // By worker rank (Topology.worker_data_keys), key id = rank: the keys the workers seal their
  // data messages with; empty when the job does not seal them.
  std::vector<DataKey> worker_data_keys;
  // This server replaces a lost one (Topology.replaces_lost_server): its keys resume from
  // the workers' replays (key_resume.h).
  bool replaces_lost_server = false;
  // The epoch every PUSH and PULL must carry (DataHeader.server_epoch).
  uint64_t epoch = 0;
  // The job's configuration, defaults applied.
  proto::ClusterConfig config;

  // The topology this server received; an error when it lists no valid token per worker.
  static absl::StatusOr<ServerJob> FromTopology(const proto::Topology& topology);
};

}  // namespace bytecomp::server
