#include "bytecomp/compress/gpu_codecs.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bytecomp/compress/strategy.h"

namespace bytecomp::compress {
namespace {

// The GPU codecs (compress/cuda registers a class under each name; it checks this table when
// its registry is built) and the memories each one fuses besides "none".
struct GpuCodecEntry {
  const char* name;
  std::vector<std::string> memories;
};

const std::vector<GpuCodecEntry>& GpuCodecTable() {
  static const std::vector<GpuCodecEntry>* const table = new std::vector<GpuCodecEntry>{
      {"fp16", {"residual"}},      {"bf16", {"residual"}},
      {"signsgd", {"residual"}},   {"efsignsgd", {"residual", "efsignsgd"}},
      {"signum", {}},              {"onebit", {"residual"}},
      {"topk", {"residual"}},      {"randomk", {"residual"}},
      {"qsgd", {"residual"}},      {"terngrad", {"residual"}},
      {"natural", {"residual"}},   {"dgc", {"dgc_momentum"}},
  };
  return *table;
}

const GpuCodecEntry* FindGpuCodec(absl::string_view codec) {
  for (const GpuCodecEntry& e : GpuCodecTable()) {
    if (codec == e.name) return &e;
  }
  return nullptr;
}

}  // namespace

std::vector<std::string> GpuCodecNames() {
  std::vector<std::string> names;
  for (const GpuCodecEntry& e : GpuCodecTable()) names.push_back(e.name);
  return names;
}

bool HasGpuCodec(absl::string_view codec) { return FindGpuCodec(codec) != nullptr; }

bool GpuMemorySupported(absl::string_view codec, absl::string_view memory) {
  const GpuCodecEntry* e = FindGpuCodec(codec);
  if (e == nullptr) return false;
  if (IsNoneName(memory)) return true;
  return std::find(e->memories.begin(), e->memories.end(), memory) != e->memories.end();
}

std::string GpuMemoriesText() {
  std::vector<std::string> parts;
  for (const char* memory : {"residual", "efsignsgd", "dgc_momentum"}) {
    std::vector<std::string> codecs;
    for (const GpuCodecEntry& e : GpuCodecTable()) {
      if (GpuMemorySupported(e.name, memory)) codecs.push_back(e.name);
    }
    parts.push_back(absl::StrCat(memory, ": ", absl::StrJoin(codecs, ", ")));
  }
  return absl::StrJoin(parts, "; ");
}

}  // namespace bytecomp::compress
