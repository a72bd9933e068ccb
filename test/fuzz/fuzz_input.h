// The byte format every fuzz target reads its input in, and the writer the seed generator
// (make_fuzz_seeds.cc) writes seeds with, so that targets and seeds cannot drift apart.
//
// An input is read front to back: fixed-width little-endian integers and length-prefixed
// byte strings. Reading past the end yields zeros and empty strings (never an error): every
// byte string the fuzzer makes is some valid input, and a short input is a small one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/types/span.h"

namespace bytecomp::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}

  uint8_t U8() { return static_cast<uint8_t>(Fixed(1)); }
  uint16_t U16() { return static_cast<uint16_t>(Fixed(2)); }
  uint32_t U32() { return static_cast<uint32_t>(Fixed(4)); }
  uint64_t U64() { return Fixed(8); }
  bool Bool() { return (U8() & 1) != 0; }
  // One of `count` (> 0) choices.
  size_t Pick(size_t count) { return count == 0 ? 0 : U8() % count; }

  // A byte string of at most `max` bytes, prefixed by its u16 length (clamped to what is
  // left: a truncated input keeps its last string).
  absl::Span<const uint8_t> Bytes(size_t max = 65535) {
    size_t n = U16();
    if (n > max) n = max;
    if (n > left()) n = left();
    absl::Span<const uint8_t> bytes(p_, n);
    p_ += n;
    return bytes;
  }
  std::string String(size_t max = 65535) {
    absl::Span<const uint8_t> b = Bytes(max);
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
  }
  // Everything not read yet.
  absl::Span<const uint8_t> Rest() {
    absl::Span<const uint8_t> rest(p_, left());
    p_ = end_;
    return rest;
  }

  size_t left() const { return static_cast<size_t>(end_ - p_); }
  bool empty() const { return p_ == end_; }

 private:
  uint64_t Fixed(size_t width) {
    uint64_t v = 0;
    const size_t n = width < left() ? width : left();
    std::memcpy(&v, p_, n);  // little-endian host (the wire formats assume it too)
    p_ += n;
    return v;
  }

  const uint8_t* p_;
  const uint8_t* end_;
};

// Writes what FuzzInput reads.
class FuzzInputWriter {
 public:
  FuzzInputWriter& U8(uint8_t v) { return Fixed(v, 1); }
  FuzzInputWriter& U16(uint16_t v) { return Fixed(v, 2); }
  FuzzInputWriter& U32(uint32_t v) { return Fixed(v, 4); }
  FuzzInputWriter& U64(uint64_t v) { return Fixed(v, 8); }
  FuzzInputWriter& Bool(bool v) { return U8(v ? 1 : 0); }
  FuzzInputWriter& Bytes(absl::Span<const uint8_t> bytes) {
    U16(static_cast<uint16_t>(bytes.size()));
    bytes_.insert(bytes_.end(), bytes.begin(), bytes.end());
    return *this;
  }
  FuzzInputWriter& String(const std::string& s) {
    return Bytes(absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
  }
  FuzzInputWriter& Rest(absl::Span<const uint8_t> bytes) {
    bytes_.insert(bytes_.end(), bytes.begin(), bytes.end());
    return *this;
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  FuzzInputWriter& Fixed(uint64_t v, size_t width) {
    for (size_t i = 0; i < width; ++i) bytes_.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  std::vector<uint8_t> bytes_;
};

}  // namespace bytecomp::fuzz
