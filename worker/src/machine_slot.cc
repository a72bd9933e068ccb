#include "machine_slot.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace bytecomp::worker {
namespace {

absl::Status EnvInt(const char* name, std::optional<int>* out) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return absl::OkStatus();
  int parsed = 0;
  if (!absl::SimpleAtoi(v, &parsed)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "='", v, "' is not an integer in [0, 2147483647]"));
  }
  if (parsed < 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, "='", v, "' is negative"));
  }
  *out = parsed;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<MachineSlot> MachineSlotFromEnv() {
  MachineSlot slot;
  if (const char* m = std::getenv("BYTECOMP_MACHINE"); m != nullptr) slot.machine = m;
  if (absl::Status s = EnvInt("BYTECOMP_LOCAL_RANK", &slot.local_rank); !s.ok()) return s;
  if (absl::Status s = EnvInt("BYTECOMP_LOCAL_SIZE", &slot.local_size); !s.ok()) return s;
  return slot;
}

}  // namespace bytecomp::worker
