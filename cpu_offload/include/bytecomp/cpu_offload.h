// The door of cpu_offload/: pinned host memory, the priority thread pool that runs
// encode/decode work, and the staging pipeline that chains device copies, codecs and the
// network callbacks chunk by chunk.
#pragma once

#include "bytecomp/cpu_offload/pinned_pool.h"
#include "bytecomp/cpu_offload/staging.h"
#include "bytecomp/cpu_offload/thread_pool.h"
