#include "bytecomp/planner/calibrate.h"

#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <random>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bytecomp/common/dtype.h"
#include "bytecomp/common/stats.h"
#include "bytecomp/compress/aggregator.h"
#include "bytecomp/compress/memory.h"
#include "bytecomp/compress/params.h"
#include "bytecomp/compress/registry.h"
#include "bytecomp/compress/strategy.h"
#include "bytecomp/compress/two_round.h"
#include "bytecomp/planner/decision_tree.h"

namespace bytecomp::planner {
namespace {

using Clock = std::chrono::steady_clock;

// Runs `call` until `seconds` have passed (at least 3 times); returns the median in us.
template <typename Call>
absl::StatusOr<double> TimeCall(double seconds, Call call) {
  std::vector<double> times;
  const auto start = Clock::now();
  while (times.size() < 3 ||
         std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
    const auto t0 = Clock::now();
    if (absl::Status s = call(); !s.ok()) return s;
    times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (times.size() >= 10000) break;
  }
  return bytecomp::Median(times);
}

// GB/s of one thread running `call` over `bytes` (the median time).
template <typename Call>
double GbytesPerS(double seconds, double bytes, Call call) {
  auto us = TimeCall(seconds, [&]() -> absl::Status {
    call();
    return absl::OkStatus();
  });
  return us.ok() && *us > 0 ? bytes / (*us * 1e3) : 0;
}

// The server's side of one codec at one size: an aggregation round with one push and with
// four (a push costs a third of the difference, the rest of one push's round is fixed).
// Codecs whose aggregator cannot be made or fed this way get no points (the planner then
// models the server as decode and add).
struct AggregateCost {
  double per_push_us = 0;
  double base_us = 0;
};
std::optional<AggregateCost> TimeAggregate(const proto::CodecCost& entry,
                                           const compress::CodecParams& params,
                                           const std::vector<std::vector<uint8_t>>& payloads,
                                           size_t n, const compress::CodecContext& ctx,
                                           double seconds) {
  // One aggregator per slot (a server keeps one per key), each fed its slot's payload and
  // run once untimed, so that its sum is allocated before timing.
  std::vector<std::unique_ptr<compress::Aggregator>> aggregators;
  for (const std::vector<uint8_t>& payload : payloads) {
    auto aggregator = compress::CreateAggregator(entry.name(), params);
    if (!aggregator.ok()) return std::nullopt;
    (*aggregator)->Reset(n);
    if (!(*aggregator)->Add(payload, ctx).ok() || !(*aggregator)->Finish().ok()) {
      return std::nullopt;
    }
    aggregators.push_back(*std::move(aggregator));
  }
  size_t next = 0;
  auto round = [&](int pushes) {
    return TimeCall(seconds, [&]() -> absl::Status {
      const size_t slot = next++ % payloads.size();
      compress::Aggregator& aggregator = *aggregators[slot];
      aggregator.Reset(n);
      for (int r = 0; r < pushes; ++r) {
        compress::CodecContext from = ctx;
        from.node = static_cast<uint32_t>(r);
        if (absl::Status s = aggregator.Add(payloads[slot], from); !s.ok()) return s;
      }
      return aggregator.Finish().status();
    });
  };
  constexpr int kPushes = 4;
  auto one = round(1);
  auto many = round(kPushes);
  if (!one.ok() || !many.ok()) return std::nullopt;
  AggregateCost cost;
  cost.per_push_us = std::max(0.0, (*many - *one) / (kPushes - 1));
  cost.base_us = std::max(0.0, *one - cost.per_push_us);
  return cost;
}

proto::Exchange ExchangeOf(compress::CodecExchange exchange) {
  switch (exchange) {
    case compress::CodecExchange::kSummedIndices:
      return proto::EXCHANGE_SUMMED_INDICES;
    case compress::CodecExchange::kBlockSparse:
      return proto::EXCHANGE_BLOCK_SPARSE;
    case compress::CodecExchange::kPushPull:
      break;
  }
  return proto::EXCHANGE_PUSH_PULL;
}

// How the codec crosses the network, for the cost model (proto Exchange), from its facts
// (compress CodecFacts::exchange: artopk's two exchanges, blocksparse's block-sparse pull);
// the kept fraction of the ratio codecs, sparse or summing k-vectors (artopk); sparse pushes
// can be returned as the servers' union.
absl::Status SetExchange(const compress::CodecSpec& spec, const compress::CodecParams& given,
                         proto::CodecCost* out) {
  absl::StatusOr<compress::CodecParams> params =
      compress::ValidateParams(absl::StrCat("codec '", spec.name, "'"), spec.params, given);
  if (!params.ok()) return params.status();
  const compress::CodecFacts& facts = spec.facts;
  double kept = 0;
  if (auto it = params->find("ratio");
      it != params->end() &&
      (facts.sparse || facts.exchange == compress::CodecExchange::kSummedIndices)) {
    if (!absl::SimpleAtod(it->second, &kept)) kept = 0;
  }
  out->set_kept_fraction(kept);
  out->set_union_pull(facts.sparse && kept > 0);
  out->set_exchange(ExchangeOf(facts.exchange));
  return absl::OkStatus();
}

// A two-round codec as the engine runs it per partition (two_round.h): compensate and the first
// payload (before the first push), the second payload with the codec's own approximation and
// the memory's update (between the round trips), the decoded sum (after the second pull).
// Each worker's own payload stands in for the servers' sum of it. Medians in us; the sizes are
// the two payloads together.
struct TwoRoundCost {
  double encode_us = 0;
  double between_us = 0;
  double decode_us = 0;
  size_t encoded_bytes = 0;
};
absl::StatusOr<TwoRoundCost> TimeTwoRound(const proto::CodecCost& entry,
                                          const compress::CodecParams& params,
                                          const std::vector<float>& input, size_t n, size_t slots,
                                          std::vector<float>& output, double seconds) {
  const auto& registry = compress::CodecRegistry::Global();
  struct Slot {
    std::unique_ptr<compress::Codec> codec;
    std::unique_ptr<compress::Memory> memory;
    std::vector<float> compensated, approximation;
    std::vector<uint8_t> first, second;
  };
  std::vector<Slot> all(slots);
  compress::CodecContext ctx;
  ctx.key = 1;
  for (Slot& slot : all) {
    auto codec = registry.Create(entry.name(), params);
    if (!codec.ok()) return codec.status();
    slot.codec = *std::move(codec);
    if (!compress::IsNoneName(entry.memory())) {
      auto memory = compress::CreateMemory(entry.memory());
      if (!memory.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("calibrating '", entry.name(), "': memory: ", memory.status().message()));
      }
      slot.memory = *std::move(memory);
    }
    compress::TwoRoundCodec* two = compress::AsTwoRound(*slot.codec);
    slot.compensated.resize(n);
    slot.approximation.resize(n);
    slot.first.resize(two->FirstRoundBytes(n));
    slot.second.resize(two->SecondRoundBytes(n));
  }
  auto floats = [](const std::vector<uint8_t>& payload) {  // past the u32 stage word
    return absl::MakeConstSpan(reinterpret_cast<const float*>(payload.data() + 4),
                               (payload.size() - 4) / sizeof(float));
  };
  // Each step in turn over every slot, so that the next step finds its slot's state.
  enum Step { kFirst, kBetween, kDecode };
  auto run = [&](Step step, size_t index) -> absl::Status {
    Slot& slot = all[index];
    compress::TwoRoundCodec* two = compress::AsTwoRound(*slot.codec);
    const auto in = absl::MakeConstSpan(&input[index * n], n);
    if (step == kFirst) {
      if (slot.memory != nullptr) {
        if (auto s = slot.memory->Compensate(in, ctx, absl::MakeSpan(slot.compensated)); !s.ok()) {
          return s;
        }
      } else {
        std::copy(in.begin(), in.end(), slot.compensated.begin());
      }
      return two->EncodeFirst(slot.compensated, ctx, absl::MakeSpan(slot.first)).status();
    }
    if (step == kBetween) {
      auto bytes = two->EncodeSecond(floats(slot.first), ctx, absl::MakeSpan(slot.second));
      if (!bytes.ok()) return bytes.status();
      if (slot.memory == nullptr) return absl::OkStatus();
      if (auto s = two->LocalApproximation(absl::MakeSpan(slot.approximation)); !s.ok()) return s;
      return slot.memory->Update(slot.compensated, slot.approximation, ctx);
    }
    return two->DecodeSecond(floats(slot.second), ctx, absl::MakeSpan(&output[index * n], n));
  };
  TwoRoundCost cost;
  double* times[] = {&cost.encode_us, &cost.between_us, &cost.decode_us};
  // A round per pass over the slots; the first, untimed, allocates the codecs' state.
  for (size_t i = 0; i < slots; ++i) {
    for (Step step : {kFirst, kBetween, kDecode}) {
      if (absl::Status s = run(step, i); !s.ok()) return s;
    }
  }
  std::vector<double> samples[3];
  const auto start = Clock::now();
  while (samples[0].size() < 3 ||
         std::chrono::duration<double>(Clock::now() - start).count() < 3 * seconds) {
    ++ctx.round;
    for (Step step : {kFirst, kBetween, kDecode}) {
      const auto t0 = Clock::now();
      for (size_t i = 0; i < slots; ++i) {
        if (absl::Status s = run(step, i); !s.ok()) return s;
      }
      samples[step].push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() /
                              slots);
    }
    if (samples[0].size() >= 10000) break;
  }
  for (int step = 0; step < 3; ++step) *times[step] = bytecomp::Median(samples[step]);
  cost.encoded_bytes = all[0].first.size() + all[0].second.size();
  return cost;
}

