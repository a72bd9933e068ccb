#include "bytecomp/worker/device_backend.h"

#include <cstdlib>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "bytecomp/common.h"
#include "bytecomp/worker/emulated_device.h"

#if BYTECOMP_HAVE_CUDA
#include "cuda_device.h"
#endif

namespace bytecomp::worker {

absl::StatusOr<std::unique_ptr<DeviceBackend>> MakeDeviceBackend(absl::string_view choice) {
  if (choice == "emulated") {
    BC_LOG_WARNING("device tensors use the EMULATED device (BYTECOMP_DEVICE_BACKEND=emulated): "
                   "a test facility, device pointers are host memory");
    return std::unique_ptr<DeviceBackend>(new EmulatedDeviceBackend());
  }
  if (!choice.empty() && choice != "auto" && choice != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat(
        "BYTECOMP_DEVICE_BACKEND='", choice, "' is not a device backend (auto, cuda, emulated)"));
  }
#if BYTECOMP_HAVE_CUDA
  return MakeCudaDeviceBackend();
#else
  return absl::InvalidArgumentError(
      "this engine was built without CUDA (BYTECOMP_CUDA=OFF or no nvcc), so it cannot take "
      "device tensors; pass a host tensor to bytecomp_push_pull, or rebuild with CUDA");
#endif
}

absl::StatusOr<DeviceBackend*> ProcessDeviceBackend() {
  static std::mutex mu;
  // Never destroyed: callbacks may still be queued while the process exits.
  static DeviceBackend* backend = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (backend != nullptr) return backend;
  const char* choice = std::getenv("BYTECOMP_DEVICE_BACKEND");
  absl::StatusOr<std::unique_ptr<DeviceBackend>> made =
      MakeDeviceBackend(choice == nullptr ? "" : choice);
  if (!made.ok()) return made.status();
  backend = made->release();
  return backend;
}

}  // namespace bytecomp::worker
