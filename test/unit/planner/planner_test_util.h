// Pieces the planner's tests share.
#pragma once

#include <cstdint>

#include "planner.pb.h"

namespace bytecomp::planner::testing {

inline proto::CostPoint Point(int64_t bytes, double us) {
  proto::CostPoint p;
  p.set_bytes(bytes);
  p.set_us(us);
  return p;
}

}  // namespace bytecomp::planner::testing
