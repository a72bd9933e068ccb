// Fuzz target: a Strategy file as the scheduler loads it (--strategy, SIGHUP) and as every
// node applies it: the whole input is the text. Parsed and validated (compress::ParseStrategy:
// syntax, codec and memory names, parameters against the registry); a strategy that passes
// is then applied as nodes do: validated again as it arrives over the wire, added to a
// history, planned for a few tensor names and sizes, and each codec it names is built with
// its memory and its server-side aggregator and encodes a small tensor.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bytecomp/compress.h"
#include "bytecomp/compress/strategy.h"
#include "codec_choice.h"

namespace {

void Apply(const bytecomp::proto::Strategy& strategy) {
  namespace compress = bytecomp::compress;
  if (!compress::ValidateStrategy(strategy).ok()) {
    std::fprintf(stderr, "a parsed strategy fails ValidateStrategy\n");
    std::abort();
  }
  compress::StrategyHistory history;
  (void)history.Add(strategy);
  for (const char* name : {"layer1.weight", "t1", "", "fc.bias"}) {
    for (int64_t bytes : {int64_t{4}, int64_t{1} << 20}) {
      const compress::TensorPlan plan = compress::PlanFor(strategy, name, bytes);
      for (const bytecomp::proto::CodecConfig* config : {&plan.push, &plan.pull}) {
        if (compress::IsNoneName(config->name())) continue;
        absl::StatusOr<std::unique_ptr<compress::Codec>> codec =
            compress::CreateCodec(config->name(), compress::ParamsOf(*config));
        if (!codec.ok()) {
          std::fprintf(stderr, "a validated strategy's codec fails: %s\n",
                       codec.status().ToString().c_str());
          std::abort();
        }
        std::unique_ptr<compress::Memory> memory;
        if (!config->memory().empty()) {
          absl::StatusOr<std::unique_ptr<compress::Memory>> made =
              compress::CreateMemory(config->memory(), compress::MemoryParamsOf(*config));
          if (!made.ok()) std::abort();
          memory = *std::move(made);
        }
        std::vector<float> input(257, 0.5f), compensated, decoded;
        input[3] = -2.0f;
        std::vector<uint8_t> out((*codec)->MaxEncodedBytes(input.size()));
        (void)compress::EncodeWithMemory(**codec, memory.get(), input, {.key = 1, .round = 1},
                                         absl::MakeSpan(out), compensated, decoded);
        (void)compress::CreateAggregator(config->name(), compress::ParamsOf(*config));
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  bytecomp::fuzz::SilenceLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<bytecomp::proto::Strategy> strategy =
      bytecomp::compress::ParseStrategy(text, "fuzz.pbtxt");
  if (strategy.ok()) {
    Apply(*strategy);
  } else if (!absl::IsInvalidArgument(strategy.status())) {
    std::fprintf(stderr, "ParseStrategy: %s\n", strategy.status().ToString().c_str());
    std::abort();
  }
  return 0;
}
