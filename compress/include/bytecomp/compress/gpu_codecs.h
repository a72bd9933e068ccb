// Which codecs and fused memories have GPU kernels (compress/cuda), as the codecs' specs say
// (CodecFacts::gpu_kernel, gpu_memories). Plain C++, so the worker can decide a tensor's
// placement in builds without CUDA (and with the emulated device).
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace bytecomp::compress {

// In registration order: fp16, bf16, topk, randomk, threshold, dgc, adaq, blocksparse, artopk,
// qsgd, terngrad, natural, u8bit, dithering, sketch, inceptionn, signsgd, efsignsgd, signum,
// onebit, powersgd.
std::vector<std::string> GpuCodecNames();
bool HasGpuCodec(absl::string_view codec);

// The memories that can be fused with each codec: "none" (or "") always; "residual" with
// every codec but signum, dgc and powersgd; "efsignsgd" with efsignsgd; "dgc_momentum" with
// dgc; "powersgd" with powersgd. False for a codec without GPU kernels.
bool GpuMemorySupported(absl::string_view codec, absl::string_view memory);

// "residual: fp16, bf16, ...; dgc_momentum: dgc; efsignsgd: efsignsgd; powersgd: powersgd",
// for error messages.
std::string GpuMemoriesText();

}  // namespace bytecomp::compress
