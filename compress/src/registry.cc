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

}  // namespace bytecomp::compress
