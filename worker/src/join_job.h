// Joining the job, on the thread that calls bytecomp_init, before the engine's threads exist:
// the configuration file, this process's requested rank and machine slot (environment),
// registration with the scheduler (which answers with the topology and the job's
// configuration), and the machine's local reducers (hierarchical mode).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "bytecomp/common/scheduler_client.h"
#include "bytecomp/common/socket_security.h"
#include "bytecomp/worker/engine.h"
#include "bytecomp/worker/local_reducer.h"
#include "control.pb.h"
#include "zmq.hpp"

namespace bytecomp::worker {

struct JoinedJob {
  proto::ClusterConfig config;  // the job's (the scheduler's), with our scheduler address
  proto::Topology topology;
  EngineInfo info;
  int compress_threads = 2;  // the codec pool (BYTECOMP_COMPRESS_THREADS)
  // Declared before the sockets that use it, so that it is destroyed after them.
  std::unique_ptr<zmq::context_t> context;
  // The cluster key for every socket of the context (or none); after the context, before the
  // sockets: the local root's ZAP handler outlives its listening socket.
  std::unique_ptr<SocketSecurity> security;
  std::unique_ptr<SchedulerClient> client;
  MachineReducers reducers;
};

absl::StatusOr<JoinedJob> JoinJob(const std::string& config_path);

}  // namespace bytecomp::worker
