#include "bytecomp/server/server_job.h"

#include "absl/strings/str_cat.h"
#include "bytecomp/common/config.h"
#include "bytecomp/common/sealed_messages.h"

namespace bytecomp::server {

absl::StatusOr<ServerJob> ServerJob::FromTopology(const proto::Topology& topology) {
  ServerJob job;
  job.my_rank = topology.your_rank();
  job.num_workers = topology.num_workers();
  job.num_servers = topology.num_servers();
  job.pushers.assign(topology.pushers().begin(), topology.pushers().end());
  job.config = WithClusterDefaults(topology.config());
  job.replaces_lost_server = topology.replaces_lost_server();
  job.epoch = topology.server_epoch();
  if (topology.worker_tokens_size() != job.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("the topology lists ", topology.worker_tokens_size(), " worker tokens for ",
                     job.num_workers, " workers"));
  }
  for (int r = 0; r < job.num_workers; ++r) {
    std::optional<NodeToken> token = TokenFromBytes(topology.worker_tokens(r));
    if (!token.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the topology's token of worker ", r, " is not 16 bytes"));
    }
    job.worker_tokens.push_back(*token);
  }
  if (topology.worker_data_keys_size() != 0 &&
      topology.worker_data_keys_size() != job.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("the topology lists ", topology.worker_data_keys_size(),
                     " worker data keys for ", job.num_workers, " workers"));
  }
  for (int r = 0; r < topology.worker_data_keys_size(); ++r) {
    absl::StatusOr<DataKey> key =
        DataKeyFromBytes(topology.worker_data_keys(r), static_cast<uint32_t>(r),
                         absl::StrCat("the topology's worker ", r));
    if (!key.ok()) return key.status();
    job.worker_data_keys.push_back(*key);
  }
  return job;
}

}  // namespace bytecomp::server
