// gpu_codecs.h from the codec specs' facts (CodecFacts::gpu_kernel, gpu_memories): the one
// table, which compress/cuda's registry checks against its registrations when it is built.
#include "bytecomp/compress/gpu_codecs.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bytecomp/compress/memory.h"
#include "bytecomp/compress/registry.h"
#include "bytecomp/compress/strategy.h"

namespace bytecomp::compress {

std::vector<std::string> GpuCodecNames() {
  std::vector<std::string> names;
  for (const std::string& name : CodecRegistry::Global().Names()) {
    if (HasGpuCodec(name)) names.push_back(name);
  }
  return names;
}

bool HasGpuCodec(absl::string_view codec) {
  const CodecFacts* facts = CodecFactsOf(codec);
  return facts != nullptr && facts->gpu_kernel;
}

bool GpuMemorySupported(absl::string_view codec, absl::string_view memory) {
  if (!HasGpuCodec(codec)) return false;
  if (IsNoneName(memory)) return true;
  const MemorySpec* spec = MemoryRegistry::Global().Find(memory);
  if (spec == nullptr) return false;
  const std::vector<MemoryKind>& fused = CodecFactsOf(codec)->gpu_memories;
  return std::find(fused.begin(), fused.end(), spec->kind) != fused.end();
}

std::string GpuMemoriesText() {
  std::vector<std::string> parts;
  for (const std::string& memory : MemoryRegistry::Global().Names()) {
    if (IsNoneName(memory)) continue;
    std::vector<std::string> codecs;
    for (const std::string& codec : GpuCodecNames()) {
      if (GpuMemorySupported(codec, memory)) codecs.push_back(codec);
    }
    if (!codecs.empty()) parts.push_back(absl::StrCat(memory, ": ", absl::StrJoin(codecs, ", ")));
  }
  return absl::StrJoin(parts, "; ");
}

}  // namespace bytecomp::compress
