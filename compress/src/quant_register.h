// Registration of the quantisation codecs that live in their own sources; called by
// RegisterQuantizationCodecs (quant_codecs.cc). Private to compress/src.
#pragma once

#include "bytecomp/compress/registry.h"

namespace bytecomp::compress {

void RegisterSketchCodec(CodecRegistry& registry);      // quant_sketch.cc
void RegisterInceptionnCodec(CodecRegistry& registry);  // quant_inceptionn.cc

}  // namespace bytecomp::compress
