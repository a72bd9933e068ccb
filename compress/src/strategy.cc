#include "bytecomp/compress/strategy.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bytecomp/common/text_proto.h"
#include "bytecomp/compress/memory.h"
#include "bytecomp/compress/params.h"
#include "bytecomp/compress/registry.h"

namespace bytecomp::compress {
namespace {

// "file:line:col: " of a field inside tensors[i].<config>, when the parse recorded it (else
// of the entry).
std::string Where(absl::string_view source, const TextProtoTree* tree, const proto::Strategy& s,
                  int tensor_index, const char* config_field, const char* leaf) {
  const TextPosition entry_at = PositionOf(tree, s, "tensors", tensor_index);
  const TextProtoTree* entry = NestedTree(tree, s, "tensors", tensor_index);
  const proto::TensorStrategy& t = s.tensors(tensor_index);
  const TextProtoTree* codec = NestedTree(entry, t, config_field, -1);
  // The codec config and the leaf's arity, as the schema says.
  const auto& c = static_cast<const proto::CodecConfig&>(
      t.GetReflection()->GetMessage(t, t.GetDescriptor()->FindFieldByName(config_field)));
  const bool repeated = c.GetDescriptor()->FindFieldByName(leaf)->is_repeated();
  return Located(source, PositionOf(codec, c, leaf, repeated ? 0 : -1, entry_at));
}

absl::Status CheckCodec(const proto::CodecConfig& c, const std::string& field) {
  if (IsNoneName(c.name())) {
    if (!c.memory().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".memory: '", c.memory(), "' needs a codec"));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<Codec>> codec = CreateCodec(c.name(), ParamsOf(c));
  if (!codec.ok())
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", codec.status().message()));
  if (!c.memory().empty()) {
    absl::StatusOr<std::unique_ptr<Memory>> memory = CreateMemory(c.memory(), MemoryParamsOf(c));
    if (!memory.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".memory: ", memory.status().message()));
    }
  }
  return absl::OkStatus();
}

// The adaptive ratio's bounds and thresholds, against the push codec's ratio.
absl::Status CheckAdaptiveRatio(const proto::TensorStrategy& t) {
  const proto::AdaptiveRatio a = AdaptiveRatioWithDefaults(t.adaptive_ratio());
  absl::StatusOr<double> ratio = PushRatio(t);
  if (!ratio.ok()) return ratio.status();
  if (!(a.min_ratio() > 0 && a.min_ratio() <= a.max_ratio() && a.max_ratio() <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("needs 0 < min_ratio <= max_ratio <= 1, got ",
                                                   a.min_ratio(), " and ", a.max_ratio()));
  }
  if (*ratio < a.min_ratio() || *ratio > a.max_ratio()) {
    return absl::InvalidArgumentError(absl::StrCat("the push codec's ratio ", *ratio,
                                                   " is outside [", a.min_ratio(), ", ",
                                                   a.max_ratio(), "]"));
  }
  if (!(a.raise_below_kept() >= 0 && a.raise_below_kept() <= a.lower_above_kept() &&
        a.lower_above_kept() <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("needs 0 <= raise_below_kept <= lower_above_kept <= 1, got ",
                     a.raise_below_kept(), " and ", a.lower_above_kept()));
  }
  if (!(a.min_comm_share() >= 0 && a.min_comm_share() <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_comm_share must be in [0, 1], got ", a.min_comm_share()));
  }
  if (!(a.step() > 1)) {
    return absl::InvalidArgumentError(absl::StrCat("step must be > 1, got ", a.step()));
  }
  return absl::OkStatus();
}

// A collective scheme's needs (strategy.proto, Scheme): one-way, not hierarchical, and a push
// codec whose exchange it can carry.
absl::Status CheckScheme(const proto::TensorStrategy& t) {
  if (t.scheme() == proto::SCHEME_PS) return absl::OkStatus();
  if (!IsNoneName(t.pull_codec().name())) {
    return absl::InvalidArgumentError(
        "a collective is one-way: every worker sums the others' pushes itself, so there is no "
        "pull_codec to re-encode the sum with");
  }
  if (t.hierarchical()) {
    return absl::InvalidArgumentError("a collective spans every worker; it is not hierarchical");
  }
  if (IsNoneName(t.push_codec().name())) return absl::OkStatus();
  const CodecFacts* facts = CodecFactsOf(t.push_codec().name());
  if (facts == nullptr) return absl::OkStatus();  // CheckCodec named the unknown codec
  if (t.scheme() == proto::SCHEME_ALLREDUCE) {
    if (CollectiveSums(*facts)) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "codec '", t.push_codec().name(),
        "''s encoded form does not sum element-wise (allreduce takes none, codecs whose "
        "CodecFacts say summable_encoded, and two-round codecs' factors); use allgather or ps"));
  }
  if (!CollectiveGathers(*facts)) {
    return absl::InvalidArgumentError(
        absl::StrCat("codec '", t.push_codec().name(),
                     "' exchanges more than one payload per round; allgather takes one-round "
                     "push-pull codecs (use allreduce or ps)"));
  }
  return absl::OkStatus();
}

