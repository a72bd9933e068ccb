#include "bytecomp/compress/gpu_codecs.h"

#include <algorithm>

namespace bytecomp::compress {

std::vector<std::string> GpuCodecNames() {
  return {"fp16", "bf16", "signsgd", "efsignsgd", "signum", "onebit",
          "topk", "randomk", "qsgd", "terngrad", "natural", "dgc"};
}

bool HasGpuCodec(absl::string_view codec) {
  const std::vector<std::string> names = GpuCodecNames();
  return std::find(names.begin(), names.end(), codec) != names.end();
}

bool GpuMemorySupported(absl::string_view codec, absl::string_view memory) {
  if (memory.empty() || memory == "none") return true;
  if (memory == "efsignsgd") return codec == "efsignsgd";
  if (memory == "dgc_momentum") return codec == "dgc";
  if (memory == "residual") return codec != "signum" && codec != "dgc";
  return false;
}

}  // namespace bytecomp::compress
