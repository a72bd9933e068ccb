#include "bytecomp/server/request_validator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bytecomp/common/dtype.h"
#include "bytecomp/common/link_probe.h"
#include "bytecomp/compress.h"
#include "bytecomp/compress/two_round.h"

namespace bytecomp::server {

bool RequestValidator::AwaitsDeclaration(const proto::DataHeader& h) const {
  if (h.op() != proto::OP_PUSH && h.op() != proto::OP_PULL) return false;
  return catalog_.Tensor(KeyTensor(h.key())) == nullptr ||
         (h.strategy_version() != 0 && !catalog_.HasVersion(h.strategy_version())) ||
         catalog_.OnLostServer(h.key());
}

size_t RequestValidator::MaxPayloadBytes(uint32_t tensor_id, uint64_t version,
                                         const compress::TensorPlan& plan, int64_t elements) {
  const auto key = std::make_pair(version ^ (static_cast<uint64_t>(tensor_id) << 40), elements);
  auto it = max_bytes_.find(key);
  if (it != max_bytes_.end()) return it->second;
  size_t bound = 0;
  absl::StatusOr<std::unique_ptr<compress::Codec>> codec =
      compress::CreateCodec(plan.push.name(), compress::ParamsOf(plan.push));
  if (codec.ok()) {
    const size_t n = static_cast<size_t>(elements);
    bound = (*codec)->MaxEncodedBytes(n);
    if (compress::TwoRoundCodec* two = compress::AsTwoRound(**codec)) {
      bound =
          std::max({bound, 4 + 4 * two->FirstRoundFloats(n), 4 + 4 * two->SecondRoundFloats(n)});
    }
  }
  max_bytes_[key] = bound;
  return bound;
}

absl::Status RequestValidator::CheckSender(const proto::DataHeader& h) const {
  if (h.op() != proto::OP_PUSH && h.op() != proto::OP_PULL) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported op ", proto::DataOp_Name(h.op()),
                                                   " (expected OP_PUSH or OP_PULL)"));
  }
  if (h.sender() < 0 || h.sender() >= num_workers_) {
    return absl::InvalidArgumentError(
        absl::StrCat("sender ", h.sender(), " is not a worker rank (0..", num_workers_ - 1, ")"));
  }
  const size_t rank = static_cast<size_t>(h.sender());
  if (rank >= worker_tokens_.size() || !SameToken(HeaderToken(h), worker_tokens_[rank])) {
    return absl::PermissionDeniedError(
        absl::StrCat("the request names worker ", h.sender(),
                     " but does not carry its token: a connection "
                     "pushes and pulls only as the rank the scheduler gave its node"));
  }
  if (h.server_epoch() != epoch_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the request is for server ", my_rank_, " epoch ", h.server_epoch(), ", this is epoch ",
        epoch_, ": it was sent to a server that this one replaced"));
  }
  return absl::OkStatus();
}

absl::Status RequestValidator::ValidateReplay(const proto::DataHeader& h,
                                              const compress::TensorPlan& plan, int64_t elements,
                                              bool has_payload, size_t payload_size,
                                              const std::string& where) const {
  // The result of a round: raw in the tensor's dtype, the fp32 sum, or what the server sends
  // for the plan (the push codec's own sum, the pull codec's encoding).
  const size_t n = static_cast<size_t>(elements);
  size_t bound = n * std::max<size_t>(sizeof(float), DTypeSize(static_cast<DType>(h.dtype())));
  std::vector<std::string> codecs = {"", "none"};
  if (plan.compressed()) {
    for (const proto::CodecConfig* spec : {&plan.push, &plan.pull}) {
      if (spec->name().empty()) continue;
      codecs.push_back(spec->name());
      absl::StatusOr<std::unique_ptr<compress::Codec>> codec =
          compress::CreateCodec(spec->name(), compress::ParamsOf(*spec));
      if (codec.ok()) bound = std::max(bound, (*codec)->MaxEncodedBytes(n));
    }
  }
  if (std::find(codecs.begin(), codecs.end(), h.codec()) == codecs.end()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": a replay's codec '", h.codec(),
                                                   "' is none the round's result can have"));
  }
  if (!h.error().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": a replay carries no error"));
  }
  if (!has_payload || static_cast<size_t>(h.payload_bytes()) != payload_size ||
      payload_size > bound) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": a replay's payload is ", payload_size,
                                                   " bytes (header ", h.payload_bytes(),
                                                   "), at most ", bound));
  }
  return absl::OkStatus();
}

