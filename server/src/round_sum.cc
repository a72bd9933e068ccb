#include "bytecomp/server/round_sum.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/dtype.h"
#include "bytecomp/common/partition.h"

namespace bytecomp::server {
namespace {

bool FloatAligned(const zmq::message_t& m) {
  return reinterpret_cast<uintptr_t>(m.data()) % alignof(float) == 0;
}

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

// The context a node encodes the round's payloads in: the key, round = iteration, the node,
// the strategy's seed.
compress::CodecContext RoundCodecContext(const proto::DataHeader& h, const Catalog& catalog,
                                         uint32_t node) {
  compress::CodecContext ctx;
  ctx.key = h.key();
  ctx.round = h.iteration();
  ctx.node = node;
  if (const proto::Strategy* s = catalog.Strategy(h.strategy_version())) ctx.seed = s->seed();
  return ctx;
}

}  // namespace

void RoundSum::AddRaw(const proto::DataHeader& h, zmq::message_t payload, bool first) {
  const size_t n = static_cast<size_t>(h.element_count());
  const bool in_place = h.dtype() == proto::DTYPE_FLOAT32 && FloatAligned(payload);
  if (first) {
    accumulator_.rebuild(0);
    if (in_place) {
      accumulator_ = std::move(payload);  // the receive buffer becomes the sum: no copy
    } else {
      wide_sum_.resize(n);
      ToFloat32(h.dtype(), payload.data(), wide_sum_.data(), n);
    }
  } else if (accumulator_.size() > 0) {
    if (in_place) {
      AddFloat32(static_cast<float*>(accumulator_.data()),
                 static_cast<const float*>(payload.data()), n);
    } else {  // a misaligned later push: widen the sum to the fp32 buffer once, then add
      wide_sum_.resize(n);
      std::memcpy(wide_sum_.data(), accumulator_.data(), n * sizeof(float));
      accumulator_.rebuild(0);
      AddToFloat32(h.dtype(), payload.data(), wide_sum_.data(), n);
    }
  } else {
    AddToFloat32(h.dtype(), payload.data(), wide_sum_.data(), n);
  }
}

void RoundSum::AddEncoded(int sender, int num_workers, zmq::message_t payload) {
  if (encoded_.size() != static_cast<size_t>(num_workers)) encoded_.resize(num_workers);
  encoded_[sender] = std::move(payload);
}

RoundResult RoundSum::FinishRaw(const proto::DataHeader& h) {
  const size_t n = static_cast<size_t>(h.element_count());
  RoundResult result;
  if (accumulator_.size() > 0) {
    result.payload = std::move(accumulator_);
    accumulator_.rebuild(0);
  } else {
    result.payload.rebuild(n * DTypeSize(h.dtype()));
    FromFloat32(h.dtype(), wide_sum_.data(), result.payload.data(), n);
  }
  return result;
}

void RoundSum::Drop() {
  accumulator_.rebuild(0);
  for (zmq::message_t& m : encoded_) m.rebuild(0);
}

absl::Status RoundSum::PrepareCodec(const proto::DataHeader& h, const Catalog& catalog) {
  const size_t n = static_cast<size_t>(h.element_count());
  CodecState* c = codec_.get();
  if (c != nullptr && c->version == h.strategy_version() && c->stage == h.stage() &&
      c->elements == n) {
    return absl::OkStatus();
  }
  const DeclaredTensor* tensor = catalog.Tensor(KeyTensor(h.key()));
  if (tensor == nullptr) return absl::InternalError("tensor vanished from the catalog");
  auto state = std::make_unique<CodecState>();
  state->version = h.strategy_version();
  state->stage = h.stage();
  state->elements = n;
  state->plan = catalog.Plan(*tensor, h.strategy_version());
  absl::StatusOr<std::unique_ptr<compress::Aggregator>> aggregator =
      compress::CreateAggregator(state->plan.push.name(), compress::ParamsOf(state->plan.push));
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
  codec_ = std::move(state);
  return absl::OkStatus();
}

absl::StatusOr<RoundResult> RoundSum::FinishEncoded(const proto::DataHeader& h,
                                                    const Catalog& catalog,
                                                    const std::vector<int>& pushers, int my_rank) {
  absl::StatusOr<RoundResult> result = Aggregate(h, catalog, pushers, my_rank);
  for (zmq::message_t& m : encoded_) m.rebuild(0);
  return result;
}

absl::StatusOr<RoundResult> RoundSum::Aggregate(const proto::DataHeader& h, const Catalog& catalog,
                                                const std::vector<int>& pushers, int my_rank) {
  if (absl::Status s = PrepareCodec(h, catalog); !s.ok()) return s;
  CodecState& c = *codec_;
  c.aggregator->Reset(static_cast<size_t>(h.element_count()));
  for (int r : pushers) {
    const zmq::message_t& m = encoded_[r];
    proto::DataHeader from = h;
    from.set_sender(r);
    absl::Status added =
        c.aggregator->Add(absl::MakeConstSpan(static_cast<const uint8_t*>(m.data()), m.size()),
                          RoundCodecContext(from, catalog, static_cast<uint32_t>(r)));
    if (!added.ok()) {
      return absl::Status(added.code(), absl::StrCat("worker ", r, "'s push: ", added.message()));
    }
  }
  for (zmq::message_t& m : encoded_) m.rebuild(0);
  RoundResult result;
  if (c.encoded_sum_answers) {  // block-sparse in, block-sparse out: no dense sum on the way
    absl::StatusOr<absl::Span<const uint8_t>> encoded = c.aggregator->EncodedSum();
    if (!encoded.ok()) return encoded.status();
    result.payload.rebuild(encoded->data(), encoded->size());
    result.codec = c.plan.push.name();
    return result;
  }
  absl::StatusOr<absl::Span<const float>> sum = c.aggregator->Finish();
  if (!sum.ok()) return sum.status();
  // Two-round stages and one-way compression return the fp32 sum (but see above).
  if (h.stage() != 0 || !c.plan.two_way()) {
    result.payload.rebuild(sum->data(), sum->size() * sizeof(float));
    return result;
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
                                 RoundCodecContext(h, catalog, static_cast<uint32_t>(my_rank)),
                                 absl::MakeSpan(encoded), c.compensated, c.decoded);
  if (!bytes.ok()) return bytes.status();
  result.payload.rebuild(encoded.data(), *bytes);
  result.codec = c.plan.pull.name();
  return result;
}

}  // namespace bytecomp::server
