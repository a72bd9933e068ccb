// The Strategy (proto/strategy.proto) as every node applies it: loading with errors that name
// file, line and field; which codec a tensor gets; which version a round uses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bytecomp/common/glob.h"
#include "bytecomp/compress/codec.h"
#include "strategy.pb.h"

namespace bytecomp::compress {

// "" and "none" both name no codec (raw values) and no memory.
inline bool IsNoneName(absl::string_view name) { return name.empty() || name == "none"; }

// Tensors smaller than this stay uncompressed unless their entry forces it (as BytePS).
constexpr int64_t kDefaultMinCompressBytes = 65536;
// Members of one fusion group (Strategy.fusion_groups) at most.
constexpr int kMaxFusionMembers = 65536;

// Parses and validates a strategy file: syntax errors, unknown fields, unknown codec or memory
// names and bad parameters are InvalidArgument errors of the form
// "strategy.pbtxt:7:20: tensors[1].push_codec.name: unknown codec 'topkk'; valid codecs: ...".
absl::StatusOr<proto::Strategy> LoadStrategyFile(const std::string& path);
absl::StatusOr<proto::Strategy> ParseStrategy(absl::string_view text, absl::string_view source);
// Validates codec and memory names and parameters (no locations: for strategies from the wire).
absl::Status ValidateStrategy(const proto::Strategy& strategy);

// What the strategy says for one tensor.
struct TensorPlan {
  uint64_t version = 0;
  proto::CodecConfig push;  // empty name: raw values
  proto::CodecConfig pull;  // empty name: one-way (the fp32 sum comes back)
  proto::Placement compress_on = proto::PLACEMENT_DEFAULT;
  proto::Placement decompress_on = proto::PLACEMENT_DEFAULT;
  // The entry adapts its ratio (TensorStrategy.adaptive_ratio): the rounds of a measurement
  // window the worker reports; 0: not adaptive.
  uint32_t ratio_window_rounds = 0;
  proto::Scheme scheme = proto::SCHEME_PS;
  // A member of a fusion group (Strategy.fusion_groups) at this round: the group's own
  // push_pull carries its values, and nothing else here applies. Set by the worker's strategy
  // switch (PlanFor does not: it plans one tensor's entry).
  std::string fusion_group;
  bool fused() const { return !fusion_group.empty(); }
  bool collective() const { return scheme != proto::SCHEME_PS; }
  bool compressed() const { return !IsNoneName(push.name()); }
  bool two_way() const { return compressed() && !IsNoneName(pull.name()); }
};

// The first entry whose name_pattern matches (glob: * and ?); tensors under
// min_compress_bytes stay raw unless the entry sets force. Two-way with the push codec as
// pull codec and no pull memory: the pull gets the push's memory (and its params), so the
// server's re-encode has the same error feedback; memory "none" in the pull codec opts out.
// `row_elements` (TensorLayout.row_elements, 0: a flat tensor): codecs that work on a matrix
// (a "cols" parameter: powersgd) get the layer's row length unless the entry sets "cols".
TensorPlan PlanFor(const proto::Strategy& strategy, absl::string_view tensor_name,
                   int64_t tensor_bytes, int64_t row_elements = 0);
using ::bytecomp::EntryFor;  // common/glob.h
using ::bytecomp::GlobMatch;
// An adaptive ratio with the defaults strategy.proto documents in place of its zeros.
proto::AdaptiveRatio AdaptiveRatioWithDefaults(const proto::AdaptiveRatio& given);
// The push codec's "ratio" (its default when the entry leaves it out); an error when the
// codec has none.
absl::StatusOr<double> PushRatio(const proto::TensorStrategy& entry);
// Codec params of a CodecConfig as the registry takes them.
CodecParams ParamsOf(const proto::CodecConfig& config);
CodecParams MemoryParamsOf(const proto::CodecConfig& config);

// The pull codec that gives the workers the servers' sparse union, the gather style of top-k:
// every non-zero of the sum with its index, losslessly (threshold at 0).
proto::CodecConfig SparseUnionPullCodec();
// Whether `pull` is that codec (its threshold given, read as a number).
bool IsSparseUnionPull(const proto::CodecConfig& pull);

// Whether `a` and `b` name the same fusion groups: names, members and their order.
bool SameFusionGroups(const proto::Strategy& a, const proto::Strategy& b);

// The versions a node knows, each from its first_round on.
class StrategyHistory {
 public:
  // Versions must increase; a version's first_round must not precede the previous one's.
  absl::Status Add(const proto::Strategy& strategy);
  // The version in force at `round` (the latest whose first_round <= round); nullptr if none.
  const proto::Strategy* ForRound(uint64_t round) const;
  const proto::Strategy* Version(uint64_t version) const;
  uint64_t latest_version() const { return versions_.empty() ? 0 : versions_.back().version(); }

 private:
  std::vector<proto::Strategy> versions_;
};

}  // namespace bytecomp::compress
