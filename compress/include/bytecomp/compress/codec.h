// The codec interface: fp32 in, bytes out, and back. One Codec instance serves one partition
// in one direction (push on a worker, pull on a server), so per-tensor state (momentum,
// PowerSGD's warm-started Q) lives inside the instance and needs no lookup by key.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace bytecomp::compress {

class Aggregator;  // aggregator.h

// What an instance says of itself. Those that hold for every parameter value are also its
// spec's CodecFacts (sparse, summable_encoded, two_round), which callers without an instance ask.
struct CodecProperties {
  // Encoded contributions of several workers can be summed without decoding (fp16; randomk
  // with a shared seed: the value arrays add element-wise).
  bool summable_encoded = false;
  // E[decode(encode(x))] == x.
  bool unbiased = false;
  // Needs a second aggregation round trip (PowerSGD: P, then Q).
  bool two_round = false;
  // The server aggregates by majority vote of signs (signsgd, signum).
  bool majority_vote = false;
  // The payload is values with indices; the server aggregates as a sparse add.
  bool sparse = false;
  // Keeps state across rounds inside the instance (momentum, warm start).
  bool stateful = false;
  // decode(encode(x)) == x, up to the sign of a zero (blocksparse at threshold 0, none).
  bool lossless = false;
  // The server's sum goes back to the workers in this codec's own format, one-way too, built by
  // the codec's aggregator without a dense buffer (Aggregator::EncodedSum); a worker decodes a
  // one-way pull reply with its push codec instead of reading an fp32 sum (blocksparse: the
  // block-sparse sum, so nothing dense crosses the wire unless the sum is dense).
  bool sum_in_push_format = false;
};

// What the codec may need to know about the call. Identical on every worker for a given
// (key, round), so shared randomness (randomk's indices) is derived from it alike everywhere.
struct CodecContext {
  uint64_t key = 0;            // partition key: (tensor id << 32) | partition index
  uint64_t round = 0;          // iteration count of the key
  uint32_t node = 0;           // worker rank (or server rank), for per-node random streams
  uint64_t seed = 0;           // job-wide seed, from the strategy
  float learning_rate = 0.0f;  // current optimiser learning rate, for codecs that need it
};

// Parameters as given by a strategy file or the C API: name -> value text. The registry
// checks names and types against the codec's declared parameters.
using CodecParams = std::map<std::string, std::string>;

class Codec {
 public:
  virtual ~Codec() = default;

  virtual absl::string_view name() const = 0;
  virtual CodecProperties properties() const = 0;

  // Upper bound of Encode's output, in bytes, for n input elements.
  virtual size_t MaxEncodedBytes(size_t n) const = 0;

  // Encodes input (n floats) into out (at least MaxEncodedBytes(n) bytes); returns the bytes
  // written. NaN or Inf in the input is an InvalidArgument error naming the first bad index.
  virtual absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext& ctx,
                                        absl::Span<uint8_t> out) = 0;

  // Decodes into output (n floats). Malformed bytes (wrong size, bad header, index out of
  // range) are an InvalidArgument error; output is then unspecified.
  virtual absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext& ctx,
                              absl::Span<float> output) = 0;

  // accumulator += decode(encoded). The default decodes into a scratch buffer and adds;
  // codecs override it when they can add directly (sparse formats).
  virtual absl::Status DecodeAdd(absl::Span<const uint8_t> encoded, const CodecContext& ctx,
                                 absl::Span<float> accumulator);

  // --- Summing without decoding; only for codecs with properties().summable_encoded. ---
  // Their payload carries a dense vector of SummedLength(n) values that add element-wise
  // across workers (randomk: the k values at the shared indices; fp16: all n values). The
  // server keeps an fp32 sum of that length, adds each payload into it, and expands once.
  virtual size_t SummedLength(size_t n, const CodecContext& ctx) const { return n; }
  // sum (SummedLength(n) floats) += the payload's values, after validating the payload for
  // n = output length as Decode would. The default is Unimplemented.
  virtual absl::Status AddEncodedValues(absl::Span<const uint8_t> encoded, const CodecContext& ctx,
                                        size_t n, absl::Span<float> sum);
  // output (n floats) = the dense tensor that the summed values stand for. Default
  // Unimplemented.
  virtual absl::Status ExpandSum(absl::Span<const float> sum, const CodecContext& ctx,
                                 absl::Span<float> output);

 protected:
  std::vector<float> decode_add_scratch_;  // the default DecodeAdd's buffer
};

// Declared parameter of a codec, for validation and for error messages listing valid ones.
struct CodecParamSpec {
  enum class Type { kDouble, kInt, kBool, kString };
  std::string name;
  Type type = Type::kDouble;
  std::string default_value;
  std::string help;  // e.g. "fraction of elements kept, in (0, 1]"
  // Range for kDouble and kInt, checked by the registry (an exclusive bound excludes itself).
  double min_value = -1e308;
  double max_value = 1e308;
  bool min_exclusive = false;
  bool max_exclusive = false;
  // For kString: the accepted values; empty accepts any text.
  std::vector<std::string> choices = {};
};

