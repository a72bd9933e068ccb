// natural compression (Horvath et al.): stochastic rounding of |x| to a power of two; sign and
// exponent in a byte. Payload: format/natural_format.h, shared with the CUDA codec.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>
#include "exact_float_math.h"  // first: see there

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/natural_format.h"
#include "bytecomp/compress/params.h"
#include "bytecomp/compress/registry.h"
#include "codec_checks.h"
#include "param_specs.h"
#include "quant_codecs.h"
#include "quant_kernels.h"

namespace bytecomp::compress {
namespace {

// Elements a block of the one-pass encode (NaturalEncodeBlocks).
constexpr uint32_t kNaturalBlock = 2048;

// One pass over x, in blocks: a block's largest |x| (read again from L1), the exponent base
// of the largest |x| so far (a provisional exponent_low), the block's codes with it. Returns
// the largest |x| bit pattern (non-finite: stopped there). block_low[b] is block b's base.
__attribute__((target_clones("avx2", "default"))) uint32_t NaturalEncodeBlocks(
    const float* __restrict x, size_t n, CounterRandom random, uint8_t* __restrict out,
    uint8_t* __restrict block_low) {
  const uint32_t count = static_cast<uint32_t>(n);  // 32-bit counters: see qsgd
  uint32_t running = 0;
  for (uint32_t begin = 0, b = 0; begin < count; begin += kNaturalBlock, ++b) {
    const uint32_t end = count - begin < kNaturalBlock ? count : begin + kNaturalBlock;
    // The block's largest |x| (size_t offsets from the block: uint32 ones could wrap, which
    // keeps the compiler from loading x[i + j] as one vector).
    const float* xb = x + begin;
    const size_t len = end - begin;
    uint32_t lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
      for (size_t j = 0; j < 8; ++j) {
        const uint32_t bits = FloatBits(xb[i + j]) & 0x7fffffffu;
        lanes[j] = bits > lanes[j] ? bits : lanes[j];
      }
    }
    for (; i < len; ++i) {
      const uint32_t bits = FloatBits(xb[i]) & 0x7fffffffu;
      lanes[0] = bits > lanes[0] ? bits : lanes[0];
    }
    for (uint32_t l : lanes) running = l > running ? l : running;
    if (running >= 0x7f800000u) return running;
    const uint32_t low = NaturalExponentLow(running >> 23);
    block_low[b] = static_cast<uint8_t>(low);
    for (uint32_t e = begin; e < end; ++e) out[e] = NaturalCode(x[e], low, RandomBits(random, e));
  }
  return running;
}

// Recodes a block coded with a lower exponent base for the final one (delta = final - low >
// 0). A code above the base, c >= delta + 2, is the same rounded exponent: c - delta. Code 0
// stays 0 (the element lies below both bases, and its probability under the higher one is
// smaller). Codes 1..delta + 1 are near or below the final base: coded again from x.
__attribute__((target_clones("avx2", "default"))) void NaturalRebase(
    const float* __restrict x, uint32_t begin, uint32_t end, uint32_t delta, uint32_t low,
    CounterRandom random, uint8_t* __restrict out) {
  bool again = false;
  for (uint32_t i = begin; i < end; ++i) {
    const uint32_t c = out[i] & 0x7fu;
    const bool shifted = c >= delta + 2u;
    again |= c != 0u && !shifted;
    out[i] = shifted ? static_cast<uint8_t>(out[i] - delta) : out[i];
  }
  if (!again) return;
  for (uint32_t i = begin; i < end; ++i) {
    const uint32_t c = out[i] & 0x7fu;
    if (c != 0u && c < delta + 2u) out[i] = NaturalCode(x[i], low, RandomBits(random, i));
  }
}

// Largest 7-bit code, and whether a "negative zero" byte (0x80, never written) is present.
__attribute__((target_clones("avx2", "default"))) uint32_t NaturalMaxCode(const uint8_t* in,
                                                                          size_t n,
                                                                          bool* negative_zero) {
  uint8_t m = 0;
  uint8_t nz = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t c = in[i] & 0x7fu;
    m = c > m ? c : m;
    nz |= in[i] == 0x80u ? 1u : 0u;
  }
  *negative_zero = nz != 0;
  return m;
}

