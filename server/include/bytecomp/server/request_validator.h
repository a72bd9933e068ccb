// Checks every field of a data request against what the scheduler declared (tensors and
// strategy versions), before the request reaches a key's state. Owned by the I/O thread.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "bytecomp/common/node_token.h"
#include "bytecomp/server/catalog.h"
#include "bytecomp/server/server_job.h"
#include "data.pb.h"

namespace bytecomp::server {

class RequestValidator {
 public:
  explicit RequestValidator(const ServerJob& job)
      : my_rank_(job.my_rank),
        num_workers_(job.num_workers),
        pushers_(job.pushers),
        worker_tokens_(job.worker_tokens),
        epoch_(job.epoch),
        catalog_(job.num_servers, job.config) {}

  Catalog& catalog() { return catalog_; }
  uint64_t epoch() const { return epoch_; }

  // Who sent a PUSH or PULL, checked before anything else about it (before it may wait for a
  // declaration): the op, a worker rank in `sender`, and that worker's token (compared in
  // constant time). PermissionDenied for a missing or wrong token: a connection pushes and
  // pulls only as the rank the scheduler gave its node. FailedPrecondition for a request to
  // another server epoch (one this server replaced).
  absl::Status CheckSender(const proto::DataHeader& header) const;

  // The request names a tensor or strategy version this server has not heard of yet (the
  // worker may learn of it a moment earlier), or a key of a lost server (its KeysMoved may
  // reach the worker first): the caller parks it for a while.
  bool AwaitsDeclaration(const proto::DataHeader& header) const;

  // OK if the request may be handed to the key's shard: CheckSender, the key is declared and owned
  // by this server, element count and dtype match the declaration, the codec is the one the
  // tensor's strategy version names, and the payload has exactly the raw size (uncompressed) or at
  // most the codec's bound (compressed); a PULL or an abort (a PUSH carrying an error) has no
  // payload; a replay as ValidateReplay says. The error says which field is wrong.
  absl::Status Validate(const proto::DataHeader& header, bool has_payload, size_t payload_size);

  // OK if an OP_PROBE may be answered: the sender is a worker rank or -1 (a tool outside the
  // job), key, round, iteration, stage, strategy version, codec, dtype, element count and error
  // are unset, payload_bytes matches the payload (none for 0), and it and probe_reply_bytes
  // are at most kMaxProbeBytes.
  absl::Status ValidateProbe(const proto::DataHeader& header, bool has_payload,
                             size_t payload_size) const;

 private:
  // A replay (DataHeader.replay): the result of a round, in a codec the round's result can
  // have (raw, the fp32 sum, the push or pull codec), within that codec's bound; no error.
  absl::Status ValidateReplay(const proto::DataHeader& header, const compress::TensorPlan& plan,
                              int64_t elements, bool has_payload, size_t payload_size,
                              const std::string& where) const;
  // Upper bound of a push payload for (tensor, version, partition size).
  size_t MaxPayloadBytes(uint32_t tensor_id, uint64_t version, const compress::TensorPlan& plan,
                         int64_t elements);

  int my_rank_;
  int num_workers_;
  std::vector<int> pushers_;
  std::vector<NodeToken> worker_tokens_;  // by worker rank
  uint64_t epoch_;
  Catalog catalog_;
  absl::flat_hash_map<std::pair<uint64_t, int64_t>, size_t> max_bytes_;  // (version, n)
};

}  // namespace bytecomp::server
