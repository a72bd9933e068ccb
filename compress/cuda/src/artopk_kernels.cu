// artopk on the GPU (format/artopk_format.h): topk's selection and message (topk_codec.h) for
// the chooser's candidate and the single payload, the chosen indices read from the stage 1
// reply by the parallel index reader (sparse_message.h), the values gathered there with the
// fused memory's update, and the k sums scattered into the output. The round's host side (who
// chooses, the smoothed norm, the call order, the errors) is the CPU codec's own
// (artopk_round.h); the payloads are the CPU codec's bytes, so GPU and CPU workers share a
// round. The norm is summed in double in another order than on the CPU (cuda_codec_base.h):
// the same float unless the sums straddle a rounding boundary, and it only ranks workers.
#include <cstring>

#include "bytecomp/compress/artopk_round.h"
#include "bytecomp/compress/codec_util.h"
#include "bytecomp/compress/format/artopk_format.h"
#include "bytecomp/compress/format/sparse_format.h"
#include "cuda_registry.h"
#include "topk_codec.h"

namespace bytecomp::compress::cuda {
namespace {

class ArtopkCudaCodec final : public TopkCudaCodec, public CudaTwoRoundCodec {
 public:
  ArtopkCudaCodec(FusedMemorySettings memory, const artopk::Params& params)
      : TopkCudaCodec("artopk", memory, params.ratio), round_state_(params) {}

  size_t FirstRoundFloats(size_t n) const override {
    return (artopk::MaxFirstPushBytes(round_state_.K(n)) - 4) / 4;
  }
  size_t SecondRoundFloats(size_t n) const override {
    return (artopk::SecondPushBytes(round_state_.K(n)) - 4) / 4;
  }
  void ResetState() override {
    TopkCudaCodec::ResetState();
    round_state_ = artopk::RoundState(round_state_.params());
  }

  absl::StatusOr<size_t> EncodeFirst(const float* input, size_t n, const CodecContext& ctx,
                                     uint8_t* out, size_t capacity, cudaStream_t stream) override {
    PreparedInput p;
    BC_ASSIGN(p, PrepareInput(input, n, ctx, capacity, FirstRoundBytes(n), stream));
    fb_ = p.fb;
    BC_ASSIGN(x_, KeepInput(p, n, x_copy_, stream));  // its values are sent in EncodeSecond
    const float norm =
        round_state_.uses_norm() ? artopk::NormFromSumOfSquares(p.stats.sum_of_squares) : 0.0f;
    artopk::FirstPush h = round_state_.Start(n, norm, ctx);
    if (h.has_candidate) {
      // topk's own message, the memory left alone (stage 2 updates it at the chosen indices):
      // its index section is the candidate.
      uint8_t* message = nullptr;
      BC_ASSIGN(message, message_.Reserve<uint8_t>(MaxEncodedBytes(n)));
      size_t bytes = 0;
      BC_ASSIGN(bytes, EncodeChecked(x_, n, ctx, p.stats, Feedback(), message, stream));
      const uint8_t* header = nullptr;
      BC_ASSIGN(header, ReadHeader(message, bytes, sparse::kHeaderBytes, stream));
      const sparse::Header m = sparse::ReadHeader(header);
      h.encoding = m.encoding;
      h.width = m.width;
      h.index_bytes = m.index_bytes;
      if (m.index_bytes > 0) {
        BC_CUDA_TRY(cudaMemcpyAsync(out + artopk::kFirstPushHeaderBytes,
                                    message + sparse::kHeaderBytes + 4 * size_t{m.k}, m.index_bytes,
                                    cudaMemcpyDeviceToDevice, stream));
      }
    }
    artopk::WriteFirstPushHeader(header_scratch(), h);
    BC_CUDA_TRY(WriteHeader(out, artopk::kFirstPushHeaderBytes, stream));
    size_t written = 0;
    BC_ASSIGN(written, Launched(artopk::kFirstPushHeaderBytes + h.index_bytes));
    round_state_.FinishFirst(ctx);
    return written;
  }