// Fusion groups: named, not empty, within kMaxFusionMembers members; a name (group or
// member) in one place only; a group's tensor travels over the parameter servers.
absl::Status CheckFusionGroups(const proto::Strategy& s) {
  absl::flat_hash_map<std::string, std::string> seen;  // name -> where
  for (int g = 0; g < s.fusion_groups_size(); ++g) {
    const proto::FusionGroup& group = s.fusion_groups(g);
    const std::string where = absl::StrCat("fusion_groups[", g, "]");
    if (group.name().empty())
      return absl::InvalidArgumentError(absl::StrCat(where, ".name: empty"));
    if (group.tensors().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, " ('", group.name(), "'): no tensors"));
    }
    if (group.tensors_size() > kMaxFusionMembers) {
      return absl::InvalidArgumentError(absl::StrCat(where, " ('", group.name(),
                                                     "'): ", group.tensors_size(),
                                                     " tensors; at most ", kMaxFusionMembers));
    }
    std::vector<std::pair<std::string, std::string>> names = {{group.name(), where + ".name"}};
    for (int m = 0; m < group.tensors_size(); ++m) {
      names.emplace_back(group.tensors(m), absl::StrCat(where, ".tensors[", m, "]"));
    }
    for (const auto& [name, at] : names) {
      if (name.empty()) return absl::InvalidArgumentError(absl::StrCat(at, ": empty"));
      auto [it, added] = seen.emplace(name, at);
      if (!added) {
        return absl::InvalidArgumentError(
            absl::StrCat(at, ": '", name, "' is also ", it->second, " (a tensor joins one group)"));
      }
    }
    const proto::TensorStrategy* entry = EntryFor(s, group.name());
    if (entry != nullptr && entry->scheme() != proto::SCHEME_PS) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " ('", group.name(), "'): its entry asks for ",
                       proto::Scheme_Name(entry->scheme()),
                       "; a fusion group travels over the parameter servers"));
    }
  }
  return absl::OkStatus();
}

