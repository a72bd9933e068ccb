// topk on the GPU (private to compress/cuda; the kernels in sparse_kernels.cu): a four-pass
// radix select of the k-th largest |x| (format/topk_select.h, ties in index order), then the
// sparse message (sparse_message.h). artopk (artopk_kernels.cu) is a topk whose single payload
// is topk's message and whose chooser sends topk's index section.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "sparse_message.h"

namespace bytecomp::compress::cuda {

// The radix select's state on the device.
struct RadixState {
  uint32_t prefix;  // the bits of the threshold found so far
  uint32_t need;    // how many of the elements matching prefix are still to be taken
  uint32_t equal;   // how many elements match prefix (after the last pass: equal the threshold)
};

class TopkCudaCodec : public SparseMessageCudaCodec {
 public:
  TopkCudaCodec(FusedMemorySettings memory, double ratio) : TopkCudaCodec("topk", memory, ratio) {}
  ~TopkCudaCodec() override;

  size_t MaxEncodedBytes(size_t n) const override;

 protected:
  // A codec of another name that sends topk's message (artopk).
  TopkCudaCodec(std::string name, FusedMemorySettings memory, double ratio)
      : SparseMessageCudaCodec(std::move(name), memory), ratio_(ratio) {}

  int64_t RequiredK(size_t n) const override;
  // The first radix pass checks; the memory is updated only after the threshold's readback.
  bool FusesReduction() const override { return true; }
  bool ChecksBeforeMemoryUpdates() const override { return true; }

  // topk's message of x's k = KeptCount(ratio, n) largest |x| into out; the memory forgets
  // what is sent (fb).
  absl::StatusOr<size_t> EncodeChecked(const float* x, size_t n, const CodecContext& ctx,
                                       const DeviceStats& stats, const Feedback& fb, uint8_t* out,
                                       cudaStream_t stream) override;

 private:
  double ratio_;
  RadixState* radix_ = nullptr;
  DeviceBuffer hist_, flags_, ranks_;
  HostBuffer found_;
};

}  // namespace bytecomp::compress::cuda
