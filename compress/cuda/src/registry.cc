// The CUDA codec registry and the door's functions (cuda_codecs.h): CudaCodec::Create checks
// the codec and memory against gpu_codecs.h (the CPU codecs' facts, plain C++, so the worker
// places stages the same way without CUDA) and builds through the registry, which each family
// source fills. The registry and those facts are checked against each other, both ways.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bytecomp/compress/cuda_codecs.h"
#include "bytecomp/compress/gpu_codecs.h"
#include "bytecomp/compress/memory.h"
#include "bytecomp/compress/params.h"
#include "bytecomp/compress/registry.h"
#include "cuda_registry.h"

namespace bytecomp::compress::cuda {

const CudaCodecRegistry& CudaCodecRegistry::Global() {
  static const CudaCodecRegistry* const registry = [] {
    auto* r = BuildRegistry<CudaCodecRegistry>(
        {RegisterBasicCudaCodecs, RegisterSignCudaCodecs, RegisterQuantCudaCodecs,
         RegisterMoreQuantCudaCodecs, RegisterSparseCudaCodecs, RegisterMoreSparseCudaCodecs,
         RegisterLowRankCudaCodecs, RegisterArtopkCudaCodec});
    // The facts (gpu_codecs.h) promise exactly these (the worker places stages by them);
    // MustRegisterLikeCpu refused any other.
    for (const std::string& name : GpuCodecNames()) {
      if (r->Find(name) == nullptr) {
        std::fprintf(stderr, "GPU codec '%s' has no CUDA registration\n", name.c_str());
        std::abort();
      }
    }
    return r;
  }();
  return *registry;
}

void CudaCodecRegistry::MustRegisterLikeCpu(const std::string& name, Factory make) {
  const CodecSpec* cpu = CodecRegistry::Global().Find(name);
  if (cpu == nullptr || !cpu->facts.gpu_kernel) {
    std::fprintf(stderr, "CUDA codec '%s' is not a CPU codec whose facts say gpu_kernel\n",
                 name.c_str());
    std::abort();
  }
  CudaCodecSpec spec;
  spec.name = name;
  spec.params = cpu->params;
  spec.factory = std::move(make);
  MustRegister(std::move(spec));
}

absl::StatusOr<FusedMemorySettings> ReadFusedMemory(absl::string_view memory,
                                                    const CodecParams& params) {
  if (memory.empty()) memory = "none";
  const MemorySpec* spec = MemoryRegistry::Global().Find(memory);
  if (spec == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unknown memory '", memory, "'"));
  }
  auto filled = ValidateParams(absl::StrCat("memory '", memory, "'"), spec->params, params);
  if (!filled.ok()) return filled.status();
  ParamReader r(*filled);
  FusedMemorySettings s;
  s.kind = spec->kind;
  switch (spec->kind) {
    case MemoryKind::kNone:
      break;
    case MemoryKind::kResidual:
      s.beta = static_cast<float>(r.Double("beta"));
      s.gamma = static_cast<float>(r.Double("gamma"));
      break;
    case MemoryKind::kEfSignSgd:
      s.default_lr = static_cast<float>(r.Double("lr"));
      break;
    case MemoryKind::kDgcMomentum:
      s.momentum = static_cast<float>(r.Double("momentum"));
      break;
    case MemoryKind::kPowerSgd:  // no parameters
      break;
  }
  if (!r.ok()) return r.status();
  return s;
}

std::vector<std::string> CudaCodecNames() { return GpuCodecNames(); }

bool CudaMemorySupported(absl::string_view codec, absl::string_view memory) {
  return GpuMemorySupported(codec, memory);
}

CudaCodec::~CudaCodec() = default;

CudaTwoRoundCodec* AsCudaTwoRound(CudaCodec& codec) {
  return dynamic_cast<CudaTwoRoundCodec*>(&codec);
}

absl::StatusOr<std::unique_ptr<CudaCodec>> CudaCodec::Create(absl::string_view codec,
                                                             const CodecParams& params,
                                                             absl::string_view memory,
                                                             const CodecParams& memory_params) {
  if (!HasGpuCodec(codec)) {
    return absl::NotFoundError(absl::StrCat("no CUDA kernels for codec '", codec, "'; GPU codecs: ",
                                            absl::StrJoin(GpuCodecNames(), ", ")));
  }
  if (!GpuMemorySupported(codec, memory)) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA codec '", codec, "' cannot fuse memory '",
                                                   memory, "' (", GpuMemoriesText(), ")"));
  }
  auto settings = ReadFusedMemory(memory, memory_params);
  if (!settings.ok()) return settings.status();
  return CudaCodecRegistry::Global().Create(codec, params, *settings);
}

}  // namespace bytecomp::compress::cuda