absl::Status Validate(const proto::Strategy& s, absl::string_view source,
                      const TextProtoTree* tree) {
  if (s.min_compress_bytes() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": min_compress_bytes must be >= 0"));
  }
  for (int i = 0; i < s.tensors_size(); ++i) {
    const proto::TensorStrategy& t = s.tensors(i);
    const std::string entry = absl::StrCat("tensors[", i, "]");
    if (t.name_pattern().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(source, tree, s, i, "push_codec", "name"), entry, ".name_pattern: empty"));
    }
    if (t.partition_bytes() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(source, tree, s, i, "push_codec", "name"), entry, ".partition_bytes must be >= 0"));
    }
    for (const char* field : {"push_codec", "pull_codec"}) {
      const proto::CodecConfig& c =
          std::string(field) == "push_codec" ? t.push_codec() : t.pull_codec();
      absl::Status st = CheckCodec(c, absl::StrCat(entry, ".", field));
      if (!st.ok()) {
        const char* leaf = absl::StrContains(st.message(), "param") ? "params" : "name";
        if (absl::StrContains(st.message(), ".memory")) leaf = "memory";
        return absl::InvalidArgumentError(
            absl::StrCat(Where(source, tree, s, i, field, leaf), st.message()));
      }
    }
    const bool has_push = !t.push_codec().name().empty() && t.push_codec().name() != "none";
    const bool has_pull = !t.pull_codec().name().empty() && t.pull_codec().name() != "none";
    if (has_pull && !has_push) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(source, tree, s, i, "pull_codec", "name"), entry,
                       ".pull_codec: two-way compression "
                       "needs a push_codec"));
    }
    if (absl::Status st = CheckScheme(t); !st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(source, tree, s, i, "push_codec", "name"), entry, ".scheme ",
                       proto::Scheme_Name(t.scheme()), ": ", st.message()));
    }
    if (t.has_adaptive_ratio()) {
      if (absl::Status st = CheckAdaptiveRatio(t); !st.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(Where(source, tree, s, i, "push_codec", "name"), entry,
                         ".adaptive_ratio: ", st.message()));
      }
    }
  }
  if (absl::Status st = CheckFusionGroups(s); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", st.message()));
  }
  return absl::OkStatus();
}

}  // namespace

proto::AdaptiveRatio AdaptiveRatioWithDefaults(const proto::AdaptiveRatio& given) {
  proto::AdaptiveRatio a = given;
  if (a.window_rounds() == 0) a.set_window_rounds(20);
  if (a.raise_below_kept() == 0) a.set_raise_below_kept(0.05);
  if (a.lower_above_kept() == 0) a.set_lower_above_kept(0.5);
  if (a.min_comm_share() == 0) a.set_min_comm_share(0.1);
  if (a.step() == 0) a.set_step(2);
  return a;
}

absl::StatusOr<double> PushRatio(const proto::TensorStrategy& entry) {
  const std::string& name = entry.push_codec().name();
  const CodecSpec* spec = CodecRegistry::Global().Find(name);
  if (spec == nullptr)
    return absl::InvalidArgumentError(absl::StrCat("unknown codec '", name, "'"));
  absl::StatusOr<CodecParams> params = ValidateParams(absl::StrCat("codec '", name, "'"),
                                                      spec->params, ParamsOf(entry.push_codec()));
  if (!params.ok()) return params.status();
  auto it = params->find("ratio");
  double ratio = 0;
  if (it == params->end() || !ParseDoubleParam(it->second, &ratio)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the push codec '", name, "' has no ratio parameter to adapt"));
  }
  return ratio;
}

CodecParams ParamsOf(const proto::CodecConfig& config) {
  return CodecParams(config.params().begin(), config.params().end());
}

CodecParams MemoryParamsOf(const proto::CodecConfig& config) {
  return CodecParams(config.memory_params().begin(), config.memory_params().end());
}

proto::CodecConfig SparseUnionPullCodec() {
  proto::CodecConfig pull;
  pull.set_name("threshold");
  (*pull.mutable_params())["threshold"] = "0";
  return pull;
}

bool IsSparseUnionPull(const proto::CodecConfig& pull) {
  if (pull.name() != "threshold") return false;
  auto it = pull.params().find("threshold");
  double threshold = 0;
  return it != pull.params().end() && absl::SimpleAtod(it->second, &threshold) && threshold == 0;
}

absl::StatusOr<proto::Strategy> ParseStrategy(absl::string_view text, absl::string_view source) {
  proto::Strategy strategy;
  TextProtoTree tree;
  if (absl::Status s = ParseTextProto(text, source, &strategy, &tree); !s.ok()) return s;
  if (absl::Status s = Validate(strategy, source, &tree); !s.ok()) return s;
  if (strategy.min_compress_bytes() == 0) strategy.set_min_compress_bytes(kDefaultMinCompressBytes);
  return strategy;
}

