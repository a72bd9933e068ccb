#include "bytecomp/common/dtype.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "bytecomp/common/half.h"

namespace bytecomp {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case proto::DTYPE_FLOAT32:
      return 4;
    case proto::DTYPE_FLOAT16:
      return 2;
    case proto::DTYPE_BFLOAT16:
      return 2;
    default:
      return 0;
  }
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case proto::DTYPE_FLOAT32:
      return "fp32";
    case proto::DTYPE_FLOAT16:
      return "fp16";
    case proto::DTYPE_BFLOAT16:
      return "bf16";
    default:
      return "invalid";
  }
}

bool IsValidDType(int value) {
  return value == proto::DTYPE_FLOAT32 || value == proto::DTYPE_FLOAT16 ||
         value == proto::DTYPE_BFLOAT16;
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  if (name == "fp32" || name == "float32") return proto::DTYPE_FLOAT32;
  if (name == "fp16" || name == "float16") return proto::DTYPE_FLOAT16;
  if (name == "bf16" || name == "bfloat16") return proto::DTYPE_BFLOAT16;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", name, "'; valid: fp32, fp16, bf16"));
}

// Function multiversioning lets the same binary use AVX2/F16C where the CPU has them. The
// loops go in blocks of a fixed 16 elements: at -O2 GCC vectorises only a loop that needs no
// scalar epilogue (the "very cheap" cost model), which a plain loop over n is not.
__attribute__((target_clones("avx2", "default"))) void AddFloat32(float* __restrict dst,
                                                                  const float* __restrict src,
                                                                  size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (size_t k = 0; k < 16; ++k) dst[i + k] += src[i + k];
  }
  for (; i < n; ++i) dst[i] += src[i];
}

__attribute__((target_clones("avx2", "default"))) void DivideFloat32(const float* __restrict src,
                                                                     float divisor,
                                                                     float* __restrict dst,
                                                                     size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (size_t k = 0; k < 16; ++k) dst[i + k] = src[i + k] / divisor;
  }
  for (; i < n; ++i) dst[i] = src[i] / divisor;
}

__attribute__((target_clones("avx2", "default"))) void DivideFloat32InPlace(float* values,
                                                                            float divisor,
                                                                            size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (size_t k = 0; k < 16; ++k) values[i + k] /= divisor;
  }
  for (; i < n; ++i) values[i] /= divisor;
}

__attribute__((target_clones("arch=haswell", "default"))) static void HalfToFloat(
    const uint16_t* __restrict src, float* __restrict dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = HalfBitsToFloat(src[i]);
}

__attribute__((target_clones("arch=haswell", "default"))) static void FloatToHalf(
    const float* __restrict src, uint16_t* __restrict dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = FloatToHalfBits(src[i]);
}

__attribute__((target_clones("arch=haswell", "default"))) static void AddHalf(
    const uint16_t* __restrict src, float* __restrict dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += HalfBitsToFloat(src[i]);
}

__attribute__((target_clones("avx2", "default"))) static void AddBFloat16(
    const uint16_t* __restrict src, float* __restrict dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += BFloat16BitsToFloat(src[i]);
}

// A payload straight from the network may sit at any address (ZeroMQ keeps a message of up to
// 33 bytes inside the message object, at no particular alignment), and reading it as float or
// uint16_t there is undefined behaviour (UBSan: a raw fp32 push of one element, in
// integration.bad_input). Such a source goes through an aligned copy, a chunk at a time; true
// when it did.
template <typename Convert>
bool ThroughAlignedCopy(DType dtype, const void* src, float* dst, size_t n, Convert convert) {
  const size_t width = DTypeSize(dtype);
  if (width == 0 || reinterpret_cast<uintptr_t>(src) % width == 0) return false;
  alignas(16) unsigned char chunk[1024];
  const size_t per_chunk = sizeof(chunk) / width;
  const auto* bytes = static_cast<const unsigned char*>(src);
  for (size_t i = 0; i < n; i += per_chunk) {
    const size_t m = std::min(per_chunk, n - i);
    std::memcpy(chunk, bytes + i * width, m * width);
    convert(dtype, chunk, dst + i, m);
  }
  return true;
}

void ToFloat32(DType dtype, const void* src, float* dst, size_t n) {
  if (ThroughAlignedCopy(dtype, src, dst, n, ToFloat32)) return;
  switch (dtype) {
    case proto::DTYPE_FLOAT32:
      std::memcpy(dst, src, n * 4);
      return;
    case proto::DTYPE_FLOAT16:
      HalfToFloat(static_cast<const uint16_t*>(src), dst, n);
      return;
    case proto::DTYPE_BFLOAT16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = BFloat16BitsToFloat(s[i]);
      return;
    }
    default:
      return;
  }
}

void FromFloat32(DType dtype, const float* src, void* dst, size_t n) {
  switch (dtype) {
    case proto::DTYPE_FLOAT32:
      std::memcpy(dst, src, n * 4);
      return;
    case proto::DTYPE_FLOAT16:
      FloatToHalf(src, static_cast<uint16_t*>(dst), n);
      return;
    case proto::DTYPE_BFLOAT16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = FloatToBFloat16Bits(src[i]);
      return;
    }
    default:
      return;
  }
}

void AddToFloat32(DType dtype, const void* src, float* dst, size_t n) {
  if (ThroughAlignedCopy(dtype, src, dst, n, AddToFloat32)) return;
  switch (dtype) {
    case proto::DTYPE_FLOAT32:
      AddFloat32(dst, static_cast<const float*>(src), n);
      return;
    case proto::DTYPE_FLOAT16:
      AddHalf(static_cast<const uint16_t*>(src), dst, n);
      return;
    case proto::DTYPE_BFLOAT16:
      AddBFloat16(static_cast<const uint16_t*>(src), dst, n);
      return;
    default:
      return;
  }
}

}  // namespace bytecomp
