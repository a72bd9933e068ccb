// Made by MakeDeviceBackend in builds with CUDA (cuda_device.cc).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "bytecomp/worker/device_backend.h"

namespace bytecomp::worker {

// InvalidArgument naming cudaGetDeviceCount's error when no device is usable.
absl::StatusOr<std::unique_ptr<DeviceBackend>> MakeCudaDeviceBackend();

}  // namespace bytecomp::worker
