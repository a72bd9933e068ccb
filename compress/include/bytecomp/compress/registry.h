// Codecs by name. Names and defaults follow GRACE and BytePS (shared/ANCHORS.md).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bytecomp/compress/codec.h"
#include "bytecomp/compress/spec_registry.h"

namespace bytecomp::compress {

class CodecRegistry : public SpecRegistry<CodecSpec> {
 public:
  CodecRegistry() : SpecRegistry("codec", "codecs") {}

  // The registry with every built-in codec.
  static const CodecRegistry& Global();

  // (SpecRegistry: Register, Find, Names, and Create(name, params), which validates params
  // against the spec, fills defaults and builds; an unknown name lists every valid one.)
};

// Shorthand for CodecRegistry::Global().Create(name, params).
absl::StatusOr<std::unique_ptr<Codec>> CreateCodec(absl::string_view name,
                                                   const CodecParams& params = {});

// The facts of the registered codec `codec` (codec.h CodecFacts); nullptr for an unknown name.
const CodecFacts* CodecFactsOf(absl::string_view codec);

// Whether codec `name` with `params` loses nothing: its loss is CodecLoss::kNone, or its
// lossless_when holds for the params with the defaults filled in (not validated otherwise: a
// value lossless_when cannot read is not lossless). False for an unknown name.
bool CodecIsLossless(absl::string_view name, const CodecParams& params);

// registry.MustRegister(spec): register, aborting on a duplicate name or a bad default.
inline void MustRegister(CodecRegistry& registry, CodecSpec spec) {
  registry.MustRegister(std::move(spec));
}

// The spec of a codec without parameters, built as `new CodecT()`.
template <typename CodecT>
CodecSpec ParameterlessSpec(std::string name, std::string summary) {
  CodecSpec spec;
  spec.name = std::move(name);
  spec.summary = std::move(summary);
  spec.factory = [](const CodecParams&) -> absl::StatusOr<std::unique_ptr<Codec>> {
    return std::unique_ptr<Codec>(new CodecT());
  };
  return spec;
}

// Registration hooks, one per family, called by CodecRegistry::Global() (BuildRegistry).
void RegisterBasicCodecs(CodecRegistry& registry);           // none, fp16, bf16
void RegisterSparsificationCodecs(CodecRegistry& registry);  // topk, randomk, threshold, dgc, adaq,
                                                             // blocksparse, artopk
void RegisterQuantizationCodecs(CodecRegistry& registry);    // qsgd, terngrad, natural, u8bit,
                                                             // dithering, sketch, inceptionn
void RegisterSignCodecs(CodecRegistry& registry);            // signsgd, efsignsgd, signum, onebit
void RegisterLowRankCodecs(CodecRegistry& registry);         // powersgd

}  // namespace bytecomp::compress
