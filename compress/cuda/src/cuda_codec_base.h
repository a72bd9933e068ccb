// The base of every CUDA codec (private to compress/cuda). Encode runs the steps they share:
//   the call checks -> [the fused memory's compensation into its device state] -> one
//   reduction pass (max |x| bits for the finite check, and the sums the codec asks for) ->
//   one readback -> EncodeChecked: the scalars, computed on the host with the format headers'
//   expressions, and the element kernels, which also write the memory's update. A codec whose
//   kernels compute the pass's statistics themselves (FusesReduction) skips the pass where no
//   memory is updated before its check.
// Reductions in double are summed in another order than on the CPU; the rounded float (a norm,
// a mean) is the same unless the double sums straddle a float rounding boundary, which is rare
// but possible. Decode is each codec's; the helpers below read a payload's header to the host
// and turn the kernels' recorded FormatError into a status.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bytecomp/compress/cuda_codecs.h"
#include "bytecomp/compress/elementwise.h"
#include "bytecomp/compress/format/format_error.h"
#include "cuda_support.h"
#include "fused_memory.h"

namespace bytecomp::compress::cuda {

// The random stream of one encode call, as the CPU codecs draw it (elementwise.h).
inline CounterRandom StreamOf(const CodecContext& ctx) {
  return MakeCounterRandom(ctx.seed, ctx.key, ctx.round, ctx.node);
}

// What the reduction pass sums besides the largest |x| bit pattern.
enum class Reduction {
  kMaxAbs,   // nothing more
  kSigns,    // the sums of the non-negative and negative elements, the negative count
  kSquares,  // the sum of squares
};

// Adds v to the sign sums of Reduction::kSigns: the negative elements' sum and count, the
// others' sum (-0.0 among them).
__device__ inline void AddSignSums(float v, double* non_negative, double* negative,
                                   unsigned long long* negative_count) {
  if (v < 0.0f) {
    *negative += static_cast<double>(v);
    ++*negative_count;
  } else {
    *non_negative += static_cast<double>(v);
  }
}

class CudaCodecBase : public CudaCodec {
 public:
  CudaCodecBase(std::string name, FusedMemorySettings memory)
      : name_(std::move(name)), memory_(memory) {}
  ~CudaCodecBase() override;

  // Allocates the device statistics; called by the factory before the codec is handed out.
  absl::Status Init();

  absl::string_view name() const override { return name_; }
  void ResetState() override { rounds_ = 0; }

  absl::StatusOr<size_t> Encode(const float* input, size_t n, const CodecContext& ctx, uint8_t* out,
                                size_t capacity, cudaStream_t stream) final;

 protected:
  virtual Reduction reduction() const { return Reduction::kMaxAbs; }

  // Whether EncodeChecked's kernels can compute the reduction pass's statistics themselves (the
  // largest |x| bits, RecordBlockMaxAbsBits, and the sums reduction() names). Where there is no
  // memory to update (or ChecksBeforeMemoryUpdates), Encode then skips the pass and its wait
  // (fused_pass() is true, the statistics zeroed, EncodeChecked's `stats` zeros): the kernels
  // record them, and EncodeChecked reads them back and checks them (FinishFusedPass,
  // CheckFusedStats) before it returns. One pass over x instead of two.
  virtual bool FusesReduction() const { return false; }
  // Whether such a codec's EncodeChecked checks before its kernels update the memory (its
  // fused pass then runs with a memory too).
  virtual bool ChecksBeforeMemoryUpdates() const { return false; }
  bool fused_pass() const { return fused_pass_; }

  // The input to encode, from the gradient g: the fused memory's compensation by default
  // (signum blends its momentum instead). first: a first round or a new length.
  virtual absl::StatusOr<const float*> Compensate(const float* g, size_t n, const CodecContext& ctx,
                                                  bool first, cudaStream_t stream, Feedback* fb);

  // Encodes x (finite, n <= INT_MAX) into out, whose capacity was checked; stats holds the
  // reduction pass. Returns the payload size (Launched).
  virtual absl::StatusOr<size_t> EncodeChecked(const float* x, size_t n, const CodecContext& ctx,
                                               const DeviceStats& stats, const Feedback& fb,
                                               uint8_t* out, cudaStream_t stream) = 0;

  // ---- helpers

