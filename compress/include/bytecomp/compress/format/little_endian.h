// Little-endian fixed-width fields: every ByteComp wire format is little-endian. __host__
// __device__, for the format headers' readers and writers.
#pragma once

#include <cstdint>
#include <cstring>

#include "bytecomp/compress/format/host_device.h"

namespace bytecomp::compress {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "wire formats assume little-endian");

BYTECOMP_HD void PutU32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
BYTECOMP_HD uint32_t GetU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
BYTECOMP_HD void PutF32(uint8_t* p, float v) { std::memcpy(p, &v, 4); }
BYTECOMP_HD float GetF32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace bytecomp::compress
