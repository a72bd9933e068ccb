// GPU codecs: CUDA kernels that produce the same wire format as the CPU codecs, so a
// GPU-compressed push is decoded by a CPU server and the reverse. The formats are
// compress/include/bytecomp/compress/format/*.h, the per-element math elementwise.h and
// memory_math.h: __host__ __device__ functions that the CPU codecs call too and that the tests
// run on the host; no GPU runs in CI, so the kernels themselves are compile-checked only.
//
//   auto codec = CudaCodec::Create("topk", {{"ratio", "0.01"}}, "residual", {});
//   size_t bytes = *(*codec)->Encode(d_gradient, n, ctx, d_payload, capacity, stream);
//
// Encode fuses the error-feedback memory (residual, efsignsgd, dgc_momentum; its state lives
// in device memory inside the CudaCodec) and momentum (signum) into the kernels. One CudaCodec
// serves one partition in one direction, like a CPU Codec. Every call returns once the result
// size is known, which for most codecs means after one stream synchronisation (the finite
// check, data-dependent sizes); device buffers given must stay valid until then.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bytecomp/compress/codec.h"
#include "bytecomp/compress/two_round.h"  // TwoRoundSizes

namespace bytecomp::compress::cuda {

// The codecs with GPU kernels: fp16, bf16, signsgd, efsignsgd, signum, onebit, topk, randomk,
// threshold, adaq, blocksparse, qsgd, terngrad, natural, u8bit, dithering, sketch, inceptionn,
// dgc, powersgd, artopk.
std::vector<std::string> CudaCodecNames();

// The memories that can be fused with each codec (gpu_codecs.h GpuMemorySupported): "none"
// always; "residual" with every codec but signum, dgc and powersgd; "efsignsgd" with
// efsignsgd; "dgc_momentum" with dgc; "powersgd" with powersgd.
bool CudaMemorySupported(absl::string_view codec, absl::string_view memory);

class CudaCodec {
 public:
  // Parameters as the CPU codecs and memories take them (their specs: same names, defaults
  // and ranges). An unknown codec is NotFound; a bad parameter or a memory that cannot be
  // fused, InvalidArgument.
  static absl::StatusOr<std::unique_ptr<CudaCodec>> Create(absl::string_view codec,
                                                           const CodecParams& params,
                                                           absl::string_view memory = "none",
                                                           const CodecParams& memory_params = {});
  virtual ~CudaCodec();

  virtual absl::string_view name() const = 0;
  virtual size_t MaxEncodedBytes(size_t n) const = 0;

  // Encodes n floats at device pointer input into the device buffer out (capacity bytes, at
  // least MaxEncodedBytes(n), 4-byte aligned), on stream; updates the fused memory's state.
  // Returns the payload size; the payload is complete when the stream reaches this point (a
  // later copy on the same stream sees it). NaN or Inf in the (compensated) input is
  // InvalidArgument naming the first bad index; the memory has then absorbed the gradient
  // already, so call ResetState before reusing the instance.
  virtual absl::StatusOr<size_t> Encode(const float* input, size_t n, const CodecContext& ctx,
                                        uint8_t* out, size_t capacity, cudaStream_t stream) = 0;

  // Decodes a payload in device memory into n floats at device pointer output. A malformed
  // payload is InvalidArgument (output then unspecified).
  virtual absl::Status Decode(const uint8_t* encoded, size_t bytes, const CodecContext& ctx,
                              float* output, size_t n, cudaStream_t stream) = 0;

  // Drops the memory and momentum state (and a two-round codec's warm start).
  virtual void ResetState() = 0;
};

// The two-round side of a CUDA codec (powersgd, artopk), compress/two_round.h's sequence on device
// buffers; AsCudaTwoRound finds it. Per partition and training round, with the same ctx:
//
//   EncodeFirst(gradient, n, ctx, out, ...)  -> payload 1 (u32 1, P); compensates into the
//                                              fused memory's state first
//   EncodeSecond(sum_1, floats, ctx, out, ...) -> payload 2 (u32 2, Q); updates the fused
//                                              memory with the local approximation (so there
//                                              is no LocalApproximation call)
//   DecodeSecond(sum_2, floats, ctx, output, n, ...) -> the approximation of the workers' sum
//
// sum_1 and sum_2 are the servers' replies in device memory, as 4-byte words (4-byte aligned):
// powersgd's are the fp32 sums of the stage payloads' floats (FirstRoundFloats(n) and
// SecondRoundFloats(n) of them, also an allreduce's); artopk's are its aggregator's replies
// (format/artopk_format.h: the chosen index section, then the k sums and the next chooser).
// The payloads are the CPU codec's bytes, so GPU and CPU workers may share a round. Each call
// synchronises the stream: the host side of the round (powersgd_round.h: the orthonormalisation,
// the warm start; artopk_round.h: who chooses) runs with the CPU codec's code, as do the checks.
// The worker engine drives the stages (worker/device's DeviceTwoRound); Encode and Decode are the
// single-payload form (two_round.h).
class CudaTwoRoundCodec : public TwoRoundSizes {
 public:
  // Errors as the CPU codec's (two_round.h), word for word where they are about the round
  // (call order, lengths, NaN/Inf in the sums, overflow).
  virtual absl::StatusOr<size_t> EncodeFirst(const float* input, size_t n, const CodecContext& ctx,
                                             uint8_t* out, size_t capacity,
                                             cudaStream_t stream) = 0;
  virtual absl::StatusOr<size_t> EncodeSecond(const float* summed_first, size_t floats,
                                              const CodecContext& ctx, uint8_t* out,
                                              size_t capacity, cudaStream_t stream) = 0;
  virtual absl::Status DecodeSecond(const float* summed_second, size_t floats,
                                    const CodecContext& ctx, float* output, size_t n,
                                    cudaStream_t stream) = 0;
};

// The two-round side of a codec, or nullptr if it has none.
CudaTwoRoundCodec* AsCudaTwoRound(CudaCodec& codec);

}  // namespace bytecomp::compress::cuda
