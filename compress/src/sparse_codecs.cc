// The sparsification codecs: topk, randomk, threshold, dgc, adaq (names and defaults as
// GRACE), blocksparse (OmniReduce) and artopk (AR-Topk, two rounds), one source each
// (sparse_<name>.cc; threshold beside topk). Their wire formats are in format/sparse_format.h
// (the sparse message of topk, threshold and dgc, and the index sections),
// format/randomk_format.h, format/adaq_format.h, format/blocksparse_format.h and
// format/artopk_format.h; how topk and dgc choose what to send in format/topk_select.h and
// format/dgc_threshold.h, shared with the CUDA codecs.
#include "sparse_codecs.h"

namespace bytecomp::compress {

void RegisterSparsificationCodecs(CodecRegistry& registry) {
  RegisterTopkCodec(registry);
  RegisterRandomkCodec(registry);
  RegisterThresholdCodec(registry);
  RegisterDgcCodec(registry);
  RegisterAdaqCodec(registry);
  RegisterBlocksparseCodec(registry);
  RegisterArtopkCodec(registry);
}

}  // namespace bytecomp::compress
