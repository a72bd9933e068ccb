// The door of cpu_offload/: pinned host memory for staging buffers, and the priority thread
// pool that runs encode/decode work off the training thread.
#pragma once

#include "bytecomp/cpu_offload/pinned_pool.h"
#include "bytecomp/cpu_offload/thread_pool.h"