  // What an encode's first steps give (PrepareInput).
  struct PreparedInput {
    const float* x = nullptr;  // what to encode: the compensated input, or the input itself
    DeviceStats stats;         // the reduction pass
    Feedback fb;               // how the kernels update the fused memory
  };
  // Encode's steps before EncodeChecked, for a payload of `need` bytes: the call checks, the
  // fused memory's compensation, the reduction pass, its readback and the finite check. For
  // the codecs with encodes of their own besides Encode (the two-round codecs' stages).
  // fuse: the pass may be left to EncodeChecked's kernels where FusesReduction says so (Encode).
  absl::StatusOr<PreparedInput> PrepareInput(const float* input, size_t n, const CodecContext& ctx,
                                             size_t capacity, size_t need, cudaStream_t stream,
                                             bool fuse = false);
  // A two-round codec's input, kept until its second stage: the fused memory's state where
  // there is one (nothing writes it before then), else a copy of the caller's buffer in `copy`.
  absl::StatusOr<const float*> KeepInput(const PreparedInput& p, size_t n, DeviceBuffer& copy,
                                         cudaStream_t stream);
  // A fused pass's end: where the pass was fused, waits for the stream, reads the statistics
  // back and checks them (CheckFusedStats); else nothing.
  absl::Status FinishFusedPass(const float* x, size_t n, cudaStream_t stream);
  // Where the pass was fused: the error for a non-finite x (its first such element), given the
  // statistics the kernels recorded.
  absl::Status CheckFusedStats(const DeviceStats& st, const float* x, size_t n,
                               cudaStream_t stream);
  // "cuda codec 'x': output buffer has ... bytes, encoding needs ..." unless capacity >= need.
  absl::Status CheckCapacity(size_t capacity, size_t need) const;
  // The payload size, after checking that the launches were accepted.
  absl::StatusOr<size_t> Launched(size_t bytes);
  // Zeroes the device statistics (before the kernels that record into them).
  absl::Status ResetStats(cudaStream_t stream);
  // Waits for the stream and reads the statistics back.
  absl::StatusOr<DeviceStats> ReadStats(cudaStream_t stream);
  // Waits for the stream; the error a decode kernel recorded, as a status.
  absl::Status CheckDecode(cudaStream_t stream);
  // "codec 'x': malformed payload: ..." (OK for no error).
  absl::Status Malformed(const FormatError& e) const { return FormatErrorStatus(name_, e); }
  // Copies the first min(bytes, header_bytes) bytes of a device payload to the host and waits;
  // the pointer is valid until the next call. Format checks read only what the size allows.
  absl::StatusOr<const uint8_t*> ReadHeader(const uint8_t* encoded, size_t bytes,
                                            size_t header_bytes, cudaStream_t stream);
  // For the payloads that lead with u32 n: ReadHeader, then the size (MaxEncodedBytes(n)) and
  // the count checked against the decode length n.
  absl::StatusOr<const uint8_t*> ReadCountedHeader(const uint8_t* encoded, size_t bytes,
                                                   size_t header_bytes, size_t n,
                                                   cudaStream_t stream);
  // ... and then the f32 header value at offset 4, which must be finite and not negative (the
  // CPU codecs' codec_checks::ReadHeaderValueAfterCount).
  absl::StatusOr<float> ReadCountedHeaderValue(const uint8_t* encoded, size_t bytes,
                                               size_t header_bytes, size_t n, HeaderValue what,
                                               cudaStream_t stream);
  // Copies `bytes` (<= 32) header bytes that the caller wrote into header_scratch() to out. The
  // source is pageable, so cudaMemcpyAsync has staged it before returning and the scratch may
  // be reused at once.
  uint8_t* header_scratch() { return header_scratch_; }
  cudaError_t WriteHeader(uint8_t* out, size_t bytes, cudaStream_t stream);

  DeviceStats* stats() const { return stats_; }
  const FusedMemory& memory() const { return memory_; }

 private:
  absl::Status NonFiniteError(const float* x, size_t n, cudaStream_t stream);

  std::string name_;
  FusedMemory memory_;
  DeviceStats* stats_ = nullptr;
  HostBuffer host_stats_;  // readbacks: the statistics, payload headers
  uint8_t header_scratch_[32] = {};
  size_t state_n_ = 0;
  uint64_t rounds_ = 0;
  bool fused_pass_ = false;
};

}  // namespace bytecomp::compress::cuda
