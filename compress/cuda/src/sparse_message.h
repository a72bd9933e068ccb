// The sparse message of topk and dgc on the GPU (private to compress/cuda):
// format/sparse_format.h's header, index plan and index sections, written from a flag per
// element and read back into a dense output. SparseMessageCudaCodec is the base of the codecs
// that send it; ScatterValues also serves randomk.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cuda_codec_base.h"
#include "cuda_support.h"

namespace bytecomp::compress::cuda {

// output[idx[j]] = value j (fp32 at values + 4j, any alignment) for j < k; records
// kValuesNotFinite for a NaN or Inf value. Writes nothing when a kernel before it on the
// stream recorded an error (bad indices must not be written through).
void LaunchScatterValues(const uint8_t* values, const uint32_t* idx, size_t k, float* output,
                         DeviceStats* stats, cudaStream_t stream);

class SparseMessageCudaCodec : public CudaCodecBase {
 public:
  using CudaCodecBase::CudaCodecBase;

  absl::Status Decode(const uint8_t* encoded, size_t bytes, const CodecContext& ctx, float* output,
                      size_t n, cudaStream_t stream) override;

 protected:
  // k that a message must carry for n elements, or -1 when any k <= n is valid.
  virtual int64_t RequiredK(size_t n) const { return -1; }

  // The message of n elements and no values (n == 0).
  absl::StatusOr<size_t> EmptyMessage(uint8_t* out, size_t n, cudaStream_t stream);

  // Sends the k elements of x whose flag is set (flags: n words, 0 or 1): their values and
  // indices in index order, the smallest index section. The memory forgets what is sent
  // (residual: fb; dgc_momentum: its u and v zeroed at the sent coordinates).
  absl::StatusOr<size_t> FinishMessage(const float* x, size_t n, size_t k, const uint32_t* flags,
                                       uint8_t* out, const Feedback& fb, cudaStream_t stream);

  // out = the exclusive prefix sums of in (count words), with CUB.
  cudaError_t ExclusiveSum(const uint32_t* in, uint32_t* out, size_t count, cudaStream_t stream);

  DeviceBuffer indices_;  // the message's indices (decode too)

 private:
  DeviceBuffer scan_, lengths_, cub_temp_;
};

}  // namespace bytecomp::compress::cuda