absl::StatusOr<proto::Strategy> LoadStrategyFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadTextFile(path, "strategy file");
  if (!text.ok()) return text.status();
  return ParseStrategy(*text, path);
}

absl::Status ValidateStrategy(const proto::Strategy& strategy) {
  return Validate(strategy, "strategy", nullptr);
}

namespace {

// Gives `config` the tensor's row length as "cols" when its codec works on a matrix (it
// declares a "cols" parameter) and the strategy does not set it.
void SetRowLength(int64_t row_elements, proto::CodecConfig* config) {
  if (row_elements <= 0 || config->params().count("cols") > 0) return;
  const CodecSpec* spec = CodecRegistry::Global().Find(config->name());
  if (spec == nullptr) return;
  for (const CodecParamSpec& param : spec->params) {
    if (param.name == "cols") {
      (*config->mutable_params())["cols"] = absl::StrCat(row_elements);
      return;
    }
  }
}

}  // namespace

TensorPlan PlanFor(const proto::Strategy& strategy, absl::string_view tensor_name,
                   int64_t tensor_bytes, int64_t row_elements) {
  TensorPlan plan;
  plan.version = strategy.version();
  const proto::TensorStrategy* t = EntryFor(strategy, tensor_name);
  if (t == nullptr) return plan;
  plan.scheme = t->scheme();  // small tensors too: the scheme is not a compression
  const int64_t min_bytes =
      strategy.min_compress_bytes() > 0 ? strategy.min_compress_bytes() : kDefaultMinCompressBytes;
  if (tensor_bytes < min_bytes && !t->force()) return plan;
  plan.push = t->push_codec();
  plan.pull = t->pull_codec();
  // Two-way with the same codec: the server's re-encode gets the push's error feedback
  // unless the entry names its own memory ("none": none), whatever tool wrote the file.
  if (plan.two_way() && plan.pull.name() == plan.push.name() && plan.pull.memory().empty() &&
      !plan.push.memory().empty()) {
    plan.pull.set_memory(plan.push.memory());
    *plan.pull.mutable_memory_params() = plan.push.memory_params();
  }
  SetRowLength(row_elements, &plan.push);
  if (plan.two_way()) SetRowLength(row_elements, &plan.pull);
  plan.compress_on = t->compress_on();
  plan.decompress_on = t->decompress_on();
  if (t->has_adaptive_ratio()) {
    plan.ratio_window_rounds = AdaptiveRatioWithDefaults(t->adaptive_ratio()).window_rounds();
  }
  return plan;
}

bool SameFusionGroups(const proto::Strategy& a, const proto::Strategy& b) {
  if (a.fusion_groups_size() != b.fusion_groups_size()) return false;
  for (int g = 0; g < a.fusion_groups_size(); ++g) {
    if (a.fusion_groups(g).SerializeAsString() != b.fusion_groups(g).SerializeAsString()) {
      return false;
    }
  }
  return true;
}

absl::Status StrategyHistory::Add(const proto::Strategy& strategy) {
  if (!versions_.empty()) {
    const proto::Strategy& last = versions_.back();
    if (strategy.version() <= last.version()) {
      return absl::InvalidArgumentError(
          absl::StrCat("strategy version ", strategy.version(), " after version ", last.version()));
    }
    if (strategy.first_round() < last.first_round()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "strategy version ", strategy.version(), " starts at round ", strategy.first_round(),
          ", before version ", last.version(), " (round ", last.first_round(), ")"));
    }
  }
  versions_.push_back(strategy);
  return absl::OkStatus();
}

const proto::Strategy* StrategyHistory::ForRound(uint64_t round) const {
  for (auto it = versions_.rbegin(); it != versions_.rend(); ++it) {
    if (it->first_round() <= round) return &*it;
  }
  return nullptr;
}

const proto::Strategy* StrategyHistory::Version(uint64_t version) const {
  for (const proto::Strategy& s : versions_) {
    if (s.version() == version) return &s;
  }
  return nullptr;
}

}  // namespace bytecomp::compress
