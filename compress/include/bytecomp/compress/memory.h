// Memories: per-tensor state around a codec (error feedback, momentum correction), in GRACE's
// shape. One Memory instance serves one partition in one direction, kept where the encode runs
// (worker side for pushes, server side for the re-encoded pull). The call sequence per round:
//
//   memory->Compensate(gradient, ctx, compensated);           // before encode
//   size_t bytes = *codec->Encode(compensated, ctx, payload);
//   if (memory->needs_decoded()) codec->Decode(payload.first(bytes), ctx, decoded);
//   memory->Update(compensated, decoded, ctx);                 // after encode
//
// EncodeWithMemory below does exactly that.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "bytecomp/compress/codec.h"
#include "bytecomp/compress/spec_registry.h"

namespace bytecomp::compress {

class Memory {
 public:
  virtual ~Memory() = default;
  virtual absl::string_view name() const = 0;

  // compensated = what should be encoded this round, from input and the state. compensated
  // may alias input. The first call fixes the element count; a later call with another count
  // is an InvalidArgument error. Non-finite input is not checked here (the codec does).
  virtual absl::Status Compensate(absl::Span<const float> input, const CodecContext& ctx,
                                  absl::Span<float> compensated) = 0;

  // After encoding compensated: decoded = decode(encode(compensated)) (only read when
  // needs_decoded()). Updates the state.
  virtual absl::Status Update(absl::Span<const float> compensated, absl::Span<const float> decoded,
                              const CodecContext& ctx) = 0;

  // Whether Update reads `decoded` (so the caller must decode its own payload).
  virtual bool needs_decoded() const { return true; }

  // Drops the state (a new training phase, a changed strategy).
  virtual void Reset() = 0;

  // The state kept between rounds (residuals, momentum), for checkpoints; see SaveMemoryState.
  virtual std::vector<std::vector<float>*> StateVectors() { return {}; }
};

// A memory's state as bytes for a checkpoint, and back: u32 vector count, then per vector a u64
// length and its floats (little-endian). Loading checks the count and that every value is
// finite; a vector may be empty (no round yet) or of any length the memory then checks.
std::string SaveMemoryState(Memory& memory);
absl::Status LoadMemoryState(Memory& memory, absl::string_view state);

struct MemorySpec {
  std::string name;
  std::string summary;
  // What it does (codec.h): what compress/cuda fuses, what a codec's gpu_memories name.
  MemoryKind kind = MemoryKind::kNone;
  std::vector<CodecParamSpec> params;
  std::function<absl::StatusOr<std::unique_ptr<Memory>>(const CodecParams&)> factory;
};

class MemoryRegistry : public SpecRegistry<MemorySpec> {
 public:
  MemoryRegistry() : SpecRegistry("memory", "memories") {}

  // The registry with every built-in memory.
  static const MemoryRegistry& Global();

  // (SpecRegistry: Register, Find, Names, Create: the same validation as CodecRegistry's.)
};

// Shorthand for MemoryRegistry::Global().Create(name, params). Names:
//   none          no state: compensated = input.
//   residual      error feedback (GRACE ResidualMemory, BytePS vanilla error feedback):
//                 compensated = beta * residual + gamma * input; residual = compensated -
//                 decoded. Parameters beta (1.0), gamma (1.0). With beta = gamma = 1:
//                 decoded + new residual == input + old residual.
//   dgc_momentum  DGC momentum correction with masking (GRACE DgcMemory): u = momentum * u +
//                 input; v = v + u; compensated = v; after encode, u and v are zeroed at the
//                 transmitted coordinates (those where decoded != 0). Parameter momentum (0.9).
// efsignsgd and powersgd (memory for their codecs) are registered by the sign and low-rank
// codec sources.
absl::StatusOr<std::unique_ptr<Memory>> CreateMemory(absl::string_view name,
                                                     const CodecParams& params = {});

// Compensate, encode, decode if the memory needs it, update. memory may be null (plain
// encode). compensated and decoded are the caller's scratch buffers, resized to n as needed,
// so that a pipeline stage reuses them across rounds. Returns the payload size.
absl::StatusOr<size_t> EncodeWithMemory(Codec& codec, Memory* memory, absl::Span<const float> input,
                                        const CodecContext& ctx, absl::Span<uint8_t> out,
                                        std::vector<float>& compensated,
                                        std::vector<float>& decoded);

// registry.MustRegister(spec): register, aborting on a duplicate name or a bad default.
inline void MustRegisterMemory(MemoryRegistry& registry, MemorySpec spec) {
  registry.MustRegister(std::move(spec));
}

// Registration hooks, called by MemoryRegistry::Global().
void RegisterBasicMemories(MemoryRegistry& registry);    // none, residual, dgc_momentum
void RegisterSignMemories(MemoryRegistry& registry);     // efsignsgd
void RegisterLowRankMemories(MemoryRegistry& registry);  // powersgd

}  // namespace bytecomp::compress
