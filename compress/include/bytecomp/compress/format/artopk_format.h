// artopk (AR-Topk, Tyagi and Swany 2023): one worker chooses the k indices, every worker sends
// its values at them, and the servers sum a dense k-vector. It runs on the engine's two-round
// path (two_round.h); its payloads and the servers' replies are defined here, written and read
// by the codec and its aggregator (compress/src/sparse_artopk.cc) and by the tests.
//
// k = KeptCount(ratio, n) (sparse_format.h), as topk. The chooser's indices are exactly the
// ones topk would send for its compensated gradient, as a sparse index section
// (sparse_format.h: raw, bit-packed or varint deltas, whichever is smallest).
//
// Round r of a partition with key K, P pushing workers (ranks in ascending order):
//   stage 1 push   every worker: its smoothed norm and the chooser it expects; the chooser (or,
//                  when the chooser is not known yet, every worker) adds its top-k indices
//   stage 1 reply  the chosen worker's index section: the indices of round r, alike everywhere
//   stage 2 push   every worker: its smoothed norm and its k values at those indices
//   stage 2 reply  the k fp32 sums, and the chooser of round r + 1
// Each worker keeps the chooser of round r + 1 from the stage 2 reply, so from the second
// round on only the chooser sends indices. A worker that does not know the chooser (its codec
// is new: the first round, a new strategy version) expects kUnknownChooser; then every worker
// sends its candidate and the aggregator picks one by the same rule. All pushes of a round
// must expect the same chooser.
//
// Who chooses (param "chooser"):
//   round_robin   pusher number (r + KeySpread(K)) mod P: every worker in turn, and the
//                 partitions of one round spread over the workers, so that no worker sends
//                 every index section of a round.
//   largest_norm  the pusher with the largest smoothed norm (the paper's policy); the stage 2
//                 norms choose round r + 1, the stage 1 norms when the chooser is not known;
//                 the lowest rank among equal norms. smoothed = s * previous + (1 - s) * ||x||_2
//                 with s = "norm_smoothing", x the compensated input (the first round: ||x||).
//
// Stage 1 push (little-endian), 28 + index_bytes bytes:
//   offset 0   u32 stage = 1
//   offset 4   u32 n
//   offset 8   u32 k
//   offset 12  f32 smoothed norm (finite, >= 0; 0 under round_robin, which does not use it)
//   offset 16  u32 the chooser this worker expects (a worker rank), or kUnknownChooser
//   offset 20  u8  1 when an index section follows (a candidate), else 0
//   offset 21  u8  index encoding, offset 22 u8 width (sparse_format.h), offset 23 u8 0
//   offset 24  u32 index_bytes (0 without a candidate)
//   offset 28  the index section: k strictly increasing indices < n
// Stage 1 reply, 16 + index_bytes rounded up to 4 bytes (the sum slot of the engine's two-round
// path carries 4-byte words; these hold bit patterns, not floats):
//   offset 0   u32 the chooser's rank
//   offset 4   u32 k
//   offset 8   u8 index encoding, u8 width, u16 0
//   offset 12  u32 index_bytes
//   offset 16  the chooser's index section, then zero bytes to a multiple of 4
// Stage 2 push, 8 + 4k bytes: u32 stage = 2, f32 smoothed norm, k f32 values (finite) in the
//   order of the indices.
// Stage 2 reply, 4k + 4 bytes: the k fp32 sums (pushes added in rank order), then u32 the
//   chooser of round r + 1.
// A single payload (Codec::Encode, for the servers' two-way re-encode and for one node alone)
// is topk's sparse message of the node's own top k (sparse_format.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "bytecomp/compress/format/format_error.h"
#include "bytecomp/compress/format/host_device.h"
#include "bytecomp/compress/format/little_endian.h"
#include "bytecomp/compress/format/sparse_format.h"

