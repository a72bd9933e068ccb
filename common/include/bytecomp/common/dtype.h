// Element types that cross the wire and the C API.
#pragma once

#include <cstddef>
#include <cstdint>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "data.pb.h"

namespace bytecomp {

using proto::DType;

// Bytes per element; 0 for a value outside the enum.
size_t DTypeSize(DType dtype);
absl::string_view DTypeName(DType dtype);
bool IsValidDType(int value);
absl::StatusOr<DType> ParseDType(absl::string_view name);

// Widen n elements of dtype at src into fp32 dst.
void ToFloat32(DType dtype, const void* src, float* dst, size_t n);
// Narrow n fp32 elements into dtype at dst (round to nearest even).
void FromFloat32(DType dtype, const float* src, void* dst, size_t n);
// dst[i] += src[i] for fp32, vectorised.
void AddFloat32(float* dst, const float* src, size_t n);
// dst[i] = src[i] / divisor (a true division, as DDP's average: the same bits), vectorised;
// src and dst do not overlap.
void DivideFloat32(const float* src, float divisor, float* dst, size_t n);
// values[i] /= divisor, vectorised.
void DivideFloat32InPlace(float* values, float divisor, size_t n);
// dst[i] += widen(src[i]) for any dtype.
void AddToFloat32(DType dtype, const void* src, float* dst, size_t n);

}  // namespace bytecomp
