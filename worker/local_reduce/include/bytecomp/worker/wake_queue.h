// The worker's name for common's WakeQueue (bytecomp/common/wake_queue.h), its one home.
#pragma once

#include "bytecomp/common/wake_queue.h"

namespace bytecomp::worker {

using ::bytecomp::WakeQueue;

}  // namespace bytecomp::worker