absl::Status RequestValidator::Validate(const proto::DataHeader& h, bool has_payload,
                                        size_t payload_size) {
  const std::string where =
      absl::StrCat("key ", KeyTensor(h.key()), ":", KeyPartition(h.key()), " round ", h.round());
  if (absl::Status s = CheckSender(h); !s.ok()) return s;
  if (h.op() == proto::OP_PUSH && !pushers_.empty() &&
      std::find(pushers_.begin(), pushers_.end(), h.sender()) == pushers_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker ", h.sender(), " pushed, but the job is hierarchical and only the local roots ",
        absl::StrJoin(pushers_, ", "), " push"));
  }
  if (h.replay() && h.op() != proto::OP_PUSH) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": only a push can be a replay"));
  }
  const DeclaredTensor* tensor = catalog_.Tensor(KeyTensor(h.key()));
  const int64_t partition = KeyPartition(h.key());
  if (tensor == nullptr || partition >= tensor->layout.num_partitions() ||
      tensor->layout.partition_server[partition] != my_rank_) {
    return absl::NotFoundError(
        absl::StrCat("unknown key ", KeyTensor(h.key()), ":", partition,
                     " (not declared, or owned by another server than server ", my_rank_, ")"));
  }
  const int64_t elements = tensor->layout.range(partition).count;
  if (h.element_count() != elements) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": element_count ", h.element_count(), ", declared ", elements));
  }
  if (!IsValidDType(h.dtype()) || h.dtype() != tensor->layout.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": dtype ", static_cast<int>(h.dtype()),
                                                   ", declared ", DTypeName(tensor->layout.dtype)));
  }
  if (h.strategy_version() != 0 && !catalog_.HasVersion(h.strategy_version())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": unknown strategy version ", h.strategy_version()));
  }
  const compress::TensorPlan plan = catalog_.Plan(*tensor, h.strategy_version());
  if (h.replay()) return ValidateReplay(h, plan, elements, has_payload, payload_size, where);
  const absl::string_view expected_codec =
      plan.compressed() ? absl::string_view(plan.push.name()) : "none";
  if ((compress::IsNoneName(h.codec()) ? "none" : absl::string_view(h.codec())) != expected_codec) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": codec '", h.codec(), "' is not the codec of '", tensor->name,
        "' under strategy version ", h.strategy_version(), " ('", expected_codec, "')"));
  }
  const bool abort = h.op() == proto::OP_PUSH && !h.error().empty();
  if (h.op() == proto::OP_PULL || abort) {
    if (has_payload) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, abort ? ": an abort" : ": a pull", " must not carry a payload"));
    }
    return absl::OkStatus();
  }
  if (!has_payload) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": push without a payload frame"));
  }
  if (static_cast<size_t>(h.payload_bytes()) != payload_size) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": payload is ", payload_size,
                                                   " bytes, header says ", h.payload_bytes()));
  }
  if (!plan.compressed()) {
    const size_t expected = static_cast<size_t>(elements) * DTypeSize(tensor->layout.dtype);
    if (payload_size != expected) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": payload is ", payload_size, " bytes, expected ", expected));
    }
    return absl::OkStatus();
  }
  const size_t bound =
      MaxPayloadBytes(tensor->layout.tensor_id, h.strategy_version(), plan, elements);
  if (payload_size == 0 || payload_size > bound) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", h.codec(), " payload of ",
                                                   payload_size, " bytes, expected 1 to ", bound));
  }
  return absl::OkStatus();
}

