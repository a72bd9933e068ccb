// The registry of the CUDA codecs (private to compress/cuda), keyed by codec name as the CPU
// registry is (compress/registry.h), through the same SpecRegistry: each codec family's
// source registers its classes under the CPU codecs' names, which also gives them the CPU
// codecs' parameters (names, defaults, ranges). CudaCodec::Create (registry.cc) checks the
// name and memory against gpu_codecs.h and asks this registry.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bytecomp/compress/codec.h"
#include "bytecomp/compress/cuda_codecs.h"
#include "bytecomp/compress/params.h"
#include "bytecomp/compress/spec_registry.h"
#include "fused_memory_settings.h"

namespace bytecomp::compress::cuda {

struct CudaCodecSpec {
  std::string name;
  std::vector<CodecParamSpec> params;  // the CPU codec's
  // Builds an initialised codec from validated, defaults-filled parameters and the memory to
  // fuse (which gpu_codecs.h allows for this codec).
  std::function<absl::StatusOr<std::unique_ptr<CudaCodec>>(const CodecParams&,
                                                           const FusedMemorySettings&)>
      factory;
};

class CudaCodecRegistry : public SpecRegistry<CudaCodecSpec> {
 public:
  CudaCodecRegistry() : SpecRegistry("codec", "GPU codecs") {}

  // Every codec of gpu_codecs.h GpuCodecNames(), each registered once (checked when built).
  static const CudaCodecRegistry& Global();

  // Registers `make` under `name`, with the parameters of the CPU codec of that name.
  using Factory = std::function<absl::StatusOr<std::unique_ptr<CudaCodec>>(
      const CodecParams&, const FusedMemorySettings&)>;
  void MustRegisterLikeCpu(const std::string& name, Factory make);
};

// Makes a CodecT(args...) and initialises it (CudaCodecBase::Init).
template <typename CodecT, typename... Args>
absl::StatusOr<std::unique_ptr<CudaCodec>> MakeCudaCodec(Args&&... args) {
  auto codec = std::make_unique<CodecT>(std::forward<Args>(args)...);
  if (absl::Status s = codec->Init(); !s.ok()) return s;
  return std::unique_ptr<CudaCodec>(std::move(codec));
}

// The factory of a codec whose one parameter is a double (the ratio of topk, dgc, adaq;
// threshold's threshold): reads it and makes CodecT(memory, value).
template <typename CodecT>
CudaCodecRegistry::Factory DoubleParamFactory(std::string param) {
  return [param](const CodecParams& params,
                 const FusedMemorySettings& m) -> absl::StatusOr<std::unique_ptr<CudaCodec>> {
    ParamReader r(params);
    const double value = r.Double(param);
    if (!r.ok()) return r.status();
    return MakeCudaCodec<CodecT>(m, value);
  };
}
template <typename CodecT>
CudaCodecRegistry::Factory RatioFactory() {
  return DoubleParamFactory<CodecT>("ratio");
}

// Registration hooks, one per family source, called by CudaCodecRegistry::Global().
void RegisterBasicCudaCodecs(CudaCodecRegistry& registry);       // fp16, bf16: basic_kernels.cu
void RegisterSignCudaCodecs(CudaCodecRegistry& registry);        // signsgd, efsignsgd, signum,
                                                                 // onebit: sign_kernels.cu
void RegisterQuantCudaCodecs(CudaCodecRegistry& registry);       // qsgd, terngrad, natural:
                                                                 // quant_kernels.cu
void RegisterMoreQuantCudaCodecs(CudaCodecRegistry& registry);   // u8bit, dithering,
                                                                 // inceptionn, sketch:
                                                                 // quant_more_kernels.cu
void RegisterSparseCudaCodecs(CudaCodecRegistry& registry);      // topk, randomk, dgc:
                                                                 // sparse_kernels.cu
void RegisterLowRankCudaCodecs(CudaCodecRegistry& registry);     // powersgd: lowrank_kernels.cu
void RegisterMoreSparseCudaCodecs(CudaCodecRegistry& registry);  // threshold, adaq,
                                                                 // blocksparse:
                                                                 // sparse_more_kernels.cu
void RegisterArtopkCudaCodec(CudaCodecRegistry& registry);       // artopk_kernels.cu

}  // namespace bytecomp::compress::cuda
