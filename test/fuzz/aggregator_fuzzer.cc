// Fuzz target: the server's aggregation of several workers' payloads for one key
// (compress::CreateAggregator: summed values, sparse add, decode-and-add, majority vote, two
// rounds), over one to three rounds that reuse the aggregator, as a key shard does.
//
// Input (fuzz_input.h): the codec and its parameters (codec_choice.h), the round's context
// (key, round, node, seed), u16 element count (at most kMaxElements), u8 workers (1 to 4),
// u8 rounds (1 to 3); then per round and worker: u8 flags (bit 0: the payload claims another
// round, which must be refused; bit 1: Finish is called before this Add), and the payload.
//
// Checks the aggregator's contract (aggregator.h): Add returns OK or InvalidArgument; a
// refused payload changes neither the sum nor the count; a payload of another round is
// refused; Finish after an Add sees it; the sum of the generic aggregators and of block_sparse
// equals the payloads decoded one by one and added up; and a codec whose sum travels in its
// push format (sum_in_push_format: blocksparse) gives an EncodedSum that its Decode reads back
// as exactly Finish()'s sum (InvalidArgument for a sum beyond fp32's range), the others
// Unimplemented.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "codec_choice.h"
#include "fuzz_input.h"

namespace bytecomp::fuzz {
namespace {

constexpr size_t kMaxElements = 2048;

[[noreturn]] void Fail(const ChosenCodec& chosen, const char* what) {
  std::fprintf(stderr, "aggregator for codec '%s': %s\n", chosen.spec->name.c_str(), what);
  std::abort();
}

std::vector<float> Snapshot(compress::Aggregator& aggregator) {
  absl::StatusOr<absl::Span<const float>> sum = aggregator.Finish();
  if (!sum.ok()) return {};
  return std::vector<float>(sum->begin(), sum->end());
}

bool Same(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  }
  return true;
}

// EncodedSum (aggregator.h): for sum_in_push_format codecs the lossless sum in the push format,
// which the codec decodes to exactly Finish()'s sum; Unimplemented for the others.
void CheckEncodedSum(const ChosenCodec& chosen, compress::Aggregator& aggregator,
                     const compress::CodecContext& ctx, size_t n) {
  absl::StatusOr<absl::Span<const uint8_t>> encoded = aggregator.EncodedSum();
  std::unique_ptr<compress::Codec> codec = MakeCodec(chosen);
  if (!codec->properties().sum_in_push_format) {
    if (encoded.ok() || !absl::IsUnimplemented(encoded.status())) {
      Fail(chosen, "EncodedSum of a codec without sum_in_push_format is not Unimplemented");
    }
    return;
  }
  if (!encoded.ok()) {
    // A sum beyond fp32's range has no encoding (Encode refuses it): InvalidArgument then,
    // and only then (regress-blocksparse-sum-overflow).
    const std::vector<float> sum = Snapshot(aggregator);
    const bool overflowed =
        std::any_of(sum.begin(), sum.end(), [](float x) { return !std::isfinite(x); });
    if (overflowed && absl::IsInvalidArgument(encoded.status())) return;
    Fail(chosen, "EncodedSum failed after Reset");
  }
  // A copy: the span is valid only until the next Add, and Finish must not change it either.
  const std::vector<uint8_t> bytes(encoded->begin(), encoded->end());
  std::vector<float> decoded(n);
  if (const absl::Status s = codec->Decode(bytes, ctx, absl::MakeSpan(decoded)); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    Fail(chosen, "Decode refuses the aggregator's EncodedSum");
  }
  if (!Same(decoded, Snapshot(aggregator))) {
    Fail(chosen, "EncodedSum decodes to another sum than Finish gives");
  }
}

void RunRound(const ChosenCodec& chosen, compress::Aggregator& aggregator, FuzzInput& in,
              const compress::CodecContext& base, size_t n, int workers) {
  aggregator.Reset(n);
  // The generic aggregators' sum, and block_sparse's, is the payloads' decodings added up (in
  // fp32, in order).
  const absl::string_view kind = aggregator.name();
  const bool generic = kind == "decode_add" || kind == "sparse_add" || kind == "summed_values" ||
                       kind == "block_sparse";
  std::vector<double> reference(n, 0.0), magnitude(n, 0.0);
  size_t accepted = 0;
  for (int w = 0; w < workers; ++w) {
    const uint8_t flags = in.U8();
    const absl::Span<const uint8_t> bytes = in.Bytes();
    // An exactly sized heap copy, so that a read past the payload is caught.
    const std::vector<uint8_t> payload(bytes.begin(), bytes.end());
    compress::CodecContext ctx = base;
    ctx.node = static_cast<uint32_t>(w);
    const bool other_round = (flags & 1) != 0 && accepted > 0;
    if (other_round) ctx.round += 1;
    const std::vector<float> before =
        (flags & 2) != 0 ? Snapshot(aggregator) : std::vector<float>();
    const absl::Status added = aggregator.Add(payload, ctx);
    RequireOkOrInvalidArgument(added, "Aggregator::Add");
    if (other_round && added.ok()) Fail(chosen, "took a payload of another round");
    if (!added.ok()) {
      if (aggregator.count() != accepted) Fail(chosen, "a refused payload was counted");
      if ((flags & 2) != 0 && !Same(Snapshot(aggregator), before)) {
        Fail(chosen, "a refused payload changed the sum");
      }
      continue;
    }
    ++accepted;
    if (aggregator.count() != accepted) Fail(chosen, "count() is not the payloads added");
    if (generic) {
      std::unique_ptr<compress::Codec> codec = MakeCodec(chosen);
      std::vector<float> decoded(n);
      if (!codec->Decode(payload, ctx, absl::MakeSpan(decoded)).ok()) {
        Fail(chosen, "took a payload that Decode refuses");
      }
      for (size_t i = 0; i < n; ++i) {
        reference[i] += decoded[i];
        magnitude[i] += std::fabs(decoded[i]);
      }
    }
  }
  CheckEncodedSum(chosen, aggregator, base, n);
  absl::StatusOr<absl::Span<const float>> sum = aggregator.Finish();
  if (!sum.ok()) {
    // Payloads that disagree as a whole (aggregator.h) fail the round with a reason; any other
    // failure after Reset is a bug.
    if (absl::IsInvalidArgument(sum.status()) && !sum.status().message().empty() && accepted > 0) {
      return;
    }
    Fail(chosen, "Finish failed after Reset");
  }
  if (!generic) return;
  if (sum->size() != n) Fail(chosen, "the sum is not n elements");
  for (size_t i = 0; i < n; ++i) {
    const double tolerance = 1e-5 * (1.0 + magnitude[i]);
    if (std::isfinite(reference[i]) && std::isfinite((*sum)[i]) &&
        std::fabs((*sum)[i] - reference[i]) > tolerance) {
      Fail(chosen, "the sum differs from the payloads decoded and added");
    }
  }
}

}  // namespace
}  // namespace bytecomp::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bytecomp::fuzz;
  FuzzInput in(data, size);
  const ChosenCodec chosen = ReadCodecChoice(in);
  const bytecomp::compress::CodecContext base = ReadContext(in);
  const size_t n = in.U16() % (kMaxElements + 1);
  const int workers = 1 + in.U8() % 4;
  const int rounds = 1 + in.U8() % 3;
  absl::StatusOr<std::unique_ptr<bytecomp::compress::Aggregator>> aggregator =
      bytecomp::compress::CreateAggregator(MakeCodec(chosen));
  if (!aggregator.ok()) {
    std::fprintf(stderr, "no aggregator for codec '%s': %s\n", chosen.spec->name.c_str(),
                 aggregator.status().ToString().c_str());
    std::abort();
  }
  for (int r = 0; r < rounds; ++r) {
    bytecomp::compress::CodecContext ctx = base;
    ctx.round += static_cast<uint64_t>(r);
    RunRound(chosen, **aggregator, in, ctx, n, workers);
  }
  return 0;
}