absl::Status RequestValidator::ValidateProbe(const proto::DataHeader& h, bool has_payload,
                                             size_t payload_size) const {
  auto bad = [](auto... why) {
    return absl::InvalidArgumentError(absl::StrCat("link probe: ", why...));
  };
  if (h.op() != proto::OP_PROBE) return bad("op ", proto::DataOp_Name(h.op()), " is not OP_PROBE");
  if (h.sender() < -1 || h.sender() >= num_workers_) {
    return bad("sender ", h.sender(), " is not a worker rank (0..", num_workers_ - 1,
               ") nor -1 (a tool outside the job)");
  }
  if (h.key() != 0 || h.round() != 0 || h.iteration() != 0 || h.stage() != 0 ||
      h.strategy_version() != 0) {
    return bad("key, round, iteration, stage and strategy_version must be 0, got key ", h.key(),
               " round ", h.round(), " iteration ", h.iteration(), " stage ", h.stage(),
               " strategy_version ", h.strategy_version());
  }
  if (!h.codec().empty() || h.dtype() != 0 || h.element_count() != 0 || !h.error().empty()) {
    return bad("codec, dtype, element_count and error must be unset");
  }
  if (h.payload_bytes() < 0 || h.payload_bytes() > kMaxProbeBytes) {
    return bad("payload_bytes ", h.payload_bytes(), " is outside [0, ", kMaxProbeBytes, "]");
  }
  const size_t got = has_payload ? payload_size : 0;
  if (static_cast<size_t>(h.payload_bytes()) != got || (has_payload && payload_size == 0)) {
    return bad("payload is ", has_payload ? absl::StrCat(payload_size, " bytes") : "absent",
               ", header says ", h.payload_bytes(), " bytes (0: no payload frame)");
  }
  if (h.probe_reply_bytes() < 0 || h.probe_reply_bytes() > kMaxProbeBytes) {
    return bad("probe_reply_bytes ", h.probe_reply_bytes(), " is outside [0, ", kMaxProbeBytes,
               "]");
  }
  const int turn = static_cast<int>(h.probe_turn());
  if (turn != proto::PROBE_TURN_NONE && turn != proto::PROBE_TURN_BEGIN &&
      turn != proto::PROBE_TURN_END && turn != proto::PROBE_TURN_QUERY) {
    const std::string name = proto::ProbeTurn_IsValid(turn)
                                 ? absl::StrCat(" (", proto::ProbeTurn_Name(h.probe_turn()), ")")
                                 : "";
    return bad("probe_turn ", turn, name,
               " is not one a probe asks with (PROBE_TURN_NONE, PROBE_TURN_BEGIN, "
               "PROBE_TURN_END or PROBE_TURN_QUERY)");
  }
  if ((turn == proto::PROBE_TURN_BEGIN || turn == proto::PROBE_TURN_QUERY) &&
      (h.payload_bytes() != 0 || h.probe_reply_bytes() != 0)) {
    return bad("a ", proto::ProbeTurn_Name(h.probe_turn()),
               " probe carries no payload either way, got payload_bytes ", h.payload_bytes(),
               " and probe_reply_bytes ", h.probe_reply_bytes());
  }
  if (turn == proto::PROBE_TURN_BEGIN) {
    if (h.probe_turn_ms() < 1 || h.probe_turn_ms() > kMaxProbeTurnMs) {
      return bad("probe_turn_ms ", h.probe_turn_ms(), " is outside [1, ", kMaxProbeTurnMs,
                 "] (the longest the sender holds the bandwidth turn)");
    }
  } else if (h.probe_turn_ms() != 0) {
    return bad("probe_turn_ms must be 0 without PROBE_TURN_BEGIN, got ", h.probe_turn_ms());
  }
  return absl::OkStatus();
}

}  // namespace bytecomp::server