namespace bytecomp::compress::artopk {

constexpr uint32_t kUnknownChooser = 0xffffffffu;
constexpr size_t kFirstPushHeaderBytes = 28;
constexpr size_t kFirstReplyHeaderBytes = 16;
constexpr size_t kSecondPushHeaderBytes = 8;

// Largest payloads, for n elements with k kept (a raw index section is the largest).
BYTECOMP_HD size_t MaxFirstPushBytes(size_t k) { return kFirstPushHeaderBytes + 4 * k; }
BYTECOMP_HD size_t SecondPushBytes(size_t k) { return kSecondPushHeaderBytes + 4 * k; }
BYTECOMP_HD size_t FirstReplyBytes(size_t index_bytes) {
  return kFirstReplyHeaderBytes + (index_bytes + 3) / 4 * 4;
}
BYTECOMP_HD size_t SecondReplyBytes(size_t k) { return 4 * k + 4; }

// The stage 1 push's header fields.
struct FirstPush {
  uint32_t n = 0;
  uint32_t k = 0;
  float norm = 0.0f;
  uint32_t expected_chooser = kUnknownChooser;
  bool has_candidate = false;
  uint8_t encoding = 0;
  uint8_t width = 0;
  uint32_t index_bytes = 0;
};

BYTECOMP_HD void WriteFirstPushHeader(uint8_t* out, const FirstPush& h) {
  PutU32(out, 1);
  PutU32(out + 4, h.n);
  PutU32(out + 8, h.k);
  PutF32(out + 12, h.norm);
  PutU32(out + 16, h.expected_chooser);
  out[20] = h.has_candidate ? 1 : 0;
  out[21] = h.encoding;
  out[22] = h.width;
  out[23] = 0;
  PutU32(out + 24, h.index_bytes);
}

BYTECOMP_HD FirstPush ReadFirstPushHeader(const uint8_t* p) {
  FirstPush h;
  h.n = GetU32(p + 4);
  h.k = GetU32(p + 8);
  h.norm = GetF32(p + 12);
  h.expected_chooser = GetU32(p + 16);
  h.has_candidate = p[20] != 0;
  h.encoding = p[21];
  h.width = p[22];
  h.index_bytes = GetU32(p + 24);
  return h;
}

// A smoothed norm as a push carries it: finite and not negative.
BYTECOMP_HD FormatError CheckNorm(float norm) {
  return CheckHeaderValue(norm, kNormValue, /*must_be_non_negative=*/true);
}

// The stage word that leads every push (two_round.h); bytes >= 4.
BYTECOMP_HD FormatError CheckStage(const uint8_t* p, size_t bytes, uint32_t stage) {
  if (bytes < 4) return MakeFormatError(FormatErrorCode::kShorterThanHeader, bytes);
  if (GetU32(p) != stage) return MakeFormatError(FormatErrorCode::kWrongStage, GetU32(p), stage);
  return FormatError();
}

// Checks a stage 1 push of `bytes` bytes (its stage word already checked) against n and k:
// the header, the size it adds up to, the flag byte and the norm. The index section is checked
// by its reader (sparse::ReadIndexSection).
BYTECOMP_HD FormatError CheckFirstPush(const uint8_t* p, size_t bytes, size_t n, size_t k) {
  if (bytes < kFirstPushHeaderBytes) {
    return MakeFormatError(FormatErrorCode::kShorterThanHeader, bytes);
  }
  const FirstPush h = ReadFirstPushHeader(p);
  if (h.n != n) return MakeFormatError(FormatErrorCode::kMessageElementCount, h.n, n);
  if (h.k != k) return MakeFormatError(FormatErrorCode::kWrongK, h.k, k);
  if (p[20] > 1 || p[23] != 0 ||
      (!h.has_candidate && (h.index_bytes != 0 || h.encoding != 0 || h.width != 0))) {
    return MakeFormatError(FormatErrorCode::kCandidateFields, p[20], h.encoding, h.width,
                           h.index_bytes);
  }
  const uint64_t expected = kFirstPushHeaderBytes + static_cast<uint64_t>(h.index_bytes);
  if (bytes != expected) return MakeFormatError(FormatErrorCode::kSizeVsHeader, bytes, expected);
  return CheckNorm(h.norm);
}

// The stage 1 reply's header fields.
struct FirstReply {
  uint32_t chooser = 0;
  uint32_t k = 0;
  uint8_t encoding = 0;
  uint8_t width = 0;
  uint32_t index_bytes = 0;
};

BYTECOMP_HD void WriteFirstReplyHeader(uint8_t* out, const FirstReply& h) {
  PutU32(out, h.chooser);
  PutU32(out + 4, h.k);
  out[8] = h.encoding;
  out[9] = h.width;
  out[10] = 0;
  out[11] = 0;
  PutU32(out + 12, h.index_bytes);
}

BYTECOMP_HD FirstReply ReadFirstReplyHeader(const uint8_t* p) {
  FirstReply h;
  h.chooser = GetU32(p);
  h.k = GetU32(p + 4);
  h.encoding = p[8];
  h.width = p[9];
  h.index_bytes = GetU32(p + 12);
  return h;
}

// Checks a stage 1 reply of `bytes` bytes against k: the header and its size (the padding
// included). The index section is checked by its reader.
BYTECOMP_HD FormatError CheckFirstReply(const uint8_t* p, size_t bytes, size_t k) {
  if (bytes < kFirstReplyHeaderBytes) {
    return MakeFormatError(FormatErrorCode::kShorterThanHeader, bytes);
  }
  const FirstReply h = ReadFirstReplyHeader(p);
  if (h.k != k) return MakeFormatError(FormatErrorCode::kWrongK, h.k, k);
  if (bytes != FirstReplyBytes(h.index_bytes)) {
    return MakeFormatError(FormatErrorCode::kSizeVsHeader, bytes, FirstReplyBytes(h.index_bytes));
  }
  return FormatError();
}

// ---- who chooses

// Spreads the partitions of one round over the workers: tensor id plus partition index.
BYTECOMP_HD uint64_t KeySpread(uint64_t key) { return (key >> 32) + (key & 0xffffffffull); }

// round_robin: the position, among `pushers` pushing workers in rank order, of round's chooser.
BYTECOMP_HD size_t RoundRobinPosition(uint64_t round, uint64_t key, size_t pushers) {
  return pushers == 0 ? 0 : static_cast<size_t>((round + KeySpread(key)) % pushers);
}

// largest_norm: the position of the largest of `count` norms (the first among equals).
BYTECOMP_HD size_t LargestNormPosition(const float* norms, size_t count) {
  size_t best = 0;
  for (size_t i = 1; i < count; ++i) best = norms[i] > norms[best] ? i : best;
  return best;
}

}  // namespace bytecomp::compress::artopk
