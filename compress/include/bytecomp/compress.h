// The door of compress/: codecs by name, memories (error feedback, momentum correction) and
// server-side aggregators.
//
//   auto codec = bytecomp::compress::CreateCodec("topk", {{"ratio", "0.01"}});
//   std::vector<uint8_t> payload((*codec)->MaxEncodedBytes(n));
//   size_t bytes = *(*codec)->Encode(gradient, ctx, absl::MakeSpan(payload));
//   (*codec)->Decode(absl::MakeConstSpan(payload.data(), bytes), ctx, output);
//
// Memories: CreateMemory("residual") and EncodeWithMemory (memory.h). Aggregation:
// CreateAggregator(codec) (aggregator.h).
#pragma once

#include "bytecomp/compress/aggregator.h"
#include "bytecomp/compress/codec.h"
#include "bytecomp/compress/memory.h"
#include "bytecomp/compress/params.h"
#include "bytecomp/compress/registry.h"
