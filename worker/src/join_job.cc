#include "join_job.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bytecomp/common.h"
#include "machine_slot.h"

namespace bytecomp::worker {
namespace {

absl::StatusOr<int> RequestedRank() {
  int rank = -1;
  if (const char* r = std::getenv("BYTECOMP_RANK"); r != nullptr && *r != '\0') {
    if (!absl::SimpleAtoi(r, &rank)) {
      return absl::InvalidArgumentError(
          absl::StrCat("BYTECOMP_RANK='", r, "' is not a rank (an integer in [-1, 2147483647])"));
    }
  }
  return rank;
}

absl::StatusOr<int> CompressThreads() {
  int threads = 2;
  if (const char* t = std::getenv("BYTECOMP_COMPRESS_THREADS"); t != nullptr && *t != '\0') {
    if (!absl::SimpleAtoi(t, &threads) || threads < 1 || threads > 256) {
      return absl::InvalidArgumentError(
          absl::StrCat("BYTECOMP_COMPRESS_THREADS='", t, "' is not a thread count in [1, 256]"));
    }
  }
  return threads;
}

// After registration: tells the others at once (a Shutdown naming `reason`) rather than let
// them wait for this worker's heartbeats to stop, and returns `reason`.
absl::Status LeaveJob(JoinedJob& job, absl::Status reason) {
  proto::ControlMessage bye;
  bye.mutable_shutdown()->set_reason(std::string(reason.message()));
  (void)job.client->Send(bye);
  job.client->socket().set(zmq::sockopt::linger, 1000);  // let the Shutdown leave
  return reason;
}

}  // namespace

absl::StatusOr<JoinedJob> JoinJob(const std::string& config_path) {
  ConfigOrigins origins;
  absl::StatusOr<proto::ClusterConfig> config = LoadClusterConfig(config_path, &origins);
  if (!config.ok()) return config.status();
  if (absl::Status s = ValidateClusterConfig(*config, &origins); !s.ok()) return s;
  absl::StatusOr<int> requested_rank = RequestedRank();
  if (!requested_rank.ok()) return requested_rank.status();
  absl::StatusOr<MachineSlot> slot = MachineSlotFromEnv();
  if (!slot.ok()) return slot.status();
  // Every variable is checked before the first connection, so that its error is not taken for
  // a scheduler that cannot be reached.
  absl::StatusOr<int> threads = CompressThreads();
  if (!threads.ok()) return threads.status();

  absl::StatusOr<int> io_threads = ZmqIoThreads(2);
  if (!io_threads.ok()) return io_threads.status();

  JoinedJob job;
  job.context = std::make_unique<zmq::context_t>(*io_threads);
  absl::StatusOr<std::unique_ptr<SocketSecurity>> security =
      SocketSecurity::FromConfig(*job.context, *config);
  if (!security.ok()) return security.status();
  job.security = *std::move(security);
  job.client = std::make_unique<SchedulerClient>(*job.context, *config, *job.security);
  job.client->SetMachineSlot(slot->machine, slot->local_rank, slot->local_size);
  absl::StatusOr<proto::Topology> topology =
      job.client->Register(proto::ROLE_WORKER, *requested_rank, "");
  if (!topology.ok()) return topology.status();
  job.topology = *std::move(topology);
  // The scheduler's configuration is the job's; only the scheduler address stays ours.
  job.config = WithClusterDefaults(job.topology.config());
  job.config.set_scheduler_address(config->scheduler_address());
  // The key file is this process's own (the scheduler's path means nothing here).
  job.config.set_key_file(config->key_file());
  job.config.set_allow_insecure(config->allow_insecure());
  // A worker may bound its waits its own way (its config file or BYTECOMP_PUSH_PULL_TIMEOUT_MS).
  if (origins.Has("push_pull_timeout_ms")) {
    job.config.set_push_pull_timeout_ms(config->push_pull_timeout_ms());
  }
  EngineInfo& info = job.info;
  info.rank = job.topology.your_rank();
  info.size = job.topology.num_workers();
  info.local_rank = job.topology.local_rank();
  info.local_size = std::max(1, job.topology.local_size());
  info.num_servers = job.topology.num_servers();
  info.partition_bytes = job.config.partition_bytes();
  info.wait_timeout_ms = job.config.push_pull_timeout_ms();
  if (job.topology.servers_size() != info.num_servers) {
    return absl::InternalError(absl::StrCat("topology lists ", job.topology.servers_size(),
                                            " servers, expected ", info.num_servers));
  }
  SetLogIdentity(absl::StrCat("worker ", info.rank));
  for (const proto::ServerInfo& server : job.topology.servers()) {
    absl::StatusOr<HostPort> hp = ParseHostPort(server.data_address());
    if (!hp.ok()) continue;  // the data loop reports it
    if (absl::Status s = job.security->CheckPlainHost(
            hp->host, absl::StrCat("server ", server.rank(), "'s data address"));
        !s.ok()) {
      return LeaveJob(
          job, absl::Status(s.code(), absl::StrCat("worker ", info.rank, ": ", s.message())));
    }
  }

  absl::StatusOr<MachineReducers> reducers =
      ConnectMachineReducers(*job.context, *job.security, *job.client, job.topology);
  if (!reducers.ok()) {
    return LeaveJob(
        job, absl::Status(reducers.status().code(),
                          absl::StrCat("worker ", info.rank, " (local rank ", info.local_rank,
                                       " of ", info.local_size, "): hierarchical set-up failed: ",
                                       reducers.status().message())));
  }
  job.reducers = *std::move(reducers);
  job.compress_threads = *threads;
  return job;
}

}  // namespace bytecomp::worker
