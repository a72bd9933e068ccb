#include "bytecomp/worker/device_backend.h"

#include <cstdlib>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "bytecomp/common.h"
#include "bytecomp/worker/emulated_device.h"

#if BYTECOMP_DEVICE_CUDA
#include "cuda_device.h"
#endif

namespace bytecomp::worker {
namespace {

ABSL_CONST_INIT absl::Mutex process_backend_mu(absl::kConstInit);
// Never destroyed: callbacks may still be queued while the process exits.
DeviceBackend* process_backend ABSL_GUARDED_BY(process_backend_mu) = nullptr;

}  // namespace

bool CudaBackendBuilt() { return BYTECOMP_DEVICE_CUDA != 0; }

absl::StatusOr<std::unique_ptr<DeviceBackend>> MakeDeviceBackend(absl::string_view choice) {
  if (choice == "emulated") {
    BC_LOG_WARNING(
        "device tensors use the EMULATED device (BYTECOMP_DEVICE_BACKEND=emulated): "
        "a test facility, device pointers are host memory");
    return std::unique_ptr<DeviceBackend>(new EmulatedDeviceBackend());
  }
  if (!choice.empty() && choice != "auto" && choice != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat(
        "BYTECOMP_DEVICE_BACKEND='", choice, "' is not a device backend (auto, cuda, emulated)"));
  }
#if BYTECOMP_DEVICE_CUDA
  return MakeCudaDeviceBackend();
#else
  return absl::InvalidArgumentError(
      "this engine was built without CUDA (BYTECOMP_CUDA=OFF or no nvcc), so it cannot take "
      "device tensors; pass a host tensor to bytecomp_push_pull, or rebuild with CUDA");
#endif
}

absl::StatusOr<DeviceBackend*> ProcessDeviceBackend() {
  absl::MutexLock lock(&process_backend_mu);
  if (process_backend != nullptr) return process_backend;
  const char* choice = std::getenv("BYTECOMP_DEVICE_BACKEND");
  absl::StatusOr<std::unique_ptr<DeviceBackend>> made =
      MakeDeviceBackend(choice == nullptr ? "" : choice);
  if (!made.ok()) return made.status();
  process_backend = made->release();
  return process_backend;
}

}  // namespace bytecomp::worker
