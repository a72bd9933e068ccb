// Local-communicator relay (hierarchical jobs, ClusterConfig.hierarchical): a machine's
// local root sends LocalCommunicator{kind, id}, at most one of each kind ("host": its host
// reducer's endpoint; "nccl": a 128-byte NCCL unique id, when its local ranks have GPUs);
// the scheduler checks it and relays it once to the machine's other local ranks.
//
// Refused (an Error, counted as a bad message): from a server, in a flat job, before the
// topology, from a worker that is not the local root of a machine with more than one
// worker, an unknown kind, an id of the wrong size, or a second, different id of one kind
// for one machine. The same id again is ignored: the local ranks have it already.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "bytecomp/scheduler/node_table.h"
#include "bytecomp/scheduler/outbox.h"
#include "cluster_config.pb.h"
#include "control.pb.h"

namespace bytecomp {

class LocalRelay {
 public:
  LocalRelay(const proto::ClusterConfig& config, const NodeTable& nodes)
      : config_(config), nodes_(nodes) {}

  void Handle(const RegisteredNode& node, const proto::LocalCommunicator& comm, Outbox* out);

 private:
  const proto::ClusterConfig& config_;
  const NodeTable& nodes_;
  // (machine, kind) -> the id relayed
  std::map<std::pair<std::string, std::string>, std::string> relayed_;
};

}  // namespace bytecomp