__attribute__((target_clones("avx2", "default"))) void NaturalDecode(const uint8_t* __restrict in,
                                                                     size_t n,
                                                                     uint32_t exponent_low,
                                                                     float* __restrict out) {
  for (size_t i = 0; i < n; ++i) out[i] = NaturalValue(in[i], exponent_low);
}

class NaturalCodec final : public Codec {
 public:
  absl::string_view name() const override { return "natural"; }
  CodecProperties properties() const override {
    CodecProperties p;
    p.unbiased = true;
    return p;
  }
  size_t MaxEncodedBytes(size_t n) const override { return natural::PayloadBytes(n); }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext& ctx,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    if (auto s = codec_checks::CheckEncodeCall(*this, n, out.size()); !s.ok()) return s;
    // One pass with the exponent base of the largest |x| so far, then the blocks coded with a
    // base below the final one recoded from their codes (their bytes only, unless an element
    // lies near the final base): the same codes as coding with the final base throughout.
    const CounterRandom random = StreamOf(ctx);
    uint8_t* const codes = out.data() + 1;
    block_low_.resize((n + kNaturalBlock - 1) / kNaturalBlock);
    const uint32_t max_bits = NaturalEncodeBlocks(input.data(), n, random, codes, block_low_.data());
    if (!IsFiniteBits(max_bits)) return NonFiniteError(input, codec_checks::InputWhat(name()));
    const uint32_t exponent_low = NaturalExponentLow(max_bits >> 23);
    for (size_t b = 0; b < block_low_.size(); ++b) {
      if (block_low_[b] == exponent_low) continue;
      const uint32_t begin = static_cast<uint32_t>(b * kNaturalBlock);
      const uint32_t end = static_cast<uint32_t>(std::min<size_t>(n, begin + kNaturalBlock));
      NaturalRebase(input.data(), begin, end, exponent_low - block_low_[b], exponent_low, random,
                    codes);
    }
    out[0] = static_cast<uint8_t>(exponent_low);
    return MaxEncodedBytes(n);
  }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                      absl::Span<float> output) override {
    const size_t n = output.size();
    FormatError e = CheckPayloadSize(encoded.size(), MaxEncodedBytes(n), n);
    const uint32_t exponent_low = e.ok() ? encoded[0] : 0;
    if (e.ok()) e = natural::CheckExponentLow(exponent_low);
    if (!e.ok()) return FormatErrorStatus(name(), e);
    // Blocks whose codes are checked and decoded while in L1: one pass over the payload. On a
    // bad code the whole payload's check says what is wrong, as one pass would.
    constexpr size_t kBlock = 4096;
    const uint8_t* const codes = encoded.data() + 1;
    for (size_t begin = 0; begin < n; begin += kBlock) {
      const size_t len = std::min(kBlock, n - begin);
      bool negative_zero = false;
      const uint32_t max_code = NaturalMaxCode(codes + begin, len, &negative_zero);
      if (!natural::CheckCodes(max_code, negative_zero, exponent_low).ok()) {
        const uint32_t all_max = NaturalMaxCode(codes, n, &negative_zero);
        return FormatErrorStatus(name(), natural::CheckCodes(all_max, negative_zero, exponent_low));
      }
      NaturalDecode(codes + begin, len, exponent_low, output.data() + begin);
    }
    return absl::OkStatus();
  }

 private:
  std::vector<uint8_t> block_low_;  // each block's provisional exponent base
};

}  // namespace

void RegisterNaturalCodec(CodecRegistry& registry) {
  CodecSpec spec = ParameterlessSpec<NaturalCodec>(
      "natural", "stochastic rounding to a power of two: sign and exponent in a byte");
  spec.facts = {.gpu_kernel = true,
                .gpu_memories = {MemoryKind::kResidual},
                .encode_target = EncodeSpeedTarget::kElementwise};
  MustRegister(registry, std::move(spec));
}

}  // namespace bytecomp::compress