// How much accuracy a codec costs, coarsely. The planner's LossClass (proto/planner.proto)
// follows it, with the memory: planner/decision_tree.h LossOf.
enum class CodecLoss {
  kNone,      // decode(encode(x)) == x (none)
  kRounding,  // values rounded to a shorter float (fp16, bf16)
  // Drops or quantises, and an error-feedback memory sends what was left out in later rounds
  // (topk, dgc, powersgd, the sign and quantising codecs): compensated with a memory, high
  // without one.
  kCompensable,
  kHigh,  // high even with a memory (randomk: its random selection)
};

// How a round of the codec crosses the network. The planner's Exchange (proto/planner.proto)
// follows it.
enum class CodecExchange {
  kPushPull,       // a push from every worker; the sum (fp32 or re-encoded) pulled back
  kSummedIndices,  // artopk: one worker's indices, then every worker's values there, summed
  kBlockSparse,    // blocksparse: the non-zero blocks up, the block-sparse sum back
};

// What a memory does around the codec (MemorySpec::kind, memory.h). compress/cuda fuses some
// of them into its encode kernels (CodecFacts::gpu_memories).
enum class MemoryKind { kNone, kResidual, kDgcMomentum, kEfSignSgd, kPowerSgd };

// The single-thread encode speed against memcpy that bytecomp-codec-bench holds a codec to
// (issue 3): kElementwise 25% (each element coded on its own: fp16, the sign and quantising
// codecs, randomk, none), kSelection 5% (finding which elements travel: topk, dgc, threshold).
enum class EncodeSpeedTarget { kNone, kElementwise, kSelection };

// The element type of a codec's summed values on an allreduce's wire (CodecFacts).
enum class SummedWire : uint8_t { kFloat32, kFloat16, kBfloat16 };

// What callers decide by without building an instance (the planner, calibration, the worker's
// stage placement, compress/cuda's registry): true of the codec for every parameter value,
// except lossless_when, which reads them. Nobody outside compress compares a codec's name to
// learn these. Found by name with CodecFactsOf (registry.h).
struct CodecFacts {
  CodecLoss loss = CodecLoss::kCompensable;
  // Optional: the codec is lossless with these parameters (every one present: the defaults
  // filled in), whatever `loss` says (blocksparse and threshold at threshold 0 drop only
  // zeros). CodecIsLossless (registry.h) asks it.
  std::function<bool(const CodecParams&)> lossless_when = nullptr;
  CodecExchange exchange = CodecExchange::kPushPull;
  // What every instance's CodecProperties say (the same for every parameter value).
  bool sparse = false;
  bool summable_encoded = false;
  bool two_round = false;
  // Codecs with the same non-empty selection keep the same elements for the same "ratio" and
  // so lose alike (topk and artopk: "top-k", a worker's k = ratio * n largest, with error
  // feedback); the planner's allowances (planner/allowed_codecs.h) take one for the other.
  std::string selection = {};
  // compress/cuda has kernels for it, registered under its name (its registry checks both
  // ways when built), which fuse these memories besides none.
  bool gpu_kernel = false;
  std::vector<MemoryKind> gpu_memories = {};
  EncodeSpeedTarget encode_target = EncodeSpeedTarget::kNone;
  // Under an allreduce (Strategy scheme), the type its summed values travel and are summed in:
  // fp16 and bf16 keep their own (half the bytes of fp32), the others fp32.
  SummedWire summed_wire = SummedWire::kFloat32;
};

// Whether an allreduce of the codec's payloads (Strategy scheme allreduce) sums them: its
// encoded values add element-wise (summable_encoded), or each of its two rounds is a sum of
// fp32 factors (two_round with the push-pull exchange: powersgd).
inline bool CollectiveSums(const CodecFacts& facts) {
  return facts.summable_encoded || (facts.two_round && facts.exchange == CodecExchange::kPushPull);
}
// Whether an allgather (Strategy scheme allgather) carries the codec's round: one payload from
// each worker, which every worker decodes (one round, the push-pull exchange).
inline bool CollectiveGathers(const CodecFacts& facts) {
  return !facts.two_round && facts.exchange == CodecExchange::kPushPull;
}

struct CodecSpec {
  std::string name;
  std::string summary;
  std::vector<CodecParamSpec> params;
  // Builds an instance from validated, defaults-filled parameters (read them with
  // ParamReader, params.h).
  std::function<absl::StatusOr<std::unique_ptr<Codec>>(const CodecParams&)> factory;
  // Optional: the server-side aggregator this codec needs when the generic choice from its
  // properties is not right (majority vote, two rounds). Takes ownership of a codec instance
  // made by `factory`. Empty: CreateAggregator (aggregator.h) picks from the properties.
  std::function<absl::StatusOr<std::unique_ptr<Aggregator>>(std::unique_ptr<Codec>)>
      aggregator_factory = nullptr;
  CodecFacts facts = {};
};

}  // namespace bytecomp::compress
