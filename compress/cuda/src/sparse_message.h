// The sparse message of topk, threshold and dgc on the GPU (private to compress/cuda):
// format/sparse_format.h's header, index plan and index sections, written from a flag per
// element and read back into a dense output. IndexSectionCudaCodec writes and reads the index
// sections (adaq sends two of them); SparseMessageCudaCodec, the base of the codecs that send
// the message, adds the values and the header. ScatterValues also serves randomk.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bytecomp/compress/format/sparse_format.h"
#include "cuda_codec_base.h"
#include "cuda_support.h"

namespace bytecomp::compress::cuda {

// output[idx[j]] = value j (fp32 at values + 4j, any alignment) for j < k; records
// kValuesNotFinite for a NaN or Inf value. Writes nothing when a kernel before it on the
// stream recorded an error (bad indices must not be written through).
void LaunchScatterValues(const uint8_t* values, const uint32_t* idx, size_t k, float* output,
                         DeviceStats* stats, cudaStream_t stream);

// dgc's and adaq's sample (format/dgc_threshold.h): the positions drawn on the host as the CPU
// codecs draw them, the values gathered on the device and read back.
class DeviceSample {
 public:
  // The bit patterns of x at the dgc::SampleSize(n) positions dgc::ForEachSamplePosition(n,
  // seed) draws, in draw order; waits for the stream.
  absl::StatusOr<std::vector<uint32_t>> Read(const float* x, size_t n, uint64_t seed,
                                             cudaStream_t stream);

 private:
  HostBuffer host_;
  DeviceBuffer device_;
};

// Exclusive prefix sums with CUB, its scratch kept between calls.
class PrefixSums {
 public:
  // out = the exclusive prefix sums of in (count words).
  cudaError_t ExclusiveSum(const uint32_t* in, uint32_t* out, size_t count, cudaStream_t stream);
  // out = the inclusive prefix sums of in (count words; in place allowed).
  cudaError_t InclusiveSum(const uint64_t* in, uint64_t* out, size_t count, cudaStream_t stream);

 private:
  template <typename Scan>
  cudaError_t WithScratch(Scan scan);

  DeviceBuffer temp_;
};

// The index sections of format/sparse_format.h on the device.
class IndexSectionCudaCodec : public CudaCodecBase {
 public:
  using CudaCodecBase::CudaCodecBase;

 protected:
  // Writes the smallest section for the k strictly increasing indices idx (device) at section
  // (device, any alignment) and returns its plan; waits for the stream once (the deltas'
  // statistics). May write up to 3 zero bytes past the section when section is 4-aligned.
  absl::StatusOr<sparse::IndexPlan> WriteIndexSection(const uint32_t* idx, size_t k,
                                                      uint8_t* section, cudaStream_t stream);

  // Reads a section of `bytes` bytes holding k indices < n into idx (device): a thread per
  // index, and where that doubts, the serial reader with the CPU reader's checks; an error is
  // recorded into stats() (reset it before; a recorded one stays).
  absl::Status LaunchReadIndexSection(const uint8_t* section, size_t bytes, size_t k, size_t n,
                                      uint8_t encoding, uint8_t width, uint32_t* idx,
                                      cudaStream_t stream);

  // out = the exclusive prefix sums of in (count words), with CUB.
  cudaError_t ExclusiveSum(const uint32_t* in, uint32_t* out, size_t count, cudaStream_t stream) {
    return prefix_sums_.ExclusiveSum(in, out, count, stream);
  }

 private:
  PrefixSums prefix_sums_;
  DeviceBuffer lengths_, offsets_, packed_, steps_;
};

class SparseMessageCudaCodec : public IndexSectionCudaCodec {
 public:
  using IndexSectionCudaCodec::IndexSectionCudaCodec;

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

  // How many |x| bit patterns are at least from_bits (waits for the stream).
  absl::StatusOr<size_t> CountAtLeast(const float* x, size_t n, uint32_t from_bits,
                                      cudaStream_t stream);
  // FinishMessage for the k elements whose |x| bit patterns are at least from_bits (dgc,
  // threshold, topk without partial ties; exactly k of them): selected in one pass over x.
  absl::StatusOr<size_t> FinishMessageAtLeast(const float* x, size_t n, size_t k,
                                              uint32_t from_bits, uint8_t* out, const Feedback& fb,
                                              cudaStream_t stream);

  // Gathers x at the k indices idx into values (fp32, 4-byte aligned), in their order; the
  // memory forgets what is sent (as FinishMessage's).
  void LaunchGatherSelected(const float* x, const uint32_t* idx, size_t k, uint8_t* values,
                            const Feedback& fb, cudaStream_t stream);

  DeviceBuffer indices_;  // the message's indices (decode too)

 private:
  // The index section of the k increasing indices idx after the values, and the header.
  absl::StatusOr<size_t> FinishIndexSectionAndHeader(const uint32_t* idx, size_t n, size_t k,
                                                     uint8_t* out, cudaStream_t stream);

  DeviceBuffer scan_, selected_, select_temp_;
};

}  // namespace bytecomp::compress::cuda
