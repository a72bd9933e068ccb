// terngrad (Wen et al.): {-1, 0, +1} times a scale, drawn stochastically after clipping.
// Payload: format/terngrad_format.h, shared with the CUDA codec.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>
#include "exact_float_math.h"  // first: see there

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/terngrad_format.h"
#include "bytecomp/compress/params.h"
#include "bytecomp/compress/registry.h"
#include "codec_checks.h"
#include "param_specs.h"
#include "quant_codecs.h"
#include "quant_kernels.h"
#include "quant_pack.h"
#include "simd_kernel.h"

namespace bytecomp::compress {
namespace {

// Four elements per output byte (PackTernary4's layout). In L1-sized blocks: the codes of
// contiguous elements into a byte array (a plain vector loop), then four bytes at a time
// packed into one (the same bits as PackTernary4). Code loads of x[4g + j] across groups would
// gather element by element instead.
BYTECOMP_SIMD_KERNEL(void, TernEncode,
                     (const float* __restrict x, size_t n, float clip, float scale,
                      CounterRandom random, uint8_t* __restrict out),
                     (x, n, clip, scale, random, out)) {
  constexpr uint32_t kBlock = 2048;  // a multiple of 4: every block starts on a byte
  alignas(64) uint8_t codes[kBlock];
  const uint32_t count = static_cast<uint32_t>(n);  // 32-bit counters: see qsgd
  for (uint32_t begin = 0; begin < count; begin += kBlock) {
    const uint32_t len = count - begin < kBlock ? count - begin : kBlock;
    const float* xb = x + begin;
    for (uint32_t i = 0; i < len; ++i) {
      codes[i] =
          static_cast<uint8_t>(TernaryCode(xb[i], clip, scale, UniformFloat(random, begin + i)));
    }
    const uint32_t groups = len / 4;
    uint8_t* ob = out + begin / 4;
    for (uint32_t g = 0; g < groups; ++g) {
      uint32_t w;  // codes 4g..4g+3 in bytes 0..3 (little-endian, as quant_pack.cc), each < 4
      __builtin_memcpy(&w, codes + 4 * g, 4);
      ob[g] = static_cast<uint8_t>((w & 0x3u) | ((w >> 6) & 0xcu) | ((w >> 12) & 0x30u) |
                                   ((w >> 18) & 0xc0u));
    }
    if (len % 4 != 0) {
      uint32_t c[4] = {0, 0, 0, 0};
      for (uint32_t i = groups * 4; i < len; ++i) c[i % 4] = codes[i];
      ob[groups] = PackTernary4(c[0], c[1], c[2], c[3]);
    }
  }
}

// TernEncode with AVX-512 by hand, 16 elements a step: the random bits advanced by an
// addition (RandomBits16), the codes straight from the two compare masks into the payload's
// 32 bits (a bit deposit each for the +1 and -1 codes), no code array. The same IEEE
// operations as TernaryCode, so the same bytes.
[[gnu::target("arch=x86-64-v4")]] void TernEncodeAvx512Masks(const float* __restrict x, size_t n,
                                                             float clip, float scale,
                                                             CounterRandom random,
                                                             uint8_t* __restrict out) {
  RandomBits16 bits(random, 0);
  const __m512 clip16 = _mm512_set1_ps(clip);
  const __m512 scale16 = _mm512_set1_ps(scale);
  const __m512 zero = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    PrefetchLineAhead(x + i);
    const __m512 uniform = UniformFromBits16(bits.Next());
    const __m512 v = _mm512_loadu_ps(x + i);
    // min(|x|, clip) / scale; both finite, so vminps is the select of TernaryCode.
    const __m512 probability = _mm512_div_ps(_mm512_min_ps(_mm512_abs_ps(v), clip16), scale16);
    const uint32_t kept = _mm512_cmp_ps_mask(uniform, probability, _CMP_LT_OQ);  // NaN: false
    const uint32_t negative = _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ);
    const uint32_t word =
        _pdep_u32(kept & ~negative, 0x55555555u) | _pdep_u32(kept & negative, 0xaaaaaaaau);
    __builtin_memcpy(out + i / 4, &word, 4);
  }
  uint32_t c[16] = {};
  const uint32_t count = static_cast<uint32_t>(n);
  for (uint32_t j = static_cast<uint32_t>(i); j < count; ++j) {
    c[j - i] = TernaryCode(x[j], clip, scale, UniformFloat(random, j));
  }
  for (size_t g = 0; 4 * g < n - i; ++g) {
    out[i / 4 + g] = PackTernary4(c[4 * g], c[4 * g + 1], c[4 * g + 2], c[4 * g + 3]);
  }
}

