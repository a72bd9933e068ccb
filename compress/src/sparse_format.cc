#include "sparse_format.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/codec_util.h"

namespace bytecomp::compress::sparse {
namespace {

inline size_t VarintBytes(uint32_t v) {
  // 1 byte up to 7 bits, 2 up to 14, ... 5 for 29..32 bits.
  return static_cast<size_t>(std::max(1, BitWidth(v)) + 6) / 7;
}

}  // namespace

// Largest delta and total varint bytes of the deltas; vectorises (no carried state but the
// reductions: delta j reads indices j and j - 1).
__attribute__((target_clones("avx2", "default"))) static void DeltaStats(const uint32_t* indices,
                                                                          size_t k,
                                                                          uint32_t* max_delta,
                                                                          uint64_t* varint_bytes) {
  uint32_t m = 0;
  uint64_t bytes = 0;
  for (size_t j = 1; j < k; ++j) {
    const uint32_t d = indices[j] - indices[j - 1] - 1;
    m = std::max(m, d);
    bytes += 1u + (d >= (1u << 7)) + (d >= (1u << 14)) + (d >= (1u << 21)) + (d >= (1u << 28));
  }
  *max_delta = m;
  *varint_bytes = bytes;
}

IndexPlan PlanIndices(const uint32_t* indices, size_t k) {
  if (k == 0) return {kRaw, 0, 0};
  uint32_t max_delta = 0;
  uint64_t varint_bytes = 0;
  DeltaStats(indices, k, &max_delta, &varint_bytes);
  max_delta = std::max(max_delta, indices[0]);  // d_0 = i_0
  varint_bytes += VarintBytes(indices[0]);
  IndexPlan plan{kRaw, 0, 4 * k};
  const int width = BitWidth(max_delta);
  const size_t packed = PackedBytes(k, width);
  if (packed < plan.bytes) plan = {kBitPack, static_cast<uint8_t>(width), packed};
  if (varint_bytes < plan.bytes) plan = {kVarint, 0, static_cast<size_t>(varint_bytes)};
  return plan;
}

size_t WriteIndices(const uint32_t* indices, size_t k, const IndexPlan& plan, uint8_t* out) {
  switch (plan.encoding) {
    case kRaw:
      if (k > 0) std::memcpy(out, indices, 4 * k);
      return 4 * k;
    case kBitPack: {
      BitWriter w(out);
      uint32_t prev_plus_one = 0;
      for (size_t j = 0; j < k; ++j) {
        w.Put(indices[j] - prev_plus_one, plan.width);
        prev_plus_one = indices[j] + 1;
      }
      return static_cast<size_t>(w.Finish() - out);
    }
    case kVarint: {
      uint8_t* p = out;
      uint32_t prev_plus_one = 0;
      for (size_t j = 0; j < k; ++j) {
        uint32_t d = indices[j] - prev_plus_one;
        prev_plus_one = indices[j] + 1;
        while (d >= 0x80) {
          *p++ = static_cast<uint8_t>(d | 0x80);
          d >>= 7;
        }
        *p++ = static_cast<uint8_t>(d);
      }
      return static_cast<size_t>(p - out);
    }
  }
  return 0;
}

absl::Status ReadIndices(absl::string_view codec, const uint8_t* data, size_t bytes, size_t k,
                         size_t n, uint8_t encoding, uint8_t width, std::vector<uint32_t>& indices) {
  indices.resize(k);
  uint32_t* idx = indices.data();
  switch (encoding) {
    case kRaw: {
      if (bytes != 4 * k) {
        return MalformedError(codec, absl::StrCat("raw index section of ", bytes, " bytes for ",
                                                  k, " indices"));
      }
      if (k > 0) std::memcpy(idx, data, 4 * k);
      // Strictly increasing and < n, checked without branches in the loop.
      int64_t prev = -1;
      bool ok = true;
      for (size_t j = 0; j < k; ++j) {
        ok &= static_cast<int64_t>(idx[j]) > prev;
        prev = idx[j];
      }
      if (!ok || (k > 0 && idx[k - 1] >= n)) {
        return MalformedError(codec, absl::StrCat("indices not strictly increasing below ", n));
      }
      return absl::OkStatus();
    }
    case kBitPack: {
      if (width > 32) return MalformedError(codec, absl::StrCat("index width ", static_cast<int>(width), " > 32"));
      if (bytes != PackedBytes(k, width)) {
        return MalformedError(codec, absl::StrCat("bit-packed index section of ", bytes,
                                                  " bytes for ", k, " indices of ", static_cast<int>(width), " bits"));
      }
      BitReader r(data, bytes);
      uint64_t next = 0;  // the smallest index the next one may take
      for (size_t j = 0; j < k; ++j) {
        const uint64_t i = next + r.Get(width);
        if (i >= n) return MalformedError(codec, absl::StrCat("index ", i, " >= ", n));
        idx[j] = static_cast<uint32_t>(i);
        next = i + 1;
      }
      return absl::OkStatus();
    }
    case kVarint: {
      const uint8_t* p = data;
      const uint8_t* end = data + bytes;
      uint64_t next = 0;
      for (size_t j = 0; j < k; ++j) {
        uint64_t d = 0;
        int shift = 0;
        while (true) {
          if (p == end) return MalformedError(codec, "varint index section ends early");
          const uint8_t b = *p++;
          d |= static_cast<uint64_t>(b & 0x7f) << shift;
          if ((b & 0x80) == 0) break;
          shift += 7;
          if (shift > 28) return MalformedError(codec, "varint index longer than 5 bytes");
        }
        const uint64_t i = next + d;
        if (i >= n) return MalformedError(codec, absl::StrCat("index ", i, " >= ", n));
        idx[j] = static_cast<uint32_t>(i);
        next = i + 1;
      }
      if (p != end) {
        return MalformedError(codec, absl::StrCat(end - p, " bytes left after ", k, " varint indices"));
      }
      return absl::OkStatus();
    }
  }
  return MalformedError(codec, absl::StrCat("unknown index encoding ", static_cast<int>(encoding)));
}

}  // namespace bytecomp::compress::sparse
