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
      return absl::InvalidArgumentError(absl::StrCat("BYTECOMP_RANK='", r, "' is not an integer"));
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

}  // namespace

absl::StatusOr<JoinedJob> JoinJob(const std::string& config_path) {
  absl::StatusOr<proto::ClusterConfig> config = LoadClusterConfig(config_path);
  if (!config.ok()) return config.status();
  if (absl::Status s = ValidateClusterConfig(*config); !s.ok()) return s;
  absl::StatusOr<int> requested_rank = RequestedRank();
  if (!requested_rank.ok()) return requested_rank.status();
  absl::StatusOr<MachineSlot> slot = MachineSlotFromEnv();
  if (!slot.ok()) return slot.status();

  JoinedJob job;
  job.context = std::make_unique<zmq::context_t>(2);
  job.client = std::make_unique<SchedulerClient>(*job.context, *config);
  job.client->SetPlacement(slot->machine, slot->local_rank, slot->local_size);
  absl::StatusOr<proto::Topology> topology =
      job.client->Register(proto::ROLE_WORKER, *requested_rank, "");
  if (!topology.ok()) return topology.status();
  job.topology = *std::move(topology);
  // The scheduler's configuration is the job's; only the scheduler address stays ours.
  job.config = WithClusterDefaults(job.topology.config());
  job.config.set_scheduler_address(config->scheduler_address());
  EngineInfo& info = job.info;
  info.rank = job.topology.your_rank();
  info.size = job.topology.num_workers();
  info.local_rank = job.topology.local_rank();
  info.local_size = std::max(1, job.topology.local_size());
  info.num_servers = job.topology.num_servers();
  info.partition_bytes = job.config.partition_bytes();
  if (job.topology.servers_size() != info.num_servers) {
    return absl::InternalError(absl::StrCat("topology lists ", job.topology.servers_size(),
                                            " servers, expected ", info.num_servers));
  }
  SetLogIdentity(absl::StrCat("worker ", info.rank));

  absl::StatusOr<MachineReducers> reducers =
      ConnectMachineReducers(*job.context, *job.client, job.topology);
  if (!reducers.ok()) {
    // Tell the others at once rather than let them wait for this worker's heartbeats to stop.
    const std::string reason =
        absl::StrCat("worker ", info.rank, " (local rank ", info.local_rank, " of ",
                     info.local_size, "): hierarchical set-up failed: ", reducers.status().message());
    proto::ControlMessage bye;
    bye.mutable_shutdown()->set_reason(reason);
    (void)job.client->Send(bye);
    job.client->socket().set(zmq::sockopt::linger, 1000);  // let the Shutdown leave
    return absl::Status(reducers.status().code(), reason);
  }
  job.reducers = *std::move(reducers);

  absl::StatusOr<int> threads = CompressThreads();
  if (!threads.ok()) return threads.status();
  job.compress_threads = *threads;
  return job;
}

}  // namespace bytecomp::worker
