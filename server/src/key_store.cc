#include "bytecomp/server/key_store.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "bytecomp/common/dtype.h"
#include "bytecomp/common/partition.h"

namespace bytecomp::server {
namespace {

bool FloatAligned(const zmq::message_t& m) {
  return reinterpret_cast<uintptr_t>(m.data()) % alignof(float) == 0;
}

std::string KeyName(uint64_t key) { return absl::StrCat(KeyTensor(key), ":", KeyPartition(key)); }

// Whether pulls get the push codec's own encoding of the sum, which its aggregator builds
// without a dense buffer (CodecProperties::sum_in_push_format, blocksparse): one-way always;
// two-way when the pull codec is the same lossless codec without a memory, whose re-encode of
// the sum would write exactly those bytes.
absl::StatusOr<bool> EncodedSumAnswers(const compress::TensorPlan& plan) {
  absl::StatusOr<std::unique_ptr<compress::Codec>> push =
      compress::CreateCodec(plan.push.name(), compress::ParamsOf(plan.push));
  if (!push.ok()) return push.status();
  const compress::CodecProperties p = (*push)->properties();
  if (!p.sum_in_push_format) return false;
  if (!plan.two_way()) return true;
  return p.lossless && plan.pull.name() == plan.push.name() &&
         compress::ParamsOf(plan.pull) == compress::ParamsOf(plan.push) &&
         compress::IsNoneName(plan.pull.memory());
}

}  // namespace

KeyStore::KeyStore(int my_rank, int num_workers, const Catalog& catalog, std::vector<int> pushers,
                   bool resume_keys)
    : my_rank_(my_rank),
      num_workers_(num_workers),
      pushers_(std::move(pushers)),
      pushes_by_worker_(num_workers, 0),
      catalog_(catalog),
      resume_keys_(resume_keys) {
  if (pushers_.empty()) {
    for (int r = 0; r < num_workers; ++r) pushers_.push_back(r);
  }
  std::sort(pushers_.begin(), pushers_.end());
}

compress::CodecContext KeyStore::ContextOf(const proto::DataHeader& h, uint32_t node) const {
  compress::CodecContext ctx;
  ctx.key = h.key();
  ctx.round = h.iteration();
  ctx.node = node;
  if (const proto::Strategy* s = catalog_.Strategy(h.strategy_version())) ctx.seed = s->seed();
  return ctx;
}

void KeyStore::Handle(zmq::message_t identity, const proto::DataHeader& header,
                      zmq::message_t payload, std::vector<OutgoingReply>* out) {
  auto [it, created] = keys_.try_emplace(header.key());
  KeyState& key = it->second;
  if (created) {
    key.pushed.assign(num_workers_, false);
    if (resume_keys_ || resume_expected_.erase(header.key()) > 0) {
      key.resume = std::make_unique<Resume>();
      key.resume->completed.assign(num_workers_, kUnheard);
      key.resume->held_by_worker.assign(num_workers_, 0);
    }
  }
  if (key.resume != nullptr) return Resuming(key, std::move(identity), header, std::move(payload), out);
  if (header.replay()) {
    Refuse(std::move(identity), header,
           absl::StrCat("replay for key ", KeyName(header.key()),
                        " refused: the key is not resuming (this server did not replace a lost "
                        "one, or every worker was heard already)"), out);
    return;
  }
  if (key.absorbed_round.has_value() && header.op() == proto::OP_PUSH &&
      header.round() == *key.absorbed_round) {
    // Pushed again to a replacement by a worker that never got this round's result, which is
    // known (its pull gets it): nothing to sum.
    out->push_back(Reply(std::move(identity), header, proto::OP_PUSH_ACK));
    return;
  }
  Dispatch(key, std::move(identity), header, std::move(payload), out);
}

void KeyStore::Dispatch(KeyState& key, zmq::message_t identity, const proto::DataHeader& header,
                        zmq::message_t payload, std::vector<OutgoingReply>* out) {
  if (header.op() == proto::OP_PUSH) {
    Push(key, std::move(identity), header, std::move(payload), out);
  } else {
    Pull(key, std::move(identity), header, out);
  }
}

void KeyStore::Resuming(KeyState& key, zmq::message_t identity, const proto::DataHeader& h,
                        zmq::message_t payload, std::vector<OutgoingReply>* out) {
  Resume& r = *key.resume;
  const int sender = h.sender();
  if (r.completed[sender] == kUnheard) {
    if (h.op() != proto::OP_PUSH) {
      Refuse(std::move(identity), h,
             absl::StrCat("pull for round ", h.round(), " of key ", KeyName(h.key()),
                          " refused: worker ", sender, " has not pushed it"), out);
      return;
    }
    r.completed[sender] =
        h.replay() ? static_cast<int64_t>(h.round()) : static_cast<int64_t>(h.round()) - 1;
    ++r.heard;
  } else if (h.replay()) {
    Refuse(std::move(identity), h,
           absl::StrCat("replay for key ", KeyName(h.key()), " refused: worker ", sender,
                        " was heard for it already"), out);
    return;
  }
  if (h.replay()) {  // where the worker stands, and the result it got there
    if (r.completed[sender] > r.result_round) {
      r.result_round = r.completed[sender];
      r.result_header = h;
      r.result = std::move(payload);
    }
    if (r.heard == pushers_.size()) StartResumed(key, out);
    return;
  }
  // A push and its pull: a worker pushes nothing further before it pulled.
  if (r.held_by_worker[sender] >= 2) {
    Refuse(std::move(identity), h,
           absl::StrCat("request for round ", h.round(), " of key ", KeyName(h.key()),
                        " refused: worker ", sender, " sent 2 already while the key resumes"),
           out);
    return;
  }
  ++r.held_by_worker[sender];
  r.held.push_back(Held{std::move(identity), h, std::move(payload)});
  if (r.heard == pushers_.size()) StartResumed(key, out);
}

void KeyStore::StartResumed(KeyState& key, std::vector<OutgoingReply>* out) {
  const std::unique_ptr<Resume> r = std::move(key.resume);
  int64_t highest = -1;
  bool same = true;
  for (int w : pushers_) highest = std::max(highest, r->completed[w]);
  for (int w : pushers_) same = same && r->completed[w] == highest;
  ++keys_resumed_;
  key.accumulating_round = static_cast<uint64_t>(highest + 1);
  if (!same && r->result_round == highest) {
    // Round `highest` completed on the lost server, and some worker did not get its result:
    // it gets what a replay says the others got.
    key.has_ready = true;
    key.ready_round = static_cast<uint64_t>(highest);
    key.ready = std::move(r->result);
    key.ready_codec = r->result_header.codec();
    key.ready_error.clear();
    key.absorbed_round = key.ready_round;
    ++rounds_answered_from_replays_;
  }
  for (Held& held : r->held) {
    Handle(std::move(held.identity), held.header, std::move(held.payload), out);
  }
}

void KeyStore::Push(KeyState& key, zmq::message_t identity, const proto::DataHeader& h,
                    zmq::message_t payload, std::vector<OutgoingReply>* out) {
  if (h.round() != key.accumulating_round) {
    // Which round the key is at is the other workers' business: not said.
    Refuse(std::move(identity), h,
                         absl::StrCat("push for round ", h.round(), " of key ", KeyName(h.key()),
                                      " refused: it is not the round the key accumulates"), out);
    return;
  }
  if (key.pushed[h.sender()]) {
    Refuse(std::move(identity), h,
                         absl::StrCat("worker ", h.sender(), " already pushed round ", h.round(),
                                      " of key ", KeyName(h.key())), out);
    return;
  }
  const int64_t payload_bytes = static_cast<int64_t>(payload.size());
  // The round's codec as keys record it: "" for raw values, however the push named them.
  const absl::string_view push_codec =
      compress::IsNoneName(h.codec()) ? absl::string_view() : absl::string_view(h.codec());
  if (key.pushes == 0) {
    if (timeline_ != nullptr || metrics_ != nullptr) key.first_push_us = telemetry::Timeline::NowUs();
    key.round_version = h.strategy_version();
    key.round_codec = std::string(push_codec);
    key.round_stage = h.stage();
    key.round_iteration = h.iteration();
    key.round_error.clear();
  } else if (h.strategy_version() != key.round_version || key.round_codec != push_codec ||
             h.stage() != key.round_stage || h.iteration() != key.round_iteration) {
    // No round mixes codecs or strategy versions.
    Refuse(std::move(identity), h,
                         absl::StrCat("push for round ", h.round(), " of key ", KeyName(h.key()),
                                      " with strategy version ", h.strategy_version(), " codec '",
                                      h.codec(), "' stage ", h.stage(), " iteration ", h.iteration(),
                                      "; the round has version ", key.round_version, " codec '",
                                      key.round_codec, "' stage ", key.round_stage, " iteration ",
                                      key.round_iteration), out);
    return;
  }
  if (!h.error().empty()) {
    if (key.round_error.empty()) {
      key.round_error = absl::StrCat("worker ", h.sender(), " aborted round ", h.round(),
                                     " of key ", KeyName(h.key()), ": ", h.error());
    }
  } else if (key.round_error.empty()) {
    if (key.round_codec.empty()) {
      AddRaw(key, h, std::move(payload));
    } else {
      if (key.encoded.size() != static_cast<size_t>(num_workers_)) key.encoded.resize(num_workers_);
      key.encoded[h.sender()] = std::move(payload);
    }
  }
  if (metrics_ != nullptr && h.error().empty()) {
    metrics_->CountBytes(telemetry::Direction::kIn, key.round_codec, payload_bytes,
                         h.element_count() * static_cast<int64_t>(DTypeSize(h.dtype())));
  }
  key.pushed[h.sender()] = true;
  ++key.pushes;
  ++pushes_by_worker_[h.sender()];
  out->push_back(Reply(zmq::message_t(identity.data(), identity.size()), h, proto::OP_PUSH_ACK));
  if (key.pushes == static_cast<int>(pushers_.size())) CompleteRound(key, h, out);
}

void KeyStore::AddRaw(KeyState& key, const proto::DataHeader& h, zmq::message_t payload) {
  const size_t n = static_cast<size_t>(h.element_count());
  const bool in_place = h.dtype() == proto::DTYPE_FLOAT32 && FloatAligned(payload);
  const bool first = std::none_of(key.pushed.begin(), key.pushed.end(), [](bool b) { return b; });
  if (first) {
    key.accumulator.rebuild(0);
    if (in_place) {
      key.accumulator = std::move(payload);  // the receive buffer becomes the sum: no copy
    } else {
      key.wide_sum.resize(n);
      ToFloat32(h.dtype(), payload.data(), key.wide_sum.data(), n);
    }
  } else if (key.accumulator.size() > 0) {
    if (in_place) {
      AddFloat32(static_cast<float*>(key.accumulator.data()),
                 static_cast<const float*>(payload.data()), n);
    } else {  // a misaligned later push: widen the sum to the fp32 buffer once, then add
      key.wide_sum.resize(n);
      std::memcpy(key.wide_sum.data(), key.accumulator.data(), n * sizeof(float));
      key.accumulator.rebuild(0);
      AddToFloat32(h.dtype(), payload.data(), key.wide_sum.data(), n);
    }
  } else {
    AddToFloat32(h.dtype(), payload.data(), key.wide_sum.data(), n);
  }
}

absl::Status KeyStore::PrepareCodec(KeyState& key, const proto::DataHeader& h) {
  const size_t n = static_cast<size_t>(h.element_count());
  CodecState* c = key.codec.get();
  if (c != nullptr && c->version == h.strategy_version() && c->stage == h.stage() &&
      c->elements == n) {
    return absl::OkStatus();
  }
  const DeclaredTensor* tensor = catalog_.Tensor(KeyTensor(h.key()));
  if (tensor == nullptr) return absl::InternalError("tensor vanished from the catalog");
  auto state = std::make_unique<CodecState>();
  state->version = h.strategy_version();
  state->stage = h.stage();
  state->elements = n;
  state->plan = catalog_.Plan(*tensor, h.strategy_version());
  absl::StatusOr<std::unique_ptr<compress::Aggregator>> aggregator = compress::CreateAggregator(
      state->plan.push.name(), compress::ParamsOf(state->plan.push));
  if (!aggregator.ok()) return aggregator.status();
  state->aggregator = *std::move(aggregator);
  absl::StatusOr<bool> encoded_sum_answers = EncodedSumAnswers(state->plan);
  if (!encoded_sum_answers.ok()) return encoded_sum_answers.status();
  state->encoded_sum_answers = h.stage() == 0 && *encoded_sum_answers;
  // The two-way codec and the server's error-feedback memory persist over the rounds of one
  // version, as the workers' do.
  if (c != nullptr && c->version == state->version && c->elements == n) {
    state->pull_codec = std::move(c->pull_codec);
    state->pull_memory = std::move(c->pull_memory);
  }
  key.codec = std::move(state);
  return absl::OkStatus();
}

absl::Status KeyStore::FinishEncoded(KeyState& key, const proto::DataHeader& h) {
  if (absl::Status s = PrepareCodec(key, h); !s.ok()) return s;
  CodecState& c = *key.codec;
  c.aggregator->Reset(static_cast<size_t>(h.element_count()));
  for (int r : pushers_) {
    const zmq::message_t& m = key.encoded[r];
    proto::DataHeader from = h;
    from.set_sender(r);
    absl::Status added = c.aggregator->Add(
        absl::MakeConstSpan(static_cast<const uint8_t*>(m.data()), m.size()),
        ContextOf(from, static_cast<uint32_t>(r)));
    if (!added.ok()) return absl::Status(added.code(), absl::StrCat("worker ", r, "'s push: ", added.message()));
  }
  for (zmq::message_t& m : key.encoded) m.rebuild(0);
  key.ready_codec.clear();
  if (c.encoded_sum_answers) {  // block-sparse in, block-sparse out: no dense sum on the way
    absl::StatusOr<absl::Span<const uint8_t>> encoded = c.aggregator->EncodedSum();
    if (!encoded.ok()) return encoded.status();
    key.ready.rebuild(encoded->data(), encoded->size());
    key.ready_codec = c.plan.push.name();
    return absl::OkStatus();
  }
  absl::StatusOr<absl::Span<const float>> sum = c.aggregator->Finish();
  if (!sum.ok()) return sum.status();
  // Two-round stages and one-way compression return the fp32 sum (but see above).
  if (h.stage() != 0 || !c.plan.two_way()) {
    key.ready.rebuild(sum->data(), sum->size() * sizeof(float));
    return absl::OkStatus();
  }
  if (c.pull_codec == nullptr) {
    absl::StatusOr<std::unique_ptr<compress::Codec>> codec =
        compress::CreateCodec(c.plan.pull.name(), compress::ParamsOf(c.plan.pull));
    if (!codec.ok()) return codec.status();
    c.pull_codec = *std::move(codec);
    if (!c.plan.pull.memory().empty()) {
      absl::StatusOr<std::unique_ptr<compress::Memory>> memory =
          compress::CreateMemory(c.plan.pull.memory(), compress::MemoryParamsOf(c.plan.pull));
      if (!memory.ok()) return memory.status();
      c.pull_memory = *std::move(memory);
    }
  }
  std::vector<uint8_t> encoded(c.pull_codec->MaxEncodedBytes(sum->size()));
  absl::StatusOr<size_t> bytes =
      compress::EncodeWithMemory(*c.pull_codec, c.pull_memory.get(), *sum,
                                 ContextOf(h, static_cast<uint32_t>(my_rank_)),
                                 absl::MakeSpan(encoded), c.compensated, c.decoded);
  if (!bytes.ok()) return bytes.status();
  key.ready.rebuild(encoded.data(), *bytes);
  key.ready_codec = c.plan.pull.name();
  return absl::OkStatus();
}

void KeyStore::CompleteRound(KeyState& key, const proto::DataHeader& h,
                             std::vector<OutgoingReply>* out) {
  const size_t n = static_cast<size_t>(h.element_count());
  key.ready_error = key.round_error;
  key.ready_codec.clear();
  if (key.ready_error.empty() && !key.round_codec.empty()) {
    if (absl::Status s = FinishEncoded(key, h); !s.ok()) {
      key.ready_error = absl::StrCat("round ", h.round(), " of key ", KeyName(h.key()),
                                     " could not be aggregated: ", s.message());
    }
  } else if (key.ready_error.empty()) {
    if (key.accumulator.size() > 0) {
      key.ready = std::move(key.accumulator);
      key.accumulator.rebuild(0);
    } else {
      key.ready.rebuild(n * DTypeSize(h.dtype()));
      FromFloat32(h.dtype(), key.wide_sum.data(), key.ready.data(), n);
    }
  }
  if (!key.ready_error.empty()) key.ready.rebuild(0);
  for (zmq::message_t& m : key.encoded) m.rebuild(0);
  key.has_ready = true;
  key.ready_round = key.accumulating_round;
  ++key.accumulating_round;
  key.pushes = 0;
  std::fill(key.pushed.begin(), key.pushed.end(), false);
  ++rounds_completed_;
  if (timeline_ != nullptr || metrics_ != nullptr) {
    const int64_t now = telemetry::Timeline::NowUs();
    if (metrics_ != nullptr) metrics_->CountRound((now - key.first_push_us) / 1e6);
    if (timeline_ != nullptr) {
      telemetry::TimelineEvent e;
      e.start_us = key.first_push_us;
      e.duration_us = now - key.first_push_us;
      e.round = h.iteration();
      e.bytes = static_cast<int64_t>(key.ready.size());
      e.tensor_id = static_cast<uint32_t>(h.key() >> 32);
      e.partition = static_cast<uint32_t>(h.key() & 0xffffffffu);
      e.codec = timeline_->CodecId(key.round_codec);
      e.stage = telemetry::Stage::kSummed;
      timeline_->Record(e);
    }
  }
  for (HeldPull& pull : key.held) {
    out->push_back(PullReply(key, std::move(pull.identity), pull.header));
  }
  key.held.clear();
  key.absorbed_round.reset();  // every push of it came before this round's
}

void KeyStore::Pull(KeyState& key, zmq::message_t identity, const proto::DataHeader& h,
                    std::vector<OutgoingReply>* out) {
  if (key.has_ready && h.round() == key.ready_round) {
    out->push_back(PullReply(key, std::move(identity), h));
  } else if (h.round() == key.accumulating_round) {
    // At most one held pull per worker and key: a worker pulls each round once, and a peer
    // must not pile up pulls that each will hold a reply.
    for (const HeldPull& held : key.held) {
      if (held.header.sender() == h.sender()) {
        Refuse(std::move(identity), h,
                             absl::StrCat("pull for round ", h.round(), " of key ", KeyName(h.key()),
                                          " refused: worker ", h.sender(),
                                          " already has a pull of it waiting"), out);
        return;
      }
    }
    key.held.push_back(HeldPull{std::move(identity), h});
  } else {
    Refuse(std::move(identity), h,
                         absl::StrCat("pull for round ", h.round(), " of key ", KeyName(h.key()),
                                      " refused: the key has no such round ready or under way"), out);
  }
}

OutgoingReply KeyStore::PullReply(const KeyState& key, zmq::message_t identity,
                                  const proto::DataHeader& request) {
  if (!key.ready_error.empty()) return Error(std::move(identity), request, key.ready_error);
  OutgoingReply reply = Reply(std::move(identity), request, proto::OP_PULL_REPLY);
  reply.payload.copy(const_cast<zmq::message_t&>(key.ready));  // shares the buffer, no copy
  reply.header.set_payload_bytes(static_cast<int64_t>(reply.payload.size()));
  reply.header.set_codec(key.ready_codec);
  reply.has_payload = true;
  if (metrics_ != nullptr) {
    metrics_->CountBytes(telemetry::Direction::kOut, key.ready_codec,
                         static_cast<int64_t>(reply.payload.size()),
                         request.element_count() * static_cast<int64_t>(DTypeSize(request.dtype())));
  }
  return reply;
}

OutgoingReply KeyStore::Reply(zmq::message_t identity, const proto::DataHeader& request,
                              proto::DataOp op) {
  OutgoingReply reply;
  reply.identity = std::move(identity);
  reply.header.set_op(op);
  reply.header.set_key(request.key());
  reply.header.set_round(request.round());
  reply.header.set_dtype(request.dtype());
  reply.header.set_element_count(request.element_count());
  reply.header.set_sender(my_rank_);
  reply.header.set_request_id(request.request_id());
  reply.header.set_strategy_version(request.strategy_version());
  reply.header.set_stage(request.stage());
  reply.header.set_iteration(request.iteration());
  return reply;
}

void KeyStore::Refuse(zmq::message_t identity, const proto::DataHeader& request,
                      std::string message, std::vector<OutgoingReply>* out) {
  ++refused_;
  out->push_back(Error(std::move(identity), request, std::move(message)));
}

OutgoingReply KeyStore::Error(zmq::message_t identity, const proto::DataHeader& request,
                              std::string message) {
  OutgoingReply reply = Reply(std::move(identity), request, proto::OP_ERROR);
  reply.header.set_error(absl::StrCat("server ", my_rank_, ": ", message));
  return reply;
}

void KeyStore::FailHeldPulls(const std::string& reason, std::vector<OutgoingReply>* out) {
  for (auto& [k, key] : keys_) {
    for (HeldPull& pull : key.held) out->push_back(Error(std::move(pull.identity), pull.header, reason));
    key.held.clear();
    auto fail = [&](std::vector<Held>& held) {
      for (Held& h : held) {
        if (h.header.op() == proto::OP_PULL) {
          out->push_back(Error(std::move(h.identity), h.header, reason));
        }
      }
      held.clear();
    };
    if (key.resume != nullptr) fail(key.resume->held);
  }
}

}  // namespace bytecomp::server
