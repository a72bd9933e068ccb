// Registration of the quantisation codecs, one source each (private to compress/src);
// RegisterQuantizationCodecs (quant_codecs.cc) calls them in the order the names are listed.
#pragma once

#include "bytecomp/compress/registry.h"

namespace bytecomp::compress {

void RegisterQsgdCodec(CodecRegistry& registry);        // quant_qsgd.cc
void RegisterTernGradCodec(CodecRegistry& registry);    // quant_terngrad.cc
void RegisterNaturalCodec(CodecRegistry& registry);     // quant_natural.cc
void RegisterU8bitCodec(CodecRegistry& registry);       // quant_u8bit.cc
void RegisterDitheringCodec(CodecRegistry& registry);   // quant_dithering.cc
void RegisterSketchCodec(CodecRegistry& registry);      // quant_sketch.cc
void RegisterInceptionnCodec(CodecRegistry& registry);  // quant_inceptionn.cc

}  // namespace bytecomp::compress
