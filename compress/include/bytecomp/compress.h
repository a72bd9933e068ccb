// The door of compress/: codecs by name, memories (error feedback, momentum correction) and
// server-side aggregators. Everything is CPU code; one instance of each per partition and
// direction (they keep per-partition state and scratch buffers, and are not thread-safe).
//
// Worker, push (per partition, per round):
//   auto codec  = CreateCodec("topk", {{"ratio", "0.01"}});     // StatusOr<unique_ptr<Codec>>
//   auto memory = CreateMemory("residual");                      // or nullptr for none
//   std::vector<uint8_t> payload(codec->MaxEncodedBytes(n));
//   CodecContext ctx{.key = key, .round = round, .node = rank, .seed = job_seed};
//   size_t bytes = *EncodeWithMemory(*codec, memory.get(), gradient, ctx,
//                                    absl::MakeSpan(payload), compensated, decoded);
//   send payload[0, bytes)
//
// Server (per partition): one aggregator, made once, reset each round:
//   auto agg = CreateAggregator("topk", {{"ratio", "0.01"}});
//   agg->Reset(n);  for each push: agg->Add(payload, ctx_of_that_push);  sum = *agg->Finish();
//   Two-way: encode `sum` with the pull codec and the server's own memory (EncodeWithMemory);
//   one-way: return the fp32 sum (or fp16 via CreateCodec("fp16")); a codec with
//   properties().sum_in_push_format (blocksparse) returns agg->EncodedSum() instead, which
//   the workers decode with their push codec.
//
// Worker, pull: codec->Decode(payload, ctx, output) or DecodeAdd(payload, ctx, accumulator).
//
// What a codec is, without an instance (its loss class, exchange, two rounds, GPU kernels):
//   const CodecFacts* facts = CodecFactsOf("artopk");   // codec.h, registry.h; null if unknown
//   if (facts->two_round) ...;   CodecIsLossless("blocksparse", params);
//
// Every error is an absl::Status that names what is wrong: an unknown codec or memory name
// lists the valid ones; a bad parameter lists the valid parameters with types and defaults;
// NaN/Inf input names the first bad element; a malformed payload is InvalidArgument.
// Wire formats: compress/include/bytecomp/compress/format/*.h for the codecs that also have
// CUDA kernels (shared with compress/cuda), the top of each codec's source for the others.
#pragma once

#include "bytecomp/compress/aggregator.h"
#include "bytecomp/compress/codec.h"
#include "bytecomp/compress/memory.h"
#include "bytecomp/compress/params.h"
#include "bytecomp/compress/registry.h"
#include "bytecomp/compress/two_round.h"
