#include "codec_choice.h"

#include <cstdio>
#include <cstdlib>
#include <functional>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/logging.h"
#include "google/protobuf/stubs/logging.h"

namespace bytecomp::fuzz {
namespace {

// The registry's own check of one value.
bool Valid(const compress::CodecParamSpec& spec, const std::string& value) {
  return compress::ValidateParams("fuzz", {spec}, {{spec.name, value}}).ok();
}

constexpr double kMaxInt = 4096;
constexpr double kMaxDouble = 1000;

}  // namespace

std::vector<std::string> ParamCandidates(const compress::CodecParamSpec& spec) {
  using Type = compress::CodecParamSpec::Type;
  std::vector<std::string> values = {spec.default_value};
  auto add = [&](std::string v) {
    if (!Valid(spec, v)) return;
    for (const std::string& have : values) {
      if (have == v) return;
    }
    values.push_back(std::move(v));
  };
  switch (spec.type) {
    case Type::kBool:
      add("true");
      add("false");
      break;
    case Type::kString:
      for (const std::string& c : spec.choices) add(c);
      break;
    case Type::kInt:
      for (double v : {spec.min_value, spec.min_value + 1, spec.max_value, 0.0, 1.0, 2.0, 3.0, 4.0,
                       7.0, 8.0, 16.0, 31.0, 32.0, 64.0, 255.0, 256.0, 1024.0, kMaxInt}) {
        if (v >= -kMaxInt && v <= kMaxInt) add(absl::StrCat(int64_t(v)));
      }
      break;
    case Type::kDouble:
      for (double v : {spec.min_value, spec.max_value, 1e-6, 0.001, 0.01, 0.1, 0.25, 0.5, 0.9,
                       0.999, 1.0, 2.0, 8.0, 100.0, kMaxDouble, -1.0}) {
        if (v >= -kMaxDouble && v <= kMaxDouble) add(absl::StrCat(v));
      }
      break;
  }
  return values;
}

ChosenCodec ReadCodecChoice(FuzzInput& in) {
  const compress::CodecRegistry& registry = compress::CodecRegistry::Global();
  const std::vector<std::string> names = registry.Names();
  std::string name = in.String(32);
  if (registry.Find(name) == nullptr) name = names[std::hash<std::string>()(name) % names.size()];
  ChosenCodec chosen;
  chosen.spec = registry.Find(name);
  for (const compress::CodecParamSpec& p : chosen.spec->params) {
    const std::vector<std::string> candidates = ParamCandidates(p);
    chosen.params[p.name] = candidates[in.Pick(candidates.size())];
  }
  // Values that do not validate together (a range that depends on another parameter): the
  // defaults, which always do.
  if (!registry.Create(name, chosen.params).ok()) chosen.params.clear();
  return chosen;
}

void WriteCodecChoice(FuzzInputWriter& out, const std::string& name,
                      const std::vector<uint8_t>& choices) {
  out.String(name);
  const compress::CodecSpec* spec = compress::CodecRegistry::Global().Find(name);
  for (size_t i = 0; spec != nullptr && i < spec->params.size(); ++i) {
    out.U8(i < choices.size() ? choices[i] : 0);
  }
}

std::unique_ptr<compress::Codec> MakeCodec(const ChosenCodec& chosen) {
  absl::StatusOr<std::unique_ptr<compress::Codec>> codec =
      compress::CodecRegistry::Global().Create(chosen.spec->name, chosen.params);
  if (!codec.ok()) {
    std::fprintf(stderr, "codec '%s' with validated parameters failed: %s\n",
                 chosen.spec->name.c_str(), codec.status().ToString().c_str());
    std::abort();
  }
  return *std::move(codec);
}

compress::CodecContext ReadContext(FuzzInput& in) {
  compress::CodecContext ctx;
  ctx.key = in.U8();
  ctx.round = in.U8();
  ctx.node = in.U8();
  ctx.seed = in.U8();
  return ctx;
}

void WriteContext(FuzzInputWriter& out, const compress::CodecContext& ctx) {
  out.U8(static_cast<uint8_t>(ctx.key)).U8(static_cast<uint8_t>(ctx.round));
  out.U8(static_cast<uint8_t>(ctx.node)).U8(static_cast<uint8_t>(ctx.seed));
}

void RequireOkOrInvalidArgument(const absl::Status& status, const char* what) {
  if (status.ok() || absl::IsInvalidArgument(status)) return;
  std::fprintf(stderr, "%s: expected OK or InvalidArgument, got %s\n", what,
               status.ToString().c_str());
  std::abort();
}

void SilenceLogs() {
  SetLogLevel(static_cast<LogLevel>(static_cast<int>(LogLevel::kError) + 1));
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel, const char*, int, const std::string&) {});
}

}  // namespace bytecomp::fuzz
