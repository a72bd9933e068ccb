// Fuzz target: every codec's decoders, on payloads as a peer sends them (a worker's push on
// a server, a server's pull reply on a worker). Input (fuzz_input.h): the codec and its
// parameters (codec_choice.h), the context (key, round, node, seed), u16 element count (at
// most kMaxElements), u8 misalignment (0 to 3 bytes), then the payload: the rest of the input.
//
// Beyond "no crash, no sanitizer report", it checks the decoders' contract (codec.h):
//   - Decode, DecodeAdd and AddEncodedValues return OK or InvalidArgument, nothing else;
//   - Decode and DecodeAdd agree on whether a payload is valid, and DecodeAdd adds exactly
//     what Decode returns;
//   - a refused payload leaves DecodeAdd's accumulator and AddEncodedValues' sum untouched
//     (the server's aggregation relies on it);
//   - summable codecs: expanding the values of one payload gives what Decode gives;
//   - two-round codecs (PowerSGD): the sums a worker pulls (EncodeSecond, DecodeSecond) of
//     any length and contents are taken or refused with InvalidArgument.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "codec_choice.h"
#include "fuzz_input.h"

namespace bytecomp::fuzz {
namespace {

constexpr size_t kMaxElements = 4096;

[[noreturn]] void Fail(const ChosenCodec& chosen, const char* what) {
  std::fprintf(stderr, "codec '%s': %s\n", chosen.spec->name.c_str(), what);
  std::abort();
}

bool SameFloat(float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); }

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Accumulator contents a real sum might hold: varied, finite, some zeros.
std::vector<float> StartingSum(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (i % 3 == 0) ? 0.0f : static_cast<float>(i) * 0.25f - 7.0f;
  return v;
}

void CheckDecoders(const ChosenCodec& chosen, absl::Span<const uint8_t> payload,
                   const compress::CodecContext& ctx, size_t n) {
  std::unique_ptr<compress::Codec> codec = MakeCodec(chosen);
  std::vector<float> decoded(n, -1.0f);
  const absl::Status decode = codec->Decode(payload, ctx, absl::MakeSpan(decoded));
  RequireOkOrInvalidArgument(decode, "Decode");

  const std::vector<float> before = StartingSum(n);
  std::vector<float> sum = before;
  // A fresh instance: a stateful codec must not see the payload twice.
  std::unique_ptr<compress::Codec> adder = MakeCodec(chosen);
  const absl::Status add = adder->DecodeAdd(payload, ctx, absl::MakeSpan(sum));
  RequireOkOrInvalidArgument(add, "DecodeAdd");
  if (decode.ok() != add.ok()) Fail(chosen, "Decode and DecodeAdd disagree on the payload");
  if (!add.ok()) {
    if (!SameBits(sum, before)) Fail(chosen, "a refused DecodeAdd changed the accumulator");
  } else {
    for (size_t i = 0; i < n; ++i) {
      if (!SameFloat(sum[i], before[i] + decoded[i])) {
        Fail(chosen, "DecodeAdd added something else than Decode returned");
      }
    }
  }

  if (codec->properties().summable_encoded) {
    std::unique_ptr<compress::Codec> summer = MakeCodec(chosen);
    const size_t length = summer->SummedLength(n, ctx);
    if (length > 64 * (n + 16)) Fail(chosen, "SummedLength out of proportion");
    std::vector<float> values(length, 0.0f);
    const absl::Status summed = summer->AddEncodedValues(payload, ctx, n, absl::MakeSpan(values));
    RequireOkOrInvalidArgument(summed, "AddEncodedValues");
    if (summed.ok() != decode.ok()) Fail(chosen, "Decode and AddEncodedValues disagree");
    if (!summed.ok()) {
      if (!SameBits(values, std::vector<float>(length, 0.0f))) {
        Fail(chosen, "a refused AddEncodedValues changed the sum");
      }
    } else {
      std::vector<float> expanded(n, -1.0f);
      const absl::Status expand = summer->ExpandSum(values, ctx, absl::MakeSpan(expanded));
      if (!expand.ok()) Fail(chosen, "ExpandSum refused the values of a valid payload");
      for (size_t i = 0; i < n; ++i) {
        const float tolerance = 1e-5f * (1.0f + std::fabs(decoded[i]));
        if (!(std::fabs(expanded[i] - decoded[i]) <= tolerance) &&
            !SameFloat(expanded[i], decoded[i])) {
          Fail(chosen, "ExpandSum of one payload's values differs from Decode");
        }
      }
    }
  }
}

// A worker's second PowerSGD step takes the servers' sum of the first payloads, and its
// last step the sum of the second ones: both come from the network.
void CheckTwoRound(const ChosenCodec& chosen, absl::Span<const uint8_t> payload,
                   const compress::CodecContext& ctx, size_t n) {
  std::unique_ptr<compress::Codec> codec = MakeCodec(chosen);
  compress::TwoRoundCodec* two = compress::AsTwoRound(*codec);
  if (two == nullptr) return;
  std::vector<float> sum(payload.size() / sizeof(float));
  if (!sum.empty()) std::memcpy(sum.data(), payload.data(), sum.size() * sizeof(float));
  std::vector<float> output(n);
  // Out of order first: refused, not a crash.
  (void)two->DecodeSecond(sum, ctx, absl::MakeSpan(output));
  std::vector<uint8_t> out(std::max(two->FirstRoundBytes(n), two->SecondRoundBytes(n)) + 64);
  (void)two->EncodeSecond(sum, ctx, absl::MakeSpan(out));

  const std::vector<float> input = StartingSum(n);
  if (!two->EncodeFirst(input, ctx, absl::MakeSpan(out)).ok()) return;
  absl::StatusOr<size_t> second = two->EncodeSecond(sum, ctx, absl::MakeSpan(out));
  RequireOkOrInvalidArgument(second.status(), "EncodeSecond");
  if (!second.ok()) {
    // Feed a well-formed sum so the last step is reached too.
    std::vector<float> first(two->FirstRoundFloats(n), 0.5f);
    if (!two->EncodeSecond(first, ctx, absl::MakeSpan(out)).ok()) return;
  }
  RequireOkOrInvalidArgument(two->DecodeSecond(sum, ctx, absl::MakeSpan(output)), "DecodeSecond");
}

}  // namespace
}  // namespace bytecomp::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bytecomp::fuzz;
  FuzzInput in(data, size);
  const ChosenCodec chosen = ReadCodecChoice(in);
  const bytecomp::compress::CodecContext ctx = ReadContext(in);
  const size_t n = in.U16() % (kMaxElements + 1);
  const size_t misalign = in.U8() % 4;
  // An exactly sized heap buffer (a read past the payload is caught), the payload at an
  // address of each alignment (ZeroMQ's small messages need not be aligned).
  const absl::Span<const uint8_t> rest = in.Rest();
  std::vector<uint8_t> buffer(misalign + rest.size());
  std::copy(rest.begin(), rest.end(), buffer.begin() + misalign);
  const absl::Span<const uint8_t> payload = absl::MakeConstSpan(buffer).subspan(misalign);
  CheckDecoders(chosen, payload, ctx, n);
  CheckTwoRound(chosen, payload, ctx, n);
  return 0;
}