  absl::StatusOr<size_t> EncodeSecond(const float* summed_first, size_t floats,
                                      const CodecContext& ctx, uint8_t* out, size_t capacity,
                                      cudaStream_t stream) override {
    if (auto s = round_state_.CheckStage(1, ctx, "EncodeSecond"); !s.ok()) return s;
    const size_t n = round_state_.n(), k = round_state_.k();
    const auto* reply = reinterpret_cast<const uint8_t*>(summed_first);
    const size_t reply_bytes = 4 * floats;
    const uint8_t* header = nullptr;
    BC_ASSIGN(header, ReadHeader(reply, reply_bytes, artopk::kFirstReplyHeaderBytes, stream));
    if (auto s = Malformed(artopk::CheckFirstReply(header, reply_bytes, k)); !s.ok()) return s;
    const artopk::FirstReply h = artopk::ReadFirstReplyHeader(header);
    const size_t bytes = artopk::SecondPushBytes(k);
    if (auto s = CheckCapacity(capacity, bytes); !s.ok()) return s;
    uint32_t* chosen = nullptr;
    BC_ASSIGN(chosen, chosen_.Reserve<uint32_t>(k));
    if (auto s = ResetStats(stream); !s.ok()) return s;
    if (auto s = LaunchReadIndexSection(reply + artopk::kFirstReplyHeaderBytes, h.index_bytes, k, n,
                                        h.encoding, h.width, chosen, stream);
        !s.ok()) {
      return s;
    }
    if (auto s = CheckDecode(stream); !s.ok()) return s;
    PutU32(header_scratch(), 2);
    PutF32(header_scratch() + 4, round_state_.smoothed_norm());
    BC_CUDA_TRY(WriteHeader(out, artopk::kSecondPushHeaderBytes, stream));
    // The values at the chosen indices; the memory keeps the rest (the CPU engine's
    // LocalApproximation and memory Update).
    LaunchGatherSelected(x_, chosen, k, out + artopk::kSecondPushHeaderBytes, fb_, stream);
    round_state_.FinishSecond();
    return Launched(bytes);
  }

  absl::Status DecodeSecond(const float* summed_second, size_t floats, const CodecContext& ctx,
                            float* output, size_t n, cudaStream_t stream) override {
    if (auto s = round_state_.CheckStage(2, ctx, "DecodeSecond"); !s.ok()) return s;
    if (auto s = round_state_.CheckSecondReply(4 * floats, n); !s.ok()) return s;
    const size_t k = round_state_.k();
    const auto* reply = reinterpret_cast<const uint8_t*>(summed_second);
    uint32_t* next_chooser = nullptr;
    BC_ASSIGN(next_chooser, next_chooser_.Reserve<uint32_t>(1));
    if (auto s = ResetStats(stream); !s.ok()) return s;
    BC_CUDA_TRY(cudaMemsetAsync(output, 0, 4 * n, stream));
    LaunchScatterValues(reply, chosen_.as<uint32_t>(), k, output, stats(), stream);
    BC_CUDA_TRY(cudaMemcpyAsync(next_chooser, reply + 4 * k, 4, cudaMemcpyDeviceToHost, stream));
    DeviceStats st;
    BC_ASSIGN(st, ReadStats(stream));
    if (st.error_code != 0) return MalformedError("artopk", artopk::kSumsNotFinite);
    round_state_.FinishDecodeSecond(*next_chooser, ctx);
    return absl::OkStatus();
  }

 protected:
  // The sum of squares for largest_norm's norm.
  Reduction reduction() const override {
    return round_state_.uses_norm() ? Reduction::kSquares : Reduction::kMaxAbs;
  }

 private:
  artopk::RoundState round_state_;
  const float* x_ = nullptr;  // this round's input: the memory's state, or x_copy_
  Feedback fb_;               // this round's memory update
  DeviceBuffer x_copy_, message_, chosen_;
  HostBuffer next_chooser_;
};

}  // namespace

void RegisterArtopkCudaCodec(CudaCodecRegistry& registry) {
  registry.MustRegisterLikeCpu(
      "artopk",
      [](const CodecParams& params,
         const FusedMemorySettings& m) -> absl::StatusOr<std::unique_ptr<CudaCodec>> {
        absl::StatusOr<artopk::Params> p = artopk::ReadParams(params);
        if (!p.ok()) return p.status();
        return MakeCudaCodec<ArtopkCudaCodec>(m, *p);
      });
}

}  // namespace bytecomp::compress::cuda
