// The one marker of the format headers' functions: BYTECOMP_HD (common/half.h) is
// `__host__ __device__` (force-inlined) under nvcc and `inline` elsewhere, so the CPU codecs
// and the CUDA kernels compile the same lines. BYTECOMP_HD_TEMPLATE goes before a
// __host__ __device__ template that takes a callable: the callable may be host-only in a host
// instantiation (a CPU codec's lambda), which nvcc would otherwise warn about.
#pragma once

#include "bytecomp/common/half.h"

#if defined(__CUDACC__)
#define BYTECOMP_HD_TEMPLATE _Pragma("nv_exec_check_disable")
#else
#define BYTECOMP_HD_TEMPLATE
#endif
