// A codec from the registry, with parameters, chosen by a fuzz input. Every registered codec
// can be chosen (CodecRegistry::Global().Names()), so a codec added to the registry is fuzzed
// without touching the targets; its seeds come from make_fuzz_seeds, which encodes with every
// registered codec too.
//
// Format (FuzzInput): String codec name (not a registered name: the name at its hash among
// the registered ones), then one u8 per declared parameter of that codec, in the spec's order,
// picking the parameter's value among ParamCandidates (0: its default).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bytecomp/compress.h"
#include "fuzz_input.h"

namespace bytecomp::fuzz {

struct ChosenCodec {
  const compress::CodecSpec* spec = nullptr;
  compress::CodecParams params;
};

// The values a parameter is tried with: its default first, then its bounds and choices and
// a few ordinary values inside its range. Bounded so that a codec stays fast: ints at most
// 4096, doubles at most 1000.
std::vector<std::string> ParamCandidates(const compress::CodecParamSpec& spec);

// Reads a choice. When the chosen values do not validate together, the codec's defaults.
ChosenCodec ReadCodecChoice(FuzzInput& in);
// Writes the choice of codec `name` with candidate `choices[i]` for parameter i (missing: 0).
void WriteCodecChoice(FuzzInputWriter& out, const std::string& name,
                      const std::vector<uint8_t>& choices = {});

// A fresh instance of the chosen codec (the registry validated the parameters).
std::unique_ptr<compress::Codec> MakeCodec(const ChosenCodec& chosen);

// The context a payload is decoded in: four u8 read as key, round, node and seed.
compress::CodecContext ReadContext(FuzzInput& in);
void WriteContext(FuzzInputWriter& out, const compress::CodecContext& ctx);

// Aborts (a fuzz finding) with `what` when status is not OK or not InvalidArgument: decoders
// must refuse bad bytes with InvalidArgument, anything else is a bug.
void RequireOkOrInvalidArgument(const absl::Status& status, const char* what);

// Drops every log line, errors included: a target's refusals of bad input are expected, and
// printing them would slow the fuzzer down many times.
void SilenceLogs();

}  // namespace bytecomp::fuzz
