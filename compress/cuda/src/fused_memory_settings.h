// Which memory a CUDA codec fuses into its encode, with its parameters (private to
// compress/cuda; host code, read by the registry, used by fused_memory.h).
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bytecomp/compress/codec.h"

namespace bytecomp::compress::cuda {

// A memory's kind (codec.h MemoryKind, its MemorySpec's) and parameters (memory.h names and
// defaults).
struct FusedMemorySettings {
  MemoryKind kind = MemoryKind::kNone;
  float beta = 1.0f, gamma = 1.0f;  // residual
  float default_lr = 0.1f;          // efsignsgd (CodecContext::learning_rate overrides it)
  float momentum = 0.9f;            // dgc_momentum
};

// The memory named `memory` ("" is "none") with its parameters, validated as the CPU memory
// registry validates them (registry.cc); one that no kernel fuses is an error.
absl::StatusOr<FusedMemorySettings> ReadFusedMemory(absl::string_view memory,
                                                    const CodecParams& params);

}  // namespace bytecomp::compress::cuda
