// The quantisation codecs: qsgd, terngrad, natural, u8bit, dithering, sketch, inceptionn, one
// source each (quant_<name>.cc, with its wire format at the top or, for the codecs with CUDA
// kernels, in format/<name>_format.h).
//
// Common to them: the element count n travels in the data-plane header and most payloads
// repeat it as a leading u32, which Decode checks against the output length (a padded code
// stream alone cannot tell n from n - 1); packed codes are an LSB-first bit stream
// (format/bit_stream.h), padding bits 0. Decode rejects a wrong size, non-finite or negative
// header values, out-of-range codes and non-zero padding bits.
//
// Stochastic rounding (qsgd, terngrad, natural, dithering; all unbiased, terngrad for the
// clipped input) draws element i's uniform from CounterRandom(seed, key, round, node) at
// index i (elementwise.h), so the bytes are a function of (input, context) alone.
#include "quant_codecs.h"

namespace bytecomp::compress {

void RegisterQuantizationCodecs(CodecRegistry& registry) {
  RegisterQsgdCodec(registry);
  RegisterTernGradCodec(registry);
  RegisterNaturalCodec(registry);
  RegisterU8bitCodec(registry);
  RegisterDitheringCodec(registry);
  RegisterSketchCodec(registry);
  RegisterInceptionnCodec(registry);
}

}  // namespace bytecomp::compress