// The measured sizes, and ratio and overhead fitted on the two largest.
void SetSizeModel(const std::vector<int64_t>& sizes, const std::vector<double>& encoded_bytes,
                  proto::CodecCost* out) {
  const size_t k = sizes.size();
  const double in_lo = static_cast<double>(sizes[k - 2]);
  const double in_hi = static_cast<double>(sizes[k - 1]);
  double ratio = (encoded_bytes[k - 1] - encoded_bytes[k - 2]) / (in_hi - in_lo);
  ratio = std::clamp(ratio, 1e-6, 2.0);
  out->set_ratio(ratio);
  out->set_overhead_bytes(
      std::max<int64_t>(0, static_cast<int64_t>(encoded_bytes[k - 2] - ratio * in_lo)));
  out->clear_sizes();
  for (size_t i = 0; i < k; ++i) {
    proto::SizePoint* point = out->add_sizes();
    point->set_bytes(sizes[i]);
    point->set_encoded_bytes(static_cast<int64_t>(encoded_bytes[i]));
  }
}

std::string HostName() {
  char name[256] = {0};
  if (gethostname(name, sizeof name - 1) != 0) return "this host";
  return name;
}

}  // namespace

absl::StatusOr<proto::CostTable> CalibrateCpuCosts(const proto::CostTable& template_table,
                                                   const CalibrationOptions& options) {
  if (options.sizes.size() < 2) {
    return absl::InvalidArgumentError("calibration needs at least two sizes");
  }
  const auto& registry = compress::CodecRegistry::Global();
  proto::CostTable entries = template_table;
  if (entries.codecs().empty()) {
    for (const std::string& name : registry.Names()) {
      if (!compress::IsNoneName(name)) entries.add_codecs()->set_name(name);
    }
  }
  proto::CostTable table;
  table.set_source(absl::StrCat(
      "measured by bytecomp-plan --calibrate on ", HostName(),
      ", one CPU thread, Gaussian inputs; encode with the codec's memory, decode into the "
      "caller's tensor, server aggregation per push; two-round codecs per step as the engine runs "
      "them; compressed sizes the mean over the payloads; GPU costs (where present) copied "
      "unmeasured from the template"));
  // Inputs and outputs span the working set, so that successive calls, each on its own slot
  // (its own partition: input, memory, payload, output), find their data out of cache as the
  // engine does, which touches each partition once per round.
  const size_t max_bytes =
      static_cast<size_t>(std::max<int64_t>(options.sizes.back(), options.working_set_bytes));
  std::mt19937 rng(12345);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> input(max_bytes / 4);
  for (float& x : input) x = normal(rng);
  std::vector<float> output(input.size());
  std::vector<float> result(input.size());  // the caller's tensors the decoded values go to
  std::vector<float> compensated, decoded;  // EncodeWithMemory's scratch
  {
    const double big = static_cast<double>(input.size() * sizeof(float));
    const size_t n = input.size();
    table.set_sum_gbytes_per_s(GbytesPerS(options.seconds_per_point, big,
                                          [&] { AddFloat32(output.data(), input.data(), n); }));
    table.set_copy_gbytes_per_s(GbytesPerS(options.seconds_per_point, big, [&] {
      std::memcpy(result.data(), input.data(), n * sizeof(float));
    }));
  }

  std::vector<std::string> skipped;
  for (const proto::CodecCost& entry : entries.codecs()) {
    if (registry.Find(entry.name()) == nullptr) {
      skipped.push_back(entry.name());
      continue;
    }
    compress::CodecParams params(entry.params().begin(), entry.params().end());
    auto codec = registry.Create(entry.name(), params);
    if (!codec.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("calibrating '", entry.name(), "': ", codec.status().message()));
    }
    proto::CodecCost out = entry;
    out.clear_costs();
    const compress::CodecProperties properties = (*codec)->properties();
    out.set_summable(properties.summable_encoded);
    out.set_reencodable(!properties.two_round && !properties.majority_vote);
    if (absl::Status s = SetExchange(*registry.Find(entry.name()), params, &out); !s.ok()) {
      return s;
    }
    // artopk's two stages are its exchange's (EXCHANGE_SUMMED_INDICES), not a powersgd-style
    // second round trip of the sum.
    const bool two_round_sum = properties.two_round && out.exchange() == proto::EXCHANGE_PUSH_PULL;
    out.set_two_round(two_round_sum);
    out.set_loss(LossOf(out));
    proto::DeviceCost* cpu = out.add_costs();
    cpu->set_device(proto::DEVICE_CPU);
    std::vector<double> encoded_bytes;
    if (two_round_sum) {
      out.set_reencodable(false);
      for (int64_t bytes : options.sizes) {
        const size_t n = static_cast<size_t>(bytes / 4);
        const size_t slots = std::clamp<size_t>(input.size() / n, 1, 1024);
        absl::StatusOr<TwoRoundCost> measured =
            TimeTwoRound(entry, params, input, n, slots, output, options.seconds_per_point);
        if (!measured.ok()) {
          return absl::InternalError(absl::StrCat("calibrating '", entry.name(), "' at ", bytes,
                                                  " bytes: ", measured.status().message()));
        }
        for (auto [curve, us] : {std::pair{cpu->mutable_encode(), measured->encode_us},
                                 std::pair{cpu->mutable_between_rounds(), measured->between_us},
                                 std::pair{cpu->mutable_decode(), measured->decode_us}}) {
          proto::CostPoint* point = curve->Add();
          point->set_bytes(bytes);
          point->set_us(us);
        }
        encoded_bytes.push_back(static_cast<double>(measured->encoded_bytes));
      }
      SetSizeModel(options.sizes, encoded_bytes, &out);
      *table.add_codecs() = std::move(out);
      continue;
    }
    bool aggregate_ok = !properties.two_round;
    for (int64_t bytes : options.sizes) {
      const size_t n = static_cast<size_t>(bytes / 4);
      const size_t slots = std::clamp<size_t>(input.size() / n, 1, 1024);
      // One codec and memory per slot, as the engine has one per partition.
      std::vector<std::unique_ptr<compress::Codec>> codecs;
      std::vector<std::unique_ptr<compress::Memory>> memories;
      for (size_t i = 0; i < slots; ++i) {
        auto made_codec = registry.Create(entry.name(), params);
        if (!made_codec.ok()) return made_codec.status();
        codecs.push_back(*std::move(made_codec));
        if (!compress::IsNoneName(entry.memory())) {
          auto made = compress::CreateMemory(entry.memory());
          if (!made.ok()) {
            return absl::InvalidArgumentError(absl::StrCat("calibrating '", entry.name(),
                                                           "': memory: ", made.status().message()));
          }
          memories.push_back(*std::move(made));
        } else {
          memories.push_back(nullptr);
        }
      }
      std::vector<std::vector<uint8_t>> payloads(
          slots, std::vector<uint8_t>((*codec)->MaxEncodedBytes(n)));
      std::vector<size_t> written(slots, payloads[0].size());
      compress::CodecContext ctx;
      ctx.key = 1;
      // Untimed first round: the memories allocate their state, as in the engine's first round.
      for (size_t slot = 0; slot < slots; ++slot) {
        auto size = compress::EncodeWithMemory(
            *codecs[slot], memories[slot].get(), absl::MakeConstSpan(&input[slot * n], n), ctx,
            absl::MakeSpan(payloads[slot]), compensated, decoded);
        if (!size.ok()) {
          return absl::InternalError(absl::StrCat("calibrating '", entry.name(), "' encode of ",
                                                  bytes, " bytes: ", size.status().message()));
        }
      }
      size_t next = 0;
      auto encode_us = TimeCall(options.seconds_per_point, [&]() -> absl::Status {
        const size_t slot = next++ % slots;
        if (slot == 0) ++ctx.round;  // stateful codecs see successive rounds
        // As the engine encodes: with the memory (compensate, encode, update).
        auto size = compress::EncodeWithMemory(
            *codecs[slot], memories[slot].get(), absl::MakeConstSpan(&input[slot * n], n), ctx,
            absl::MakeSpan(payloads[slot]), compensated, decoded);
        if (!size.ok()) return size.status();
        written[slot] = *size;
        return absl::OkStatus();
      });
      if (!encode_us.ok()) {
        return absl::InternalError(absl::StrCat("calibrating '", entry.name(), "' encode of ",
                                                bytes, " bytes: ", encode_us.status().message()));
      }
      const size_t encoded_slots = std::min<size_t>(next, slots);  // slots holding a payload
      for (size_t i = 0; i < encoded_slots; ++i) payloads[i].resize(written[i]);
      payloads.resize(encoded_slots);
      // As the engine decodes a pull: into its buffer, then into the caller's tensor.
      next = 0;
      auto decode_us = TimeCall(options.seconds_per_point, [&]() -> absl::Status {
        const size_t slot = next++ % encoded_slots;
        absl::Status s =
            codecs[slot]->Decode(payloads[slot], ctx, absl::MakeSpan(&output[slot * n], n));
        std::memcpy(&result[slot * n], &output[slot * n], n * sizeof(float));
        return s;
      });
      if (!decode_us.ok()) {
        return absl::InternalError(absl::StrCat("calibrating '", entry.name(), "' decode of ",
                                                bytes, " bytes: ", decode_us.status().message()));
      }
      auto* e = cpu->add_encode();
      e->set_bytes(bytes);
      e->set_us(*encode_us);
      auto* d = cpu->add_decode();
      d->set_bytes(bytes);
      d->set_us(*decode_us);
      // Data-dependent sizes (packed indices): the mean over the slots' payloads.
      double total_written = 0;
      for (size_t i = 0; i < encoded_slots; ++i) total_written += static_cast<double>(written[i]);
      encoded_bytes.push_back(total_written / static_cast<double>(encoded_slots));
      if (aggregate_ok) {
        std::optional<AggregateCost> agg =
            TimeAggregate(entry, params, payloads, n, ctx, options.seconds_per_point);
        if (agg.has_value()) {
          auto* a = cpu->add_aggregate();
          a->set_bytes(bytes);
          a->set_us(agg->per_push_us);
          auto* b = cpu->add_aggregate_base();
          b->set_bytes(bytes);
          b->set_us(agg->base_us);
        } else {
          aggregate_ok = false;
        }
      }
    }
    if (!aggregate_ok) {  // all sizes or none
      cpu->clear_aggregate();
      cpu->clear_aggregate_base();
    }
    SetSizeModel(options.sizes, encoded_bytes, &out);
    for (const auto& cost : entry.costs()) {
      if (cost.device() == proto::DEVICE_GPU) *out.add_costs() = cost;
    }
    *table.add_codecs() = std::move(out);
  }
  if (!skipped.empty()) {
    table.set_source(absl::StrCat(
        table.source(), "; not in the codec registry, left out: ", absl::StrJoin(skipped, ", ")));
  }
  return table;
}

}  // namespace bytecomp::planner
