// CalibrateGpuCosts in a build without CUDA: says so, changes nothing.
#include "bytecomp/planner/calibrate.h"

namespace bytecomp::planner {

absl::StatusOr<int> CalibrateGpuCosts(proto::CostTable*, const CalibrationOptions&) {
  return absl::UnavailableError(
      "this build has no CUDA (BYTECOMP_CUDA=OFF or no nvcc): GPU costs stay as in the template");
}

}  // namespace bytecomp::planner
