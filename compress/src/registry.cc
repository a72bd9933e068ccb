#include "bytecomp/compress/registry.h"

namespace bytecomp::compress {

const CodecRegistry& CodecRegistry::Global() {
  static const CodecRegistry* const registry = BuildRegistry<CodecRegistry>(
      {RegisterBasicCodecs, RegisterSparsificationCodecs, RegisterQuantizationCodecs,
       RegisterSignCodecs, RegisterLowRankCodecs});
  return *registry;
}

absl::StatusOr<std::unique_ptr<Codec>> CreateCodec(absl::string_view name,
                                                   const CodecParams& params) {
  return CodecRegistry::Global().Create(name, params);
}

const CodecFacts* CodecFactsOf(absl::string_view codec) {
  const CodecSpec* spec = CodecRegistry::Global().Find(codec);
  return spec == nullptr ? nullptr : &spec->facts;
}

bool CodecIsLossless(absl::string_view name, const CodecParams& params) {
  const CodecSpec* spec = CodecRegistry::Global().Find(name);
  if (spec == nullptr) return false;
  if (spec->facts.loss == CodecLoss::kNone) return true;
  if (!spec->facts.lossless_when) return false;
  CodecParams filled = params;
  for (const CodecParamSpec& p : spec->params) filled.emplace(p.name, p.default_value);
  return spec->facts.lossless_when(filled);
}

}  // namespace bytecomp::compress