// Whether any 2-bit code in the bytes is 3 (invalid).
BYTECOMP_SIMD_KERNEL(bool, HasTernaryCode3, (const uint8_t* in, size_t bytes), (in, bytes)) {
  uint8_t any = 0;
  for (size_t i = 0; i < bytes; ++i) any |= in[i] & (in[i] >> 1) & 0x55u;  // terngrad::HasCode3
  return any != 0;
}

// Every byte (four codes, none of them 3: checked before) to its four values in one 16-byte
// copy from a table of the 256 bytes' values: one pass over the codes, no code array.
struct TernaryGroups {
  alignas(16) float values[256][4];
  explicit TernaryGroups(float scale) {
    for (uint32_t b = 0; b < 256; ++b) {
      for (uint32_t j = 0; j < 4; ++j) {
        values[b][j] = TernaryValue(UnpackTernary(static_cast<uint8_t>(b), j), scale);
      }
    }
  }
};

void TernDecode(const uint8_t* __restrict codes, size_t n, float scale, float* __restrict out) {
  if (n < 4096) {  // the table would cost more than it saves
    for (size_t i = 0; i < n; ++i) out[i] = TernaryValue(UnpackTernary(codes[i / 4], i % 4), scale);
    return;
  }
  const TernaryGroups table(scale);
  const size_t groups = n / 4;
  if (StreamOutput(out, n)) {
    for (size_t g = 0; g < groups; ++g)
      _mm_stream_ps(out + 4 * g, _mm_load_ps(table.values[codes[g]]));
    StreamDone();
  } else {
    for (size_t g = 0; g < groups; ++g) std::memcpy(out + 4 * g, table.values[codes[g]], 16);
  }
  for (size_t i = groups * 4; i < n; ++i) out[i] = table.values[codes[groups]][i % 4];
}

class TernGradCodec final : public Codec {
 public:
  absl::string_view name() const override { return "terngrad"; }
  CodecProperties properties() const override {
    CodecProperties p;
    p.unbiased = true;  // for the clipped input
    return p;
  }
  size_t MaxEncodedBytes(size_t n) const override { return terngrad::PayloadBytes(n); }

  absl::StatusOr<size_t> Encode(absl::Span<const float> input, const CodecContext& ctx,
                                absl::Span<uint8_t> out) override {
    const size_t n = input.size();
    const size_t bytes = MaxEncodedBytes(n);
    if (auto s = codec_checks::CheckEncodeCall(*this, n, out.size()); !s.ok()) return s;
    const SquaresAndMax stats = SumOfSquaresAndMaxAbs(input.data(), n);
    if (!IsFiniteBits(stats.max_abs_bits)) {
      return NonFiniteError(input, codec_checks::InputWhat(name()));
    }
    const terngrad::ClipScale cs =
        terngrad::ClipAndScale(stats.sum_of_squares, n, stats.max_abs_bits);
    PutU32(out.data(), static_cast<uint32_t>(n));
    PutF32(out.data() + 4, cs.scale);
    if (CpuSimdLevel() == SimdLevel::kAvx512) {
      TernEncodeAvx512Masks(input.data(), n, cs.clip, cs.scale, StreamOf(ctx), out.data() + 8);
    } else {
      TernEncode(input.data(), n, cs.clip, cs.scale, StreamOf(ctx), out.data() + 8);
    }
    return bytes;
  }

  absl::Status Decode(absl::Span<const uint8_t> encoded, const CodecContext&,
                      absl::Span<float> output) override {
    const size_t n = output.size();
    auto scale = codec_checks::ReadHeaderValueAfterCount(*this, encoded, n, kScaleValue);
    if (!scale.ok()) return scale.status();
    const uint8_t* codes = encoded.data() + 8;
    if (HasTernaryCode3(codes, terngrad::CodeBytes(n))) {
      return FormatErrorStatus(name(), MakeFormatError(FormatErrorCode::kTernaryCode3));
    }
    if (!terngrad::PaddingIsZero(codes, n)) {
      return FormatErrorStatus(name(), MakeFormatError(FormatErrorCode::kCodePaddingNotZero));
    }
    TernDecode(codes, n, *scale, output.data());
    return absl::OkStatus();
  }
};

}  // namespace

void RegisterTernGradCodec(CodecRegistry& registry) {
  CodecSpec spec = ParameterlessSpec<TernGradCodec>(
      "terngrad", "{-1, 0, +1} times a scale, stochastic, after clipping at 2.5 sigma");
  spec.facts = {.gpu_kernel = true,
                .gpu_memories = {MemoryKind::kResidual},
                .encode_target = EncodeSpeedTarget::kElementwise};
  MustRegister(registry, std::move(spec));
}

}  // namespace bytecomp::compress
