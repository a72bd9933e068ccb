// Codecs by name. Names and defaults follow GRACE and BytePS (shared/ANCHORS.md).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bytecomp/compress/codec.h"

namespace bytecomp::compress {

class CodecRegistry {
 public:
  // The registry with every built-in codec.
  static const CodecRegistry& Global();

  absl::Status Register(CodecSpec spec);
  // nullptr if unknown.
  const CodecSpec* Find(absl::string_view name) const;
  std::vector<std::string> Names() const;

  // Validates params against the spec (unknown parameter, wrong type, out of range: an error
  // listing the valid parameters with their types and defaults), fills defaults, builds.
  // An unknown codec name is an error listing every valid name.
  absl::StatusOr<std::unique_ptr<Codec>> Create(absl::string_view name,
                                                const CodecParams& params) const;

 private:
  std::vector<CodecSpec> specs_;
};

// Shorthand for CodecRegistry::Global().Create(name, params).
absl::StatusOr<std::unique_ptr<Codec>> CreateCodec(absl::string_view name,
                                                   const CodecParams& params = {});

// Register, aborting with the error on failure (a duplicate name or a default that fails its
// own validation is a programming error, found by the first test that runs).
void MustRegister(CodecRegistry& registry, CodecSpec spec);

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

// Registration hooks, one per family, called by CodecRegistry::Global() (explicit calls, not
// static initialisers, which a static library would drop).
void RegisterBasicCodecs(CodecRegistry& registry);         // none, fp16, bf16
void RegisterSparsificationCodecs(CodecRegistry& registry); // topk, randomk, threshold, dgc, adaq
void RegisterQuantizationCodecs(CodecRegistry& registry);  // qsgd, terngrad, natural, u8bit,
                                                            // dithering, sketch, inceptionn
void RegisterSignCodecs(CodecRegistry& registry);          // signsgd, efsignsgd, signum, onebit
void RegisterLowRankCodecs(CodecRegistry& registry);       // powersgd

}  // namespace bytecomp::compress
